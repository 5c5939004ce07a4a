"""Scope locks (``worker.store.scope_locks``) on PostgreSQL: several scopes' locks in one
statement, taken in the keys' order."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.support.sql import recorded_statements
from worker.app import App
from worker.store import scope_locks

pytestmark = pytest.mark.postgres


def test_several_scopes_are_locked_by_one_statement_in_key_order(pg_app: App) -> None:
    """An import or an erasure over many scopes took one statement per scope (a round trip
    each on PostgreSQL). One statement now takes every lock, in the sorted keys' order, as
    before (two writers never hold each other's next lock)."""
    keys = [f'["agent-{i}",null,null]' for i in (3, 1, 2, 1)]
    with pg_app.uow() as uow, recorded_statements(pg_app) as seen:
        scope_locks.lock_scopes(uow.session, keys)
        held = uow.session.execute(text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND pid = pg_backend_pid() AND classid = :space"),
            {"space": scope_locks._SCOPE_LOCKS}).scalar_one()
        plan = [r[0] for r in uow.session.execute(
            text("EXPLAIN (VERBOSE, COSTS OFF) " + scope_locks._LOCK_ALL.text),
            {"space": scope_locks._SCOPE_LOCKS, "keys": sorted(set(keys))})]
    assert held == 3
    assert len([s for s in seen if s.startswith("SELECT pg_advisory_xact_lock")]) == 1, seen
    # The lock calls are computed in position order: either by the function scan itself,
    # which yields the keys in order (PostgreSQL knows WITH ORDINALITY's output is sorted by
    # it, and plans no Sort), or above a Sort on the position, never below one.
    locks = plan.index(next(line for line in plan if "pg_advisory_xact_lock" in line))
    sorts = [k for k, line in enumerate(plan) if line.lstrip(" ->").startswith("Sort")]
    assert all(locks < k for k in sorts), plan
    assert sorts or plan[0].startswith("Function Scan"), plan

"""Scope locks (``worker.store.scope_locks``) on PostgreSQL: several scopes' locks in one
statement, taken in the locks' own order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import text

from tests.support.sql import recorded_statements
from worker.app import App
from worker.store import scope_locks

pytestmark = pytest.mark.postgres


def test_several_scopes_are_locked_by_one_statement_in_lock_order(pg_app: App) -> None:
    """An import or an erasure over many scopes took one statement per scope (a round trip
    each on PostgreSQL). One statement now takes every lock, in one order for every writer (the
    locks' own: two writers never hold each other's next lock)."""
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
    # The lock calls are computed above the Sort on the keys' hashes (the locks), never below.
    locks = plan.index(next(line for line in plan if "pg_advisory_xact_lock" in line))
    sorts = [k for k, line in enumerate(plan) if line.lstrip(" ->").startswith("Sort")]
    assert sorts and all(locks < k for k in sorts), plan
    assert any("Sort Key: (hashtext(" in line for line in plan), plan


def _colliding_keys(app: App) -> tuple[str, str, str]:
    """Keys a < b < c (in the order the caller sorts them) where a and c share a lock: two
    scope keys of one ``hashtext``, found among generated ones (about ten pairs in 300,000)."""
    with app.engine.connect() as conn:
        a, c = conn.execute(text(
            "SELECT min(k), max(k) FROM (SELECT 'k' || g AS k FROM generate_series(1, 300000) g) s "
            "GROUP BY hashtext(k) HAVING count(*) = 2 ORDER BY min(k) LIMIT 1")).one()
    b = next(k for k in (a + "0", a + "~") if a < k < c)
    return a, b, c


def test_scopes_sharing_a_lock_never_deadlock_two_writers(pg_app: App) -> None:
    """Locks went in the keys' order. With hash(c) = hash(a), one writer of [a, b] took a's
    lock then b's, and one of [b, c] b's then c's (a's): each could hold what the other waited
    for, and PostgreSQL failed one ("deadlock detected"). A third transaction holding a's lock
    lines that up: the [a, b] writer waits at a, the [b, c] writer takes b and waits at a;
    released, a goes to the first, which then wants b. In the locks' own order both finish."""
    a, b, c = _colliding_keys(pg_app)
    errors: list[BaseException] = []
    done: list[str] = []

    def writer(keys: list[str]) -> None:
        try:
            with pg_app.uow() as uow:
                scope_locks.lock_scopes(uow.session, keys)
            done.append(keys[0])
        except BaseException as exc:  # noqa: BLE001 - the deadlock, reported below
            errors.append(exc)

    def waiting() -> int:
        with pg_app.engine.connect() as conn:
            return int(conn.execute(text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND classid = :space"), {"space": scope_locks._SCOPE_LOCKS}).scalar_one())

    with pg_app.uow() as holder:
        scope_locks.lock_scopes(holder.session, [a])
        first = threading.Thread(target=writer, args=([a, b],))
        first.start()
        _until(lambda: waiting() == 1)
        second = threading.Thread(target=writer, args=([b, c],))
        second.start()
        _until(lambda: waiting() == 2)
    for t in (first, second):
        t.join(timeout=30)
    assert not errors, errors
    assert sorted(done) == sorted([a, b])


def _until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("the writers never queued up")

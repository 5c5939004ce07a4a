"""The scope's lock in a phase's write on PostgreSQL (``worker.store.scope_locks``): taken
before any note row the write locks, inside the write's first note UPDATE when there is one (no
statement of its own), as a statement of its own before anything else the write touches."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from tests.phases.kit.test_write import SCOPE, _known, _pairs
from tests.support.factories import claimed_phase_context
from tests.support.sql import recorded_statements
from worker.app import App
from worker.phases.kit import WriteTarget, open_write
from worker.phases.kit.changes import Change

pytestmark = pytest.mark.postgres

_LOCK_OF = "pg_advisory_xact_lock(6582893, hashtext(:key))"  # scope_locks._SCOPE_LOCKS


@pytest.fixture
def app(pg_app: App) -> Iterator[App]:
    yield pg_app


def _held_elsewhere(app: App) -> bool:
    """Whether another transaction holds the scope's lock (tried from a connection of its own)."""
    with app.engine.connect() as conn:
        free = conn.execute(text(f"SELECT {_LOCK_OF.replace('pg_advisory', 'pg_try_advisory')}"),
                            {"key": SCOPE.key}).scalar_one()
        conn.rollback()
    return not free


def _write(app: App, changes: list[Change], known: Any) -> tuple[list[str], bool]:
    """One write of ``changes`` from the carried state: its statements, and whether the
    scope's lock was held while the write was still open."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    with recorded_statements(app) as seen, open_write(
            WriteTarget.of(ctx, "contradictions", parent)) as w:
        w.apply(changes, known=known)
        held = _held_elsewhere(app)
    return seen, held


def test_the_first_update_takes_the_lock_without_a_statement_of_its_own(app: App) -> None:
    changes = _pairs(app)
    seen, held = _write(app, changes, _known(app))
    assert held
    assert [s for s in seen if s.startswith("SELECT pg_advisory_xact_lock")] == []
    first = next(s for s in seen if not s.startswith("SELECT"))  # (the guard's reads before)
    assert first.startswith("UPDATE notes SET") and "pg_advisory_xact_lock" in first, seen
    assert not _held_elsewhere(app)  # released with the commit


def test_a_write_that_updates_no_note_takes_the_lock_on_its_own_first(app: App) -> None:
    """Verdict memory only (every pair judged independent): the lock is a statement of its
    own, before the judgements go in."""
    _pairs(app)
    ctx, parent = claimed_phase_context(app, SCOPE)
    with recorded_statements(app) as seen, open_write(
            WriteTarget.of(ctx, "contradictions", parent)) as w:
        w.judgement("contradictions.pair", "fp-1", ["aold", "anew"], "independent", "bench")
    assert [s.split(" ")[0:3] for s in seen if not s.startswith("SELECT judgements")][:2] == [
        ["SELECT", "pg_advisory_xact_lock(%(space)s,", "hashtext(%(key)s))"],
        ["INSERT", "INTO", "judgements"]], seen


def test_a_write_waiting_for_the_lock_holds_no_note_yet(app: App) -> None:
    """Another transaction (an undo, an erasure) holds the scope's lock: the write's first
    UPDATE waits for it before it locks any note, so the other can still lock every one of
    them; once it commits, the write goes on and applies every change."""
    changes = _pairs(app)
    known = _known(app)
    outcome: list[Any] = []
    with app.engine.connect() as other:
        other.execute(text(f"SELECT {_LOCK_OF}"), {"key": SCOPE.key})
        writer = threading.Thread(target=lambda: outcome.append(_write(app, changes, known)))
        writer.start()
        time.sleep(0.5)
        assert writer.is_alive() and outcome == []  # waiting for the scope's lock
        locked = other.execute(text(
            "SELECT id FROM notes WHERE id IN ('aold', 'bold', 'cold', 'anew', 'bnew', 'cnew') "
            "ORDER BY id FOR UPDATE NOWAIT")).scalars().all()
        assert len(locked) == 6  # NOWAIT: none of them is held by the waiting write
        other.commit()
    writer.join(timeout=30)
    assert not writer.is_alive() and len(outcome) == 1
    with app.uow() as uow:
        statuses = {r.id: r.status for r in uow.session.execute(text("SELECT id, status FROM notes"))}
    assert {k: statuses[f"{k}old"] for k in "abc"} == dict.fromkeys("abc", "revoked")

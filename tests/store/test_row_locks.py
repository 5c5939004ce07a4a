"""Multi-row locks of notes are taken in id order on PostgreSQL, whatever order the plan meets
the rows in (``worker.store.row_locks``): a writer waiting for a note another transaction holds
already holds every lower id it wants and none higher, so two such writers wait in one direction
only and never deadlock. Three connections on the real PostgreSQL: one holds the highest note,
the writer blocks on it, the third looks at what the writer holds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Connection

from tests.support.factories import add_notes
from worker.app import App
from worker.clock import utcnow
from worker.store.models import NoteRow
from worker.store.uow import UnitOfWork

pytestmark = pytest.mark.postgres

IDS = ["n-1", "n-2", "n-3"]
LOWER = IDS[:-1]


def _guarded_update(uow: UnitOfWork) -> object:
    rows = [{"b_id": i, "b_version": 1, "v_importance": 0.9, "v_version": 2,
             "v_updated_at": utcnow()} for i in reversed(IDS)]
    return uow.writes.update_notes(("importance",), rows)


# Each writer is given the ids against their order.
WRITERS: dict[str, Callable[[UnitOfWork], object]] = {
    # a phase's (and an erasure's) locked re-read: SELECT … FOR UPDATE
    "lock_state": lambda uow: uow.writes.lock_state(reversed(IDS)),
    # prune's checked marks: one UPDATE … WHERE id IN
    "mark_checked": lambda uow: uow.notes.mark_checked(reversed(IDS), utcnow()),
    # a phase's guarded update: one UPDATE per row (executemany)
    "update_notes": _guarded_update,
}


@pytest.fixture
def stored(pg_app: App) -> App:
    """Three notes stored against their ids' order: a scan meets n-3 first."""
    for note_id in reversed(IDS):
        add_notes(pg_app, {"id": note_id, "content": f"User keeps note {note_id}"})
    return pg_app


def _wait_for_lock(probe: Connection, pid: list[int]) -> None:
    """Until the writer's backend waits on a lock (5 s at most)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if pid:
            waiting = probe.execute(text("SELECT wait_event_type FROM pg_stat_activity "
                                         "WHERE pid = :pid"), {"pid": pid[0]}).scalar()
            probe.rollback()  # pg_stat_activity is read once per transaction
            if waiting == "Lock":
                return
        time.sleep(0.02)
    raise AssertionError("the writer never waited for the held note")


def _held_while_waiting(app: App, writer: Callable[[UnitOfWork], object]) -> set[str]:
    """The lower notes the writer holds while it waits for the highest one."""
    pid: list[int] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with app.uow() as uow:
                # The plan a large table gets: rows met in the order they lie, not the index's.
                uow.session.execute(text("SET LOCAL enable_indexscan = off"))
                uow.session.execute(text("SET LOCAL enable_bitmapscan = off"))
                pid.append(uow.session.execute(text("SELECT pg_backend_pid()")).scalar_one())
                writer(uow)
                uow.rollback()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    with app.engine.connect() as holder, app.engine.connect() as probe:
        holder.execute(select(NoteRow.id).where(NoteRow.id == IDS[-1]).with_for_update())
        thread = threading.Thread(target=write)
        thread.start()
        try:
            _wait_for_lock(probe, pid)
            free = set(probe.execute(select(NoteRow.id).where(NoteRow.id.in_(LOWER))
                                     .with_for_update(skip_locked=True)).scalars())
            probe.rollback()
        finally:
            holder.rollback()
            thread.join(10)
    assert not thread.is_alive() and not errors, errors
    return set(LOWER) - free


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_writer_waiting_for_a_note_holds_every_lower_id_and_no_higher(
        stored: App, name: str) -> None:
    """Another transaction holds n-3; the writer, handed n-3, n-2, n-1 and planned to meet
    them in that order, waits for n-3 holding n-1 and n-2: it locked them in id order. Without
    the order it waits for n-3 first holding nothing, and a second writer taking the ids
    in order would hold n-1 and wait for the first: each holding what the other wants."""
    assert _held_while_waiting(stored, WRITERS[name]) == set(LOWER)


def test_the_writers_complete_once_the_note_is_free(stored: App) -> None:
    """The same writers, nothing held: each locks and writes all three notes (the order
    changes no result)."""
    with stored.uow() as uow:
        assert sorted(uow.writes.lock_state(reversed(IDS))) == IDS
        assert _guarded_update(uow) == len(IDS)
        uow.notes.mark_checked(reversed(IDS), utcnow())
        checked: Any = uow.session.execute(
            select(NoteRow.id).where(NoteRow.last_checked_at.is_not(None))).scalars()
        assert sorted(checked) == IDS
        uow.rollback()

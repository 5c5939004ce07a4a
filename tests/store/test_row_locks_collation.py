"""Every lock on PostgreSQL is taken in one order, the ids' code-point order (Python's
``sorted``), whatever the database's collation (``worker.store.row_locks``): an ORDER BY of a
FOR UPDATE sorts byte-wise (COLLATE "C"); one under en_US.UTF-8 puts 'a1' before 'B1' where
Python puts it after, and a writer locking in one order deadlocks with one locking in the
other. The embedded server has no ICU and no OS locale to build a database sorting otherwise,
so the lock statements are read as the server gets them; and ``set_embeddings``, an
executemany of one-row UPDATEs, takes the scope's lock first, as every multi-statement write of
a scope's notes: it waits for a write in flight holding none of its notes."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, select, text
from sqlalchemy.dialects import postgresql, sqlite

from tests.store.test_row_locks import _wait_for_lock
from tests.support.factories import add_notes
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.store.models import NoteRow, ReviewItemRow
from worker.store.repositories.retention import ArchiveItem
from worker.store.row_locks import lock_order, lock_sorted
from worker.store.scope_locks import lock_scopes

# Sorted one way by Python (upper case first) and the other way by en_US.UTF-8.
IDS = ["a1", "B1", "a2", "B2"]
# The ORDER BY of each FOR UPDATE the server got, and whether it sorts byte-wise.
_ORDER = re.compile(r"ORDER BY ([\w.]+)( COLLATE \"C\")?")
# Integer ids sort the same under every collation.
_INTEGER_IDS = {"review_items.id"}


def test_the_lock_order_is_pythons_sorted_order_and_byte_wise_on_postgresql() -> None:
    from worker.store.repositories.writes import _STATES

    assert lock_sorted(IDS) == ["B1", "B2", "a1", "a2"]
    pg = str(_STATES[True].compile(dialect=postgresql.dialect()))  # type: ignore[no-untyped-call]
    lite = str(_STATES[False].compile(dialect=sqlite.dialect()))
    assert 'ORDER BY notes.id COLLATE "C" FOR UPDATE' in pg
    assert "COLLATE" not in lite and "FOR UPDATE" not in lite  # SQLite has no "C" collation
    assert lock_order(ReviewItemRow.id, True) is ReviewItemRow.id  # integers: as they are


@contextmanager
def _statements(app: App) -> Iterator[list[str]]:
    """Every SQL statement the app's engine sends while the block runs."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(app.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(app.engine, "before_cursor_execute", record)


def _take_every_lock(app: App) -> None:
    """Each repository method that locks many rows at once, once, rolled back."""
    now = utcnow()
    with app.uow() as uow:
        uow.writes.lock_state(IDS)
        uow.notes.mark_checked(IDS, now)
        uow.review.mark_stale([2, 1], now, "stale")
        uow.review.withdraw_run("run-x", now)
        uow.safety.subject_note_ids(note_id="a1")
        uow.safety.recording_conversation("conv-x")
        uow.safety.derived_closure(set(IDS))
        uow.safety.interrupt_runs(user_id=None, conversation_id=None, note_id="a1", now=now)
        uow.safety.cancel_user_runs("user-x", now)
        uow.safety.restore_notes([(i, 99, {"importance": 0.5}) for i in IDS], {})
        uow.examples.archive(Scope("agent-1"), [ArchiveItem("e-2", 1, "x"),
                                                ArchiveItem("e-1", 1, "x")],
                             run_id=None, reason="test", now=now)
        uow.rollback()


@pytest.mark.postgres
def test_every_multi_row_lock_sorts_its_ids_byte_wise(pg_app: App) -> None:
    add_notes(pg_app, *({"id": i, "content": f"User keeps note {i}"} for i in IDS))
    with _statements(pg_app) as seen:
        _take_every_lock(pg_app)
    locks = [s for s in seen if "FOR UPDATE" in s]
    orders = [m for s in locks for m in _ORDER.findall(s)]
    assert len(orders) >= 11, locks  # every method above sent its lock
    assert [col for col, collated in orders if not collated and col not in _INTEGER_IDS] == []


@pytest.mark.postgres
def test_set_embeddings_waits_for_the_scope_holding_none_of_its_notes(pg_app: App) -> None:
    """A phase's write holds the scope and the last note in lock order; ``set_embeddings`` of
    all four waits for the scope before it locks any note. Without the scope lock it holds the
    other three while it waits for that one, and the write, wanting one of them next (a note
    its change keeps, prune's checked marks), deadlocks with it."""
    add_notes(pg_app, *({"id": i, "content": f"User keeps note {i}"} for i in IDS))
    key = Scope("agent-1").key
    pid: list[int] = []
    errors: list[BaseException] = []
    vec = np.ones(8, dtype=np.float32)
    held = lock_sorted(IDS)[-1]

    def embed() -> None:
        try:
            with pg_app.uow() as uow:
                pid.append(uow.session.execute(text("SELECT pg_backend_pid()")).scalar_one())
                uow.notes.set_embeddings([(i, vec) for i in IDS], "probe-model", key)
                uow.commit()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    with pg_app.uow() as writer, pg_app.engine.connect() as probe:
        lock_scopes(writer.session, [key])
        writer.writes.lock_state([held])
        thread = threading.Thread(target=embed)
        thread.start()
        try:
            _wait_for_lock(probe, pid)
            free = set(probe.execute(select(NoteRow.id).where(NoteRow.id.in_(IDS))
                                     .with_for_update(skip_locked=True)).scalars())
            probe.rollback()
        finally:
            writer.rollback()
            thread.join(10)
    assert not thread.is_alive() and not errors, errors
    assert free == set(IDS) - {held}
    with pg_app.uow() as uow:
        models = set(uow.session.execute(select(NoteRow.embedding_model)).scalars())
    assert models == {"probe-model"}

"""NoteRepository.change_many: the bulk optimistic update consolidation and contradictions use."""

from __future__ import annotations

from sqlalchemy import select, update

from tests.support.factories import NOW, add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.store.models import NoteRow, OperationLogRow

SCOPE = Scope("agent-1", None, None)


def _load(app: App) -> list:
    with app.uow() as uow:
        return uow.notes.load_scope(SCOPE).notes


def test_change_many_updates_every_note_and_logs_each(app: App) -> None:
    """All notes move to the new values at version + 1, one operation-log row per note with the
    before image of the changed tracked fields."""
    add_notes(app, {"content": "likes tea"}, {"content": "likes green tea"},
              {"content": "drinks tea daily"})
    notes = _load(app)
    changes = {"status": "revoked", "comments": "merged"}
    with app.uow() as uow:
        stale = uow.notes.change_many(notes, dict.fromkeys((n.id for n in notes), changes),
                                      run_id=None, reason="test", now=NOW)
        uow.commit()
    assert stale == []
    assert all(n.version == 2 for n in notes)
    with app.uow() as uow:
        rows = uow.session.execute(select(NoteRow.status, NoteRow.version, NoteRow.comments)).all()
        logs = uow.session.execute(
            select(OperationLogRow.entity_id, OperationLogRow.before, OperationLogRow.after)
            .where(OperationLogRow.op == "update")).all()
    assert sorted(rows) == [("revoked", 2, "merged")] * 3
    assert sorted(r.entity_id for r in logs) == sorted(n.id for n in notes)
    assert all(r.before == {"status": "active", "comments": None, "version": 1} for r in logs)
    assert all(r.after == {"status": "revoked", "comments": "merged", "version": 2} for r in logs)


def test_change_many_writes_nothing_when_one_note_moved(app: App) -> None:
    """A note the host changed since the load (version moved) is named and nothing is written,
    not even for the other, still-fresh notes (R10)."""
    add_notes(app, {"content": "likes tea"}, {"content": "likes green tea"})
    notes = _load(app)
    with app.uow() as uow:  # the host edits the second note meanwhile
        uow.session.execute(update(NoteRow).where(NoteRow.id == notes[1].id)
                            .values(version=NoteRow.version + 1))
        uow.commit()
    with app.uow() as uow:
        stale = uow.notes.change_many(
            notes, {n.id: {"status": "revoked"} for n in notes}, run_id=None, reason="t", now=NOW)
        uow.commit()
    assert stale == [notes[1].id]
    with app.uow() as uow:
        statuses = uow.session.scalars(select(NoteRow.status)).all()
        logged = uow.session.scalar(select(OperationLogRow.id).where(OperationLogRow.op == "update"))
    assert statuses == ["active", "active"]
    assert logged is None
    assert [n.version for n in notes] == [1, 1]


def test_bulk_re_embedding_gives_each_note_its_own_vector(app: App) -> None:
    """set_embeddings (ORM bulk UPDATE by primary key) writes each note's own vector; a Core
    executemany without a WHERE clause would give every note the last one."""
    import numpy as np

    from worker.embeddings.refresh import ensure_scope_embeddings

    add_notes(app, {"content": "likes tea"}, {"content": "owns a red bicycle"},
              {"content": "works in Lisbon"})
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).values(embedding=None, embedding_model=None))
        uow.commit()
    assert ensure_scope_embeddings(app, SCOPE) == 3
    with app.uow() as uow:
        snap = uow.notes.load_scope(SCOPE)
    expected = app.embedder.embed([n.content for n in snap.notes])
    assert np.allclose(snap.vectors, np.asarray(expected, dtype=np.float32), atol=1e-6)

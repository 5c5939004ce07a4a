"""The scope load on SQLite and PostgreSQL: the same notes as the row-by-row read, the checked
marks, and the rows a model's vectors are missing for."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from sqlalchemy import update

from tests.support.factories import NOW, add_notes, days_ago
from worker.app import App
from worker.domain.types import Scope
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")


def test_the_scope_load_reads_what_the_row_read_does(app: App) -> None:
    """Every field, datetimes as aware UTC, flags, in id order; prune's checked marks beside."""
    add_notes(app, {"id": "n2", "content": "User lives in Berlin", "importance": 0.9,
                    "last_accessed_at": days_ago(3), "expires_at": days_ago(-9),
                    "source_conversation_id": "c1"},
              {"id": "n1", "content": "User drinks green tea"})
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == "n1").values(flags=["injection"]))
        uow.notes.mark_checked(["n2"], NOW)
        uow.commit()
    with app.uow() as uow:
        snap = uow.notes.load_scope(SCOPE, model=app.embedder.model_name)
        rows = {n.id: n for n in uow.notes.get_many(["n1", "n2"])}
    assert [n.id for n in snap.notes] == ["n1", "n2"]
    assert snap.notes == [rows["n1"], rows["n2"]]
    created = snap.notes[1].created_at
    assert snap.notes[1].expires_at == NOW.replace(day=10) and created is not None
    assert created.tzinfo
    assert snap.notes[0].flags == ["injection"]
    assert snap.checked == {"n1": None, "n2": NOW}
    assert snap.unembedded == [] and snap.vectors.shape[0] == 2


def test_rows_without_the_models_vector_are_listed_and_zero(app: App) -> None:
    """A note without a vector and one from another model: listed, their rows zero, the
    others' vectors as stored; without ``model`` a missing vector empties the matrix."""
    add_notes(app, *({"id": f"n{k}", "content": f"User likes colour number {k}"}
                     for k in range(3)))
    with app.uow() as uow:
        before = uow.notes.load_scope(SCOPE, model=app.embedder.model_name).vectors.copy()
        uow.session.execute(update(NoteRow).where(NoteRow.id == "n0").values(
            embedding=None, embedding_model=None))
        uow.session.execute(update(NoteRow).where(NoteRow.id == "n2").values(
            embedding_model="an-older-model"))
        uow.commit()
    with app.uow() as uow:
        snap = uow.notes.load_scope(SCOPE, model=app.embedder.model_name)
        plain = uow.notes.load_scope(SCOPE)
        bare = uow.notes.load_scope(SCOPE, vectors=False)
    assert snap.unembedded == [0, 2]
    assert not snap.vectors[[0, 2]].any()
    assert np.array_equal(snap.vectors[1], before[1])
    assert plain.vectors.shape == (3, 0)
    assert bare.vectors.shape == (3, 0) and [n.id for n in bare.notes] == ["n0", "n1", "n2"]


def test_the_loads_state_is_what_the_locked_re_read_returns(app: App) -> None:
    """What a write checks its changes against without re-reading (``ScopeSnapshot.state``)
    equals the locked re-read field for field: comments, valid_to, flags stored as a list, as
    [] and as JSON null, the checked mark, created_at; None for an id the load lacks."""
    add_notes(app, {"id": "n0", "content": "User drinks green tea"},
              {"id": "n1", "content": "User lives in Berlin", "importance": 0.9,
               "created_at": days_ago(4)},
              {"id": "n2", "content": "User walks the dog"},
              {"id": "n3", "content": "User reads on paper"},
              {"id": "gone", "content": "User had a cat"})
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == "n1").values(
            comments="fused from 2 notes\nflagged", valid_to=NOW + timedelta(days=30),
            flags=["injection", "review"]))
        uow.session.execute(update(NoteRow).where(NoteRow.id == "n2").values(flags=[]))
        uow.session.execute(update(NoteRow).where(NoteRow.id == "n3").values(flags=None))
        uow.session.execute(update(NoteRow).where(NoteRow.id == "gone").values(status="revoked"))
        uow.notes.mark_checked(["n0", "n1"], NOW)
        uow.commit()
    ids = ["n0", "n1", "n2", "n3"]
    with app.uow() as uow:
        for vectors in (True, False):
            snap = uow.notes.load_scope(SCOPE, vectors=vectors)
            assert snap.state(ids) == uow.writes.lock_state(ids)
            assert snap.state([*ids, "gone"]) is None
        state = snap.state(ids)
    assert state is not None
    assert state["n1"]["valid_to"] == NOW + timedelta(days=30) and state["n1"]["flags"] == [
        "injection", "review"]
    assert (state["n0"]["comments"], state["n2"]["flags"], state["n0"]["last_checked_at"]) == (
        None, [], NOW)


def test_counts_by_status_in_a_scope_and_in_all(app: App) -> None:
    """Per status: the scope's notes only when a scope is given, every note otherwise."""
    add_notes(app, {"id": "c1", "content": "User drinks green tea"},
              {"id": "c2", "content": "User lives in Berlin"},
              {"id": "c3", "content": "User owns a bicycle", "agent_id": "agent-2"})
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == "c2").values(status="archived"))
        uow.commit()
    with app.uow() as uow:
        assert uow.notes.count_by_status(SCOPE) == {"active": 1, "archived": 1}
        assert uow.notes.count_by_status(Scope("agent-2")) == {"active": 1}
        assert uow.notes.count_by_status(Scope("agent-3")) == {}
        assert uow.notes.count_by_status() == {"active": 2, "archived": 1}

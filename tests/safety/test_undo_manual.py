"""Undo (R17, R26) never retires a note a person took over since the run: marking a fused note
manual (``is_auto_generated`` false) keeps its version, so the version check alone let the undo
revoke it. A note the run created manual (a fused note with a manual source) is still retired.
Likewise a person's flags or comment written since over the run's annotation is not silently
restored over. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.phases.prune.test_lineage import _fused, _run
from tests.safety.test_undo import SCOPE, _fuse, _seed
from tests.safety.test_undo_races import RESTORE_LOCK
from tests.support.factories import NOW, add_entities
from tests.support.host_writes import host_sets, note_rows
from tests.support.safety import note_states, run_row
from tests.support.sql import before_first
from worker.app import App
from worker.host.fusion import fuse
from worker.safety.erase import erase
from worker.safety.undo import UndoRefused, undo_run
from worker.store.models import DreamRunRow, OperationLogRow


def test_undo_refuses_to_retire_a_fused_note_a_person_took_over_since(app: App) -> None:
    """The host marks the run's fused note manual: the undo, even with --force-cascade,
    refuses naming it and what to do, and writes nothing (before: the person's note was
    revoked); marked auto-generated again, the undo proceeds. A note created manual is still
    retired."""
    _seed(app)
    host_sets(app, "n2", is_auto_generated=False)
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    host_sets(app, fused, is_auto_generated=False)
    before = note_states(app)
    for force in (False, True):
        with pytest.raises(UndoRefused, match=f"note {fused} is manual .* is_auto_generated") \
                as refused:
            undo_run(app, run_id, force_cascade=force)
        assert str(refused.value).count("\n") == 0
        assert [r["id"] for r in refused.value.refused] == [fused]
        assert note_states(app) == before
    host_sets(app, fused, is_auto_generated=True)
    assert undo_run(app, run_id).retired == [fused]
    # A host fuse of a manual source creates a manual note (R26); nobody changed it since, so
    # undoing the fuse retires it and gives the sources back.
    done = fuse(app, ["n0", "n2"], "User likes tea number 0 and 2")
    assert undo_run(app, done.undo_id).retired == [done.note["id"]]


def test_undo_of_a_run_logged_before_the_insert_named_is_auto_generated(app: App) -> None:
    """A run logged before the insert's after-image named ``is_auto_generated`` (no such key):
    its fused note whose source is manual was created manual, so the undo still retires it;
    one whose sources are all auto-generated and that is manual now is refused."""
    _seed(app)
    host_sets(app, "n0", is_auto_generated=False)
    run_id = run_row(app, SCOPE)
    manual = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    taken = _fuse(app, run_id, ["n2", "n3"], "User likes tea a lot")
    host_sets(app, manual, is_auto_generated=False)  # as the run wrote it (R26)
    host_sets(app, taken, is_auto_generated=False)  # a person took it over since
    with app.uow() as uow:
        for row in uow.session.scalars(select(OperationLogRow).where(
                OperationLogRow.op == "insert")):
            assert row.after is not None
            row.after = {k: v for k, v in row.after.items() if k != "is_auto_generated"}
        uow.commit()
    with pytest.raises(UndoRefused, match=f"note {taken} is manual") as refused:
        undo_run(app, run_id)
    assert [r["id"] for r in refused.value.refused] == [taken]
    host_sets(app, taken, is_auto_generated=True)
    assert sorted(undo_run(app, run_id).retired) == sorted([manual, taken])


@pytest.mark.postgres
def test_a_takeover_landing_between_the_undos_read_and_its_restore_refuses_it(
        pg_app: App) -> None:
    """PostgreSQL, READ COMMITTED: the person marks the fused note manual after the undo read it
    and before its restore locks it (a host's write takes no scope lock): the restore's guard
    holds ``is_auto_generated`` at what the undo read, so the whole undo rolls back naming the
    note (before: the person's note was revoked)."""
    _seed(pg_app)
    run_id = run_row(pg_app, SCOPE)
    fused = _fuse(pg_app, run_id, ["n0", "n1"], "User likes tea")
    with before_first(pg_app, RESTORE_LOCK.format(table="notes"),
                      lambda: host_sets(pg_app, fused, is_auto_generated=False)), \
            pytest.raises(UndoRefused, match=f"note {fused} changed while the undo was being"):
        undo_run(pg_app, run_id)
    assert note_states(pg_app)[fused]["status"] == "active"


@pytest.mark.parametrize(("field", "value"), [("flags", ["checked-by-alice"]),
                                              ("comments", "Alice: keep this")])
def test_undo_refuses_to_write_over_a_hosts_annotation_made_since(
        app: App, field: str, value: object) -> None:
    """Sibling: the run annotated a note (flags, comments: no new version) and a person then
    wrote that field straight in the table, the version kept. The undo refuses naming the note
    and the field (before: it restored the run's before-image over the person's flags or
    comment, silently); --force-cascade restores anyway, marking it overwritten."""
    _seed(app)
    run_id = run_row(app, SCOPE)
    with app.uow() as uow:
        (note,) = uow.notes.get_many(["n2"])
        assert uow.notes.change(note, run_id=run_id, reason="flag", now=NOW,
                                flags=["contradiction_review"], comments="flagged for review")
        uow.commit()
    host_sets(app, "n2", **{field: value})
    before = note_states(app)
    with pytest.raises(UndoRefused, match=f"note n2 was edited since .its {field}, by the host"):
        undo_run(app, run_id)
    assert note_states(app) == before
    assert undo_run(app, run_id, force_cascade=True).overwritten == ["n2"]


def test_a_cascade_gives_back_active_a_note_an_erasure_restored_and_a_person_took_over(
        app: App) -> None:
    """The erasure gave a co-source back (active again) and a person then marked it manual.
    The erase id's own undo would retire it into the erased note and is refused for that
    (R8, ``test_undo_lost_successor``), naming the way out: the fusing run's forced undo, whose
    cascade undoes the erase id on the way and then gives the note back active, still the
    person's (before: refused over the takeover at the erase id's step, though the note would
    have ended active). A host fuse's sources the erasure gave back come back through the fuse
    id's forced undo, a note that was already manual when the erasure gave it back too."""
    _seed(app)
    host_sets(app, "n2", is_auto_generated=False)
    done = fuse(app, ["n2", "n3"], "User likes tea number 2 and 3")
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    erased = [erase(app, note_id=fused), erase(app, note_id=done.note["id"])]
    assert {"n0", "n1", "n2", "n3"} <= {i for e in erased for i in e.restored_ids}
    first_erase, second_erase = erased[0].erase_id, erased[1].erase_id
    assert first_erase is not None and second_erase is not None
    host_sets(app, "n0", is_auto_generated=False)
    before = note_states(app)
    for erase_id, way in ((first_erase, run_id), (second_erase, done.undo_id)):
        with pytest.raises(UndoRefused, match=f"would be retired into no active note.*"
                                              f"`dream undo {way} --force-cascade`"):
            undo_run(app, erase_id)
    assert note_states(app) == before
    assert undo_run(app, run_id, force_cascade=True).run_ids == [first_erase, run_id]
    assert undo_run(app, done.undo_id, force_cascade=True).run_ids == [second_erase,
                                                                       done.undo_id]
    assert {i: s["status"] for i, s in note_states(app).items()} == {
        "n0": "active", "n1": "active", "n2": "active", "n3": "active"}
    assert {i: r.is_auto_generated for i, r in note_rows(app).items()} == {
        "n0": False, "n1": True, "n2": False, "n3": True}


def test_undo_of_a_prune_refuses_to_re_retire_a_source_a_person_took_over_since(
        app: App) -> None:
    """Sibling: prune gave a fused note's clean source back (its conversation deleted) and a
    person marked the source manual; the run's undo refuses naming it, nothing written."""
    fused = _fused(app, ("c1", "c2"))
    add_entities(app, {"kind": "conversation", "id": "c1", "status": "deleted"})
    run_id = _run(app)
    assert note_states(app)["d2"]["status"] == "active"
    host_sets(app, "d2", is_auto_generated=False)
    before = note_states(app)
    with pytest.raises(UndoRefused,
                       match=f"cannot undo run {run_id}: note d2 is manual .a person.s note"):
        undo_run(app, run_id, force_cascade=True)
    assert note_states(app) == before
    host_sets(app, "d2", is_auto_generated=True)
    undo_run(app, run_id)
    assert note_states(app)["d2"]["status"] == "revoked" and fused in note_states(app)


def test_undo_of_a_prune_logged_before_it_recorded_is_auto_generated(app: App) -> None:
    """A restoration logged before its after-image named ``is_auto_generated`` cannot tell
    whether a note manual now was manual then: the prune's undo, which would retire the source
    it gave back again, refuses rather than retire what may be a person's note, saying the log
    does not record it. The consolidating run's forced undo, whose cascade undoes the prune on
    the way, gives the note back active, so that is no reason to refuse it."""
    fused = _fused(app, ("c1", "c2"))
    with app.uow() as uow:
        [consolidated] = uow.session.scalars(select(DreamRunRow.id)).all()
    add_entities(app, {"kind": "conversation", "id": "c1", "status": "deleted"})
    run_id = _run(app)
    host_sets(app, "d2", is_auto_generated=False)
    with app.uow() as uow:
        for row in uow.session.scalars(select(OperationLogRow).where(
                OperationLogRow.run_id == run_id)):
            row.after = {k: v for k, v in (row.after or {}).items() if k != "is_auto_generated"}
        uow.commit()
    before = note_states(app)
    with pytest.raises(UndoRefused, match="note d2 is manual and the log does not record"):
        undo_run(app, run_id)
    assert note_states(app) == before
    assert undo_run(app, consolidated, force_cascade=True).run_ids == [run_id, consolidated]
    after = note_states(app)
    assert (after["d1"]["status"], after["d2"]["status"], after[fused]["status"]) == (
        "active", "active", "revoked")

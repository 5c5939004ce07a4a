"""A run's write checked against its carried scope while the host writes without a lease, on
SQLite and PostgreSQL: a host write between the load and the write (a pin, a retirement, an
erasure) never lets a stale plan through, only the touched item is skipped, the operation
log's before-images are the rows as they were and undo restores them; on PostgreSQL a host
edit in flight (its row lock held) when the phase's UPDATE reaches the row."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import select, text, update

from tests.support.factories import add_notes, claimed_phase_context, days_ago
from tests.support.host_writes import host_sets
from worker.app import App
from worker.domain.types import Scope
from worker.phases.kit import (
    Change,
    ChangeKind,
    ItemStatus,
    Member,
    WriteTarget,
    open_write,
    supersede,
)
from worker.phases.kit.carry import ScopeLoad
from worker.phases.kit.changes import ItemResult
from worker.phases.kit.snapshot import RunJournal
from worker.runs import service
from worker.runs.context import PhaseContext
from worker.safety.erase import erase
from worker.safety.undo import undo_run
from worker.store.models import NoteRow, OperationLogRow
from worker.store.uow import StaleLease

SCOPE = Scope("agent-1")
_ROW = ("status", "version", "comments", "consolidated_into_id", "protection", "flags")


def _rows(app: App) -> dict[str, dict[str, Any]]:
    with app.uow() as uow:
        return {r.id: {f: getattr(r, f) for f in _ROW}
                for r in uow.session.scalars(select(NoteRow))}


def _log(app: App, run_id: str) -> dict[str, tuple[Any, Any]]:
    with app.uow() as uow:
        return {r.entity_id: (r.before, r.after) for r in uow.session.scalars(
            select(OperationLogRow).where(OperationLogRow.run_id == run_id))}


def _known(app: App) -> ScopeLoad:
    """The scope as an in-process run carries it: loaded once, before the plan."""
    with app.uow() as uow:
        return ScopeLoad(uow.notes.load_scope(SCOPE), RunJournal(), vectors=False)


def _pairs(app: App) -> list[Change]:
    """Three contradiction pairs: ``<k>old`` retired into ``<k>new``, planned at version 1."""
    add_notes(app, *({"id": f"{k}{side}", "content": f"fact {k} {side}",
                      "source_conversation_id": f"conv-{k}{side}",
                      "created_at": days_ago(10 if side == "old" else 1)}
                     for k in "abc" for side in ("old", "new")))
    with app.uow() as uow:
        notes = {n.id: n for n in uow.notes.load_scope(SCOPE).notes}
    return [supersede(f"pair {k}", [notes[f"{k}old"]], into=notes[f"{k}new"],
                      relation="superseded", reason="contradictions.conflict",
                      comment="[superseded]", append_comment=True) for k in "abc"]


def _write(ctx: PhaseContext, parent: str, changes: list[Change],
           known: ScopeLoad) -> list[ItemResult]:
    with open_write(WriteTarget.of(ctx, "contradictions", parent)) as w:
        return w.apply(changes, known=known)


def _only_b_skipped(app: App, ctx: PhaseContext, results: list[ItemResult],
                    before: dict[str, dict[str, Any]]) -> None:
    """Pairs a and c applied, pair b written nowhere; the before-images of what applied are
    the rows as they were when the write began."""
    assert [r.status for r in results][::2] == [ItemStatus.APPLIED, ItemStatus.APPLIED]
    assert results[1].status != ItemStatus.APPLIED, results[1]
    applied = ["aold", "cold"]
    log = _log(app, ctx.run_id)
    assert sorted(log) == applied
    for i in applied:
        assert log[i][0] == {"status": before[i]["status"], "comments": before[i]["comments"],
                             "consolidated_into_id": before[i]["consolidated_into_id"],
                             "version": before[i]["version"]}
        assert _rows(app)[i]["status"] == "revoked"


# ---- host writes that keep the version ------------------------------------------------------
@pytest.mark.parametrize("write", [
    pytest.param({"protection": "immutable"}, id="pins it immutable"),
    pytest.param({"protection": "protected"}, id="protects it"),
    pytest.param({"status": "archived"}, id="archives it"),
])
def test_a_host_write_that_keeps_the_version_never_lets_the_plan_retire_the_note(
        app: App, write: dict[str, Any]) -> None:
    """R10/R23: after the load the host pins (or archives) the source of pair b by writing
    the column alone, its version kept. The write checks pair b against the carried state
    (standard, active) and its guarded UPDATE holds only the version, comments and pointer:
    pair b must still not be written over the host's change: stale, alone (a pin is not the
    guard's to refuse: the plan read the note retirable, so it moved since). Each UPDATE from
    the carried state holds the columns a retirement decides on (``DECIDING_FIELDS``) at their
    before-images: it falls short, the write starts over with the locked re-read, as it always
    did before it trusted the carry."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    known = _known(app)
    host_sets(app, "bold", **write)
    before = _rows(app)
    results = _write(ctx, parent, changes, known)
    after = _rows(app)
    assert after["bold"] == before["bold"], "the host's change was overwritten"
    assert results[1].status == ItemStatus.STALE and results[1].stale_ids == ["bold"]
    _only_b_skipped(app, ctx, results, before)


def test_a_note_marked_manual_after_the_load_is_never_archived(app: App) -> None:
    """R26: the host takes over a note (``is_auto_generated`` false, its version kept) after
    archive's load; archive's backstop (never archive what a person wrote) must see it."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    add_notes(app, *({"id": i, "content": f"expired fact {i}", "is_auto_generated": True}
                     for i in ("x", "y", "z")))
    known = _known(app)
    changes = [Change(kind=ChangeKind.ARCHIVE, name=f"archive {i}", members=(Member(i, 1),),
                      comment="expired", reason="archive: expired") for i in ("x", "y", "z")]
    host_sets(app, "y", is_auto_generated=False)
    with open_write(WriteTarget.of(ctx, "archive", parent)) as w:
        results = w.apply(changes, known=known)
    with app.uow() as uow:
        status = dict(uow.session.execute(select(NoteRow.id, NoteRow.status)).all())
    assert status == {"x": "archived", "y": "active", "z": "archived"}
    assert [r.status for r in results][::2] == [ItemStatus.APPLIED] * 2


# ---- erasure -------------------------------------------------------------------------------
@pytest.mark.parametrize("erased", ["bold", "bnew"])
def test_an_erasure_after_the_load_skips_its_pair_alone_and_undo_restores_the_rest(
        app: App, erased: str) -> None:
    """The host erases a conversation after the load: the source of pair b, or the note pair b
    keeps. The erasure interrupts the run, so the write planned before it writes nothing
    (StaleLease). Written anyway from that state under a new claim, pair b is stale (its note
    is gone), a and c apply with the rows as they were in the log; once the run is stopped,
    undo gives a and c back exactly as they were."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    known = _known(app)
    assert erase(app, conversation_id=f"conv-{erased}").interrupted_runs == [ctx.run_id]
    before = _rows(app)
    assert erased not in before
    with pytest.raises(StaleLease):
        _write(ctx, parent, changes, known)
    assert _rows(app) == before
    epoch = service.claim_run(app, ctx.run_id)
    assert epoch is not None
    ctx = replace(ctx, epoch=epoch)
    results = _write(ctx, parent, changes, known)
    assert results[1].status == ItemStatus.STALE and results[1].stale_ids == [erased]
    _only_b_skipped(app, ctx, results, before)
    service.cancel_run(app, ctx.run_id)
    undone = undo_run(app, ctx.run_id)
    assert sorted(undone.restored) == ["aold", "cold"]
    again = _rows(app)
    for i in before:
        assert {**again[i], "version": None} == {**before[i], "version": None}, i
    assert again["aold"]["version"] == before["aold"]["version"] + 2  # the run's, undo's


# ---- PostgreSQL: a host edit in flight ------------------------------------------------------
_EDIT = {"version": NoteRow.version + 1, "importance": 0.9}


@pytest.mark.parametrize("app", [pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
@pytest.mark.parametrize(("edited", "values"), [
    pytest.param("bold", _EDIT, id="edits the source"),
    pytest.param("bnew", _EDIT, id="edits the kept note"),
    pytest.param("bold", {"protection": "immutable"}, id="pins the source"),
])
def test_a_host_edit_in_flight_on_postgres_is_waited_for_and_seen(
        app: App, edited: str, values: dict[str, Any]) -> None:
    """The host's edit of pair b's source or kept note (a new version), or its pin of the
    source (none), holds the row lock, not committed, when the phase's write reaches that
    row: the write waits for it, sees the change once it commits, starts over under the
    fence, and does not write pair b (stale), while pairs a and c apply."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    known = _known(app)
    out: list[Any] = []

    def phase() -> None:
        try:
            out.append(_write(ctx, parent, changes, known))
        except Exception as e:  # reported to the test's thread
            out.append(e)

    with app.engine.connect() as host:
        pid = host.execute(text("SELECT pg_backend_pid()")).scalar_one()
        host.execute(update(NoteRow).where(NoteRow.id == edited).values(**values))
        worker = threading.Thread(target=phase)
        worker.start()
        with app.engine.connect() as probe:  # until the phase's statement waits on the host
            waiting = text("SELECT count(*) FROM pg_stat_activity "
                           "WHERE :pid = ANY(pg_blocking_pids(pid))")
            while worker.is_alive() and not probe.execute(waiting, {"pid": pid}).scalar_one():
                probe.rollback()
                threading.Event().wait(0.02)
        assert worker.is_alive(), out  # it did wait on the host's row lock
        host.commit()
    worker.join()
    (results,) = out
    assert not isinstance(results, Exception), results
    assert results[1].status == ItemStatus.STALE and results[1].stale_ids == [edited]
    before = _rows(app)
    assert before["bold"]["status"] == "active"
    before.update({f"{k}old": {**before[f"{k}old"], "status": "active", "version": 1,
                               "comments": None, "consolidated_into_id": None} for k in "ac"})
    _only_b_skipped(app, ctx, results, before)

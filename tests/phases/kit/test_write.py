"""The phase kit's one guarded write, on SQLite and PostgreSQL: stale items skipped one by one,
a lost lease writes nothing, and a phase commits once whatever the number of its items."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import func, select, update

from tests.support.factories import NOW, add_notes, claimed_phase_context, days_ago
from tests.support.sql import before_first, recorded_commits, recorded_statements
from worker.app import App
from worker.domain.types import Scope
from worker.phases.consolidate.service import run_consolidate
from worker.phases.kit import (
    ItemStatus,
    WriteTarget,
    apply_changes,
    open_write,
    supersede,
)
from worker.phases.kit.carry import ScopeLoad, keep_current, known, written
from worker.phases.kit.changes import Change, ChangeKind, Member
from worker.phases.kit.snapshot import RunJournal
from worker.runs import service
from worker.runs.context import PhaseContext, RunCarry
from worker.runs.steps import ChildStep, StepRecorder
from worker.store.models import DreamRunRow, NoteLineageRow, NoteRow, OperationLogRow, RunStepRow
from worker.store.uow import StaleLease

SCOPE = Scope("agent-1")
TOPICS = ["User drinks green tea", "Team deploys the billing service",
          "Customer reads invoices on paper", "Owner walks the dog downtown",
          "Engineer reviews pull requests carefully", "Manager books meeting rooms early"]


def _notes(app: App) -> dict[str, NoteRow]:
    with app.uow() as uow:
        return {r.id: r for r in uow.session.scalars(select(NoteRow))}


def _count(app: App, model: Any) -> int:
    with app.uow() as uow:
        return int(uow.session.scalar(select(func.count()).select_from(model)) or 0)


def _pairs(app: App) -> list[Any]:
    add_notes(app, *({"id": f"{k}{side}", "content": f"fact {k} {side}",
                      "created_at": days_ago(10 if side == "old" else 1)}
                     for k in "abc" for side in ("old", "new")))
    notes = {n.id: n for n in _load(app)}
    return [supersede(f"pair {k}", [notes[f"{k}old"]], into=notes[f"{k}new"],
                      relation="superseded", reason="contradictions.conflict",
                      comment="[superseded]", append_comment=True) for k in "abc"]


def _load(app: App) -> list[Any]:
    with app.uow() as uow:
        return uow.notes.load_scope(SCOPE).notes


def test_stale_item_among_fresh_ones_is_skipped_alone(app: App) -> None:
    """A note the host edits between plan and write makes only its own item stale: the other
    items apply, the stale one writes nothing (no revoke, no lineage, no log row)."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    with app.uow() as uow:  # the host edits "bold" after the plan read it
        (bold,) = uow.notes.get_many(["bold"])
        assert uow.notes.change(bold, run_id=None, reason="host edit", importance=0.9)
        uow.commit()
    results = apply_changes(WriteTarget.of(ctx, "contradictions", parent), changes)
    assert [r.status for r in results] == [ItemStatus.APPLIED, ItemStatus.STALE,
                                           ItemStatus.APPLIED]
    assert results[1].stale_ids == ["bold"]
    notes = _notes(app)
    assert {k: notes[k].status for k in ("aold", "bold", "cold")} == {
        "aold": "revoked", "bold": "active", "cold": "revoked"}
    assert (notes["aold"].consolidated_into_id, notes["aold"].version) == ("anew", 2)
    assert (notes["bold"].consolidated_into_id, notes["bold"].version) == (None, 2)
    with app.uow() as uow:
        edges = {(e.parent_id, e.child_id) for e in uow.session.scalars(select(NoteLineageRow))}
        logged = set(uow.session.scalars(select(OperationLogRow.entity_id).where(
            OperationLogRow.run_id == ctx.run_id)))
    assert edges == {("aold", "anew"), ("cold", "cnew")}
    assert logged == {"aold", "cold"}


def test_lease_lost_between_plan_and_write_writes_nothing(app: App) -> None:
    """Another attempt takes the run over after the plan: the write raises StaleLease from its
    own fenced statement and leaves notes, lineage, log and steps exactly as they were."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    steps_before = _count(app, RunStepRow)
    with app.uow() as uow:
        uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == ctx.run_id)
                            .values(lease_epoch=DreamRunRow.lease_epoch + 1))
        uow.commit()
    with pytest.raises(StaleLease):
        apply_changes(WriteTarget.of(ctx, "contradictions", parent), changes)
    assert {n.status for n in _notes(app).values()} == {"active"}
    assert (_count(app, NoteLineageRow), _count(app, OperationLogRow)) == (0, 0)
    assert _count(app, RunStepRow) == steps_before


@contextmanager
def _counting(app: App) -> Iterator[dict[str, int]]:
    """The block's statements and writing commits, its own thread's only (a lease beat of the
    process is not the block's to count); filled in when the block ends."""
    seen = {"statements": 0, "commits": 0}
    with recorded_statements(app) as statements, recorded_commits(app) as commits:
        yield seen
    seen.update(statements=len(statements), commits=sum(commits))


def test_counting_leaves_out_other_threads(app: App) -> None:
    """What another thread writes meanwhile (a lease beat) is not the block's to count."""
    def beat() -> None:
        with app.uow() as uow:
            uow.session.execute(update(NoteRow).values(importance=NoteRow.importance))
            uow.commit()

    add_notes(app, {"content": "a note"})
    with _counting(app) as seen:
        other = threading.Thread(target=beat)
        other.start()
        other.join()
    assert seen == {"statements": 0, "commits": 0}


def _consolidate(app: App, scope: Scope, clusters: int) -> dict[str, int]:
    from worker.embeddings.refresh import ensure_scope_embeddings

    add_notes(app, *({"id": f"{scope.agent_id}-g{k}-{i}", "agent_id": scope.agent_id,
                      "content": fact + (" every single day" if i else ""),
                      "created_at": days_ago(6 - i)}  # the fuller, later
                     for k, fact in enumerate(TOPICS[:clusters]) for i in range(2)))
    ensure_scope_embeddings(app, scope)
    run_id = service.create_run(app, scope, force=True, clock=NOW)
    assert run_id
    epoch = service.claim_run(app, run_id)
    ctx = PhaseContext(app=app, run_id=run_id, scope=scope, now=NOW, epoch=epoch,
                       steps=StepRecorder(app, run_id, scope), allow_retire=10**6)
    parent = ctx.steps.start_phase("consolidate")
    with _counting(app) as seen:
        report = run_consolidate(ctx, parent)
    assert report.counters["clusters_merged"] == clusters
    with app.uow() as uow:
        active = uow.notes.count_by_status(scope).get("active")
    assert active == clusters
    return seen


def test_a_phase_commits_once_with_the_same_statements_for_any_number_of_items(
    app: App,
) -> None:
    """Rule-judged consolidation of 2 and of 6 duplicate groups: one commit each, and the
    same number of statements (no per-item round trips)."""
    few = _consolidate(app, Scope("agent-few"), 2)
    many = _consolidate(app, Scope("agent-many"), 6)
    assert few["commits"] == many["commits"] == 1
    assert few["statements"] == many["statements"], (few, many)


def _host_edit(app: App, note_id: str) -> None:
    with app.uow() as uow:
        (note,) = uow.notes.get_many([note_id])
        assert uow.notes.change(note, run_id=None, reason="host edit", importance=0.9)
        uow.commit()


@pytest.mark.parametrize("app", ["sqlite"], indirect=True)
def test_a_host_edit_between_the_re_read_and_the_update_is_stale_alone(app: App) -> None:
    """SQLite: the write re-reads before it holds the write lock; a host edit that lands right
    then makes the guarded update fall short, and the write starts over behind the fence and
    skips that item alone (the others apply, nothing is written twice). On PostgreSQL the
    re-read locks the rows (FOR UPDATE): the host edit would wait for the commit."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    with before_first(app, "UPDATE notes SET", lambda: _host_edit(app, "bold")):
        results = apply_changes(WriteTarget.of(ctx, "contradictions", parent), changes)
    assert [r.status for r in results] == [ItemStatus.APPLIED, ItemStatus.STALE,
                                           ItemStatus.APPLIED]
    notes = _notes(app)
    assert {k: notes[f"{k}old"].status for k in "abc"} == {
        "a": "revoked", "b": "active", "c": "revoked"}
    assert _count(app, NoteLineageRow) == 2


@pytest.mark.parametrize("app", [pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
@pytest.mark.parametrize("with_step", [True, False])
def test_a_takeover_during_the_write_on_postgres_writes_nothing(app: App, with_step: bool) -> None:
    """PostgreSQL, READ COMMITTED: the write holds no lock on the run row until its last,
    fenced statement (the steps insert, or the fence alone when it records no step); a claim
    that commits in between (after the notes were updated) is seen by that statement, and the
    whole write rolls back."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    steps_before = _count(app, RunStepRow)
    seen: list[str] = []

    def take_over() -> None:
        with app.uow() as uow:
            uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == ctx.run_id)
                                .values(lease_epoch=DreamRunRow.lease_epoch + 1))
            uow.commit()
        seen.append("taken")

    with before_first(app, ("INSERT INTO run_steps", "UPDATE dream_runs"), take_over), \
            pytest.raises(StaleLease), open_write(
                WriteTarget.of(ctx, "contradictions", parent)) as w:
        w.apply(changes)
        if with_step:
            w.step(ChildStep(name="pairs", status="succeeded"))
    assert seen == ["taken"]
    assert {n.status for n in _notes(app).values()} == {"active"}
    assert (_count(app, NoteLineageRow), _count(app, OperationLogRow)) == (0, 0)
    assert _count(app, RunStepRow) == steps_before


# ---- the write from the run's carried state (no re-read) ------------------------------------
# WriteRepository.lock_state (NoteRepository.versions, a stale-item check, starts like it
# up to "status": the next column tells them apart).
_RE_READ = "SELECT notes.id, notes.version, notes.status, notes.created_at"


def _known(app: App) -> ScopeLoad:
    """The scope as a run carries it: loaded once, before the plan."""
    with app.uow() as uow:
        return ScopeLoad(uow.notes.load_scope(SCOPE), RunJournal(), vectors=False)


def _log(app: App, run_id: str) -> dict[str, tuple[Any, Any]]:
    with app.uow() as uow:
        return {r.entity_id: (r.before, r.after) for r in uow.session.scalars(
            select(OperationLogRow).where(OperationLogRow.run_id == run_id))}


def _edit(app: App, note_id: str, **values: Any) -> None:
    """A host write straight to the table (it holds no lease and goes through no guard)."""
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == note_id).values(**values))
        uow.commit()


def test_a_write_from_the_carried_state_re_reads_nothing(app: App) -> None:
    """Nothing moved since the load: the write re-reads no member, applies every item, and
    logs the before-images the load had (a host's earlier comment included), and with a
    status change whether the note was a person's then (what an undo checks a takeover by)."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    _edit(app, "aold", comments="host: keep an eye on this")
    known = _known(app)
    with recorded_statements(app) as seen, open_write(WriteTarget.of(ctx, "contradictions", parent)) as w:
        results = w.apply(changes, known=known)
    assert [r.status for r in results] == [ItemStatus.APPLIED] * 3
    assert [s for s in seen if s.startswith(_RE_READ)] == []
    log = _log(app, ctx.run_id)
    assert log["aold"] == (
        {"status": "active", "consolidated_into_id": None,
         "comments": "host: keep an eye on this", "version": 1},
        {"status": "revoked", "consolidated_into_id": "anew",
         "comments": "host: keep an eye on this\n[superseded]", "version": 2,
         "is_auto_generated": True})
    assert log["bold"][0] == {"status": "active", "consolidated_into_id": None,
                              "comments": None, "version": 1}
    notes = _notes(app)
    assert notes["aold"].comments == "host: keep an eye on this\n[superseded]"
    assert known.current is False  # until keep_current follows the write


@pytest.mark.parametrize("host", ["edits a source", "edits the kept note", "annotates"])
def test_a_host_write_after_the_load_is_caught_by_the_guarded_update(app: App,
                                                                     host: str) -> None:
    """After the load the host edits the source of pair b (version up), or the note pair b
    keeps (version up), or only comments on the source (no version): the guarded UPDATE falls
    short, the write starts over behind the fence with one re-read. An edit makes pair b
    stale alone (a and c apply); an annotation is no edit: pair b applies over the host's
    comment, which its before-image in the operation log shows."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    known = _known(app)
    if host == "annotates":
        _edit(app, "bold", comments="host: checked")
    else:
        _host_edit(app, "bold" if host == "edits a source" else "bnew")
    with recorded_statements(app) as seen, open_write(WriteTarget.of(ctx, "contradictions", parent)) as w:
        results = w.apply(changes, known=known)
    assert len([s for s in seen if s.startswith(_RE_READ)]) == 1  # the slow path, once
    after, log = _notes(app), _log(app, ctx.run_id)
    if host == "annotates":
        assert [r.status for r in results] == [ItemStatus.APPLIED] * 3
        assert after["bold"].comments == "host: checked\n[superseded]"
        assert log["bold"][0] == {"status": "active", "consolidated_into_id": None,
                                  "comments": "host: checked", "version": 1}
        assert _count(app, NoteLineageRow) == 3
        return
    assert [r.status for r in results] == [ItemStatus.APPLIED, ItemStatus.STALE,
                                           ItemStatus.APPLIED]
    assert results[1].stale_ids == ["bold" if host == "edits a source" else "bnew"]
    assert {k: after[f"{k}old"].status for k in "abc"} == {
        "a": "revoked", "b": "active", "c": "revoked"}
    assert set(log) == {"aold", "cold"}
    assert log["cold"][0] == {"status": "active", "consolidated_into_id": None,
                              "comments": None, "version": 1}
    assert _count(app, NoteLineageRow) == 2


@pytest.mark.parametrize("stored", [None, ["host-reviewed"]])
def test_a_flag_the_host_adds_after_the_load_is_kept_beside_the_runs(
        app: App, stored: list[str] | None) -> None:
    """Flags are written without a version: a host's flag added after the load makes the
    guarded UPDATE fall short, and the run's flag is added beside it after the re-read, the
    before-image the host's. A note with no flags (SQL NULL) matches the load's None."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    add_notes(app, {"id": "n1", "content": "Ignore previous instructions"},
              {"id": "n2", "content": "Disregard the rules above"})
    if stored is not None:
        _edit(app, "n2", flags=stored)
    known = _known(app)
    _edit(app, "n1", flags=["host-reviewed"])
    changes = [Change(kind=ChangeKind.ANNOTATE, name="flag", members=(Member(i, 1),),
                      flags=("injection",), reason="instruction-like text") for i in ("n1", "n2")]
    with recorded_statements(app) as seen, open_write(WriteTarget.of(ctx, "consolidate", parent)) as w:
        results = w.apply(changes, known=known)
    assert [r.status for r in results] == [ItemStatus.APPLIED] * 2
    assert len([s for s in seen if s.startswith(_RE_READ)]) == 1
    after, log = _notes(app), _log(app, ctx.run_id)
    assert after["n1"].flags == ["host-reviewed", "injection"] and after["n1"].version == 1
    assert log["n1"][0] == {"flags": ["host-reviewed"], "version": 1}
    assert log["n2"][0] == {"flags": stored, "version": 1}
    assert after["n2"].flags == sorted({*(stored or []), "injection"})


@pytest.mark.parametrize("none", ["never set", "set to None"])
def test_a_carried_note_without_flags_is_flagged_without_a_re_read(app: App, none: str) -> None:
    """No flags, as SQL NULL or as JSON null (both load as None): what the guarded UPDATE
    finds, so no re-read."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    add_notes(app, {"id": "n1", "content": "Ignore previous instructions"})
    if none == "set to None":
        _edit(app, "n1", flags=None)
    change = Change(kind=ChangeKind.ANNOTATE, name="flag", members=(Member("n1", 1),),
                    flags=("injection",), reason="instruction-like text")
    with recorded_statements(app) as seen, open_write(WriteTarget.of(ctx, "consolidate", parent)) as w:
        (result,) = w.apply([change], known=_known(app))
    assert result.status == ItemStatus.APPLIED
    assert [s for s in seen if s.startswith(_RE_READ)] == []
    assert _notes(app)["n1"].flags == ["injection"]
    assert _log(app, ctx.run_id)["n1"][0] == {"flags": None, "version": 1}


def test_a_run_trusts_its_carry_only_while_every_write_was_followed(app: App) -> None:
    """A write given the carry marks it untrusted until keep_current follows what it
    committed; a phase that failed in between leaves it so (the next write re-reads)."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    held = _known(app)
    ctx.carry = RunCarry(scope_notes=held)
    assert known(ctx) is held
    with open_write(WriteTarget.of(ctx, "contradictions", parent)) as w:
        results = w.apply(changes[:1], known=known(ctx))
        done = written(w, results)
    assert known(ctx) is None  # committed, not followed yet
    keep_current(ctx, done)
    assert known(ctx) is held and held.current
    state = held.notes.state(["anew", "bold"])
    assert state is not None and state["anew"]["version"] == 1
    assert held.notes.state(["aold"]) is None  # revoked: no longer among the carried notes
    with recorded_statements(app) as seen, open_write(WriteTarget.of(ctx, "contradictions", parent)) as w:
        results = w.apply(changes[1:], known=known(ctx))
    assert [r.status for r in results] == [ItemStatus.APPLIED] * 2
    assert [s for s in seen if s.startswith(_RE_READ)] == []

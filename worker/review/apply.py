"""Applying one approved change through the phase's own write path, inside the approval's run.

Each kind rebuilds what its phase decided (a consolidate ``Decision``, a contradictions verdict,
an archive batch) with the notes at the versions the item was planned on, and hands it to the
code a run uses; that code re-checks the versions in its write transaction, so a note changed
between the approval's check and the write still makes the change stale, never a blind write.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from worker.clock import utcnow
from worker.domain.types import Note, RunStatus, StepStatus, fingerprint_notes
from worker.phases.kit import Change, Member, WriteTarget, open_write
from worker.phases.kit import ChangeKind as KitKind
from worker.phases.kit import ItemStatus as KitStatus
from worker.phases.prune.lineage import restore_sources
from worker.review.items import ChangeKind, ProposedChange
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.store.uow import StaleLease

OK, STALE, GUARDED = "ok", "stale", "guarded"
# The approval's run lost its lease while applying: an erasure in the scope interrupted it, or
# `dream runs cancel` cancelled it; the fenced write rolled back, nothing was written.
LOST = "lost"


def at_versions(notes: dict[str, Note], change: ProposedChange) -> dict[str, Note]:
    """The notes as the plan saw them: current fields, the item's versions (the fence)."""
    return {i: replace(n, version=change.versions.get(i, n.version)) for i, n in notes.items()}


def apply_change(ctx: PhaseContext, parent_step_id: str, change: ProposedChange,
                 notes: dict[str, Note], counters: dict[str, Any]) -> tuple[str, str | None]:
    """(ok | stale | guarded | lost, the guard's reason or the new note's id)."""
    try:
        return _apply(ctx, parent_step_id, change, notes, counters)
    except StaleLease:
        return LOST, None


def end_lost_run(app: Any, run_id: str) -> str:
    """The approval's run after ``LOST``: an interrupted one (an erasure) is cancelled, so no
    gate check resumes an approval nobody is applying; its status now."""
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if run is not None and run.status == RunStatus.INTERRUPTED.value:
            if uow.runs.finish_unclaimed(run, RunStatus.CANCELLED.value, utcnow(),
                                         status_reason="the approval lost its lease while "
                                                       "applying; nothing was written"):
                uow.runs.record_usage([run_id])
            uow.commit()
        return str(run.status) if run is not None else "gone"


def _apply(ctx: PhaseContext, parent_step_id: str, change: ProposedChange,
           notes: dict[str, Note], counters: dict[str, Any]) -> tuple[str, str | None]:
    if change.kind == ChangeKind.MERGE:
        return _merge(ctx, parent_step_id, change, notes, counters)
    if change.kind in (ChangeKind.REVOKE, ChangeKind.FLAG):
        return _contradiction(ctx, parent_step_id, change, notes, counters)
    return _archive(ctx, parent_step_id, change, counters)


def _merge(ctx: PhaseContext, parent_step_id: str, change: ProposedChange,
           notes: dict[str, Note], counters: dict[str, Any]) -> tuple[str, str | None]:
    from worker.phases.consolidate.apply import apply_all
    from worker.phases.consolidate.core import PlannedCluster
    from worker.phases.consolidate.decision import Decision

    p = change.payload
    members = [notes[i] for i in change.note_ids]
    sources = [notes[i] for i in change.source_ids if i in notes] or members
    d = Decision(str(p.get("name") or "approved merge"),
                 PlannedCluster([], float(p.get("similarity") or 0.0),
                                float(p.get("min_similarity") or 0.0)),
                 members, sources, verdict="merge", content=change.content or "",
                 reason=change.reason, rule=p.get("rule"))
    apply_all(ctx, parent_step_id, [d], counters)
    if d.new_id is not None:
        return OK, d.new_id
    return (GUARDED, d.reason) if d.verdict == "deferred" else (STALE, None)


def _contradiction(ctx: PhaseContext, parent_step_id: str, change: ProposedChange,
                   notes: dict[str, Note], counters: dict[str, Any]) -> tuple[str, str | None]:
    from worker.phases.contradictions.apply import Applier
    from worker.phases.contradictions.core import CandidatePair, Decision, Verdict

    p = change.payload
    a_id, b_id = sorted(change.versions)
    pair = CandidatePair(a_id, b_id, float(p.get("similarity") or 0.0),
                         fingerprint_notes([notes[a_id], notes[b_id]]), True)
    verdict = Verdict(pair, change.relation or "", float(change.confidence or 0.0),
                      change.reason)
    decision = Decision(str(p["action"]), str(p["kind"]), p.get("winner"), p.get("loser"),
                        str(p.get("why") or ""))
    applier = Applier(ctx, parent_step_id, notes, counters)
    entry = applier.apply(verdict, decision)
    applier.finish()
    action = entry["action"]
    if action == "guarded":
        return GUARDED, applier.guard_reason
    return (OK, None) if action in ("revoke", "flag") else (STALE, None)


class _NotAll(Exception):
    """Leaves the approval's write so it rolls back: the batch applies whole or not at all."""

    def __init__(self, result: str, reason: str | None = None) -> None:
        super().__init__(result)
        self.result, self.reason = result, reason


def archive_changes(change: ProposedChange) -> list[Change]:
    """The ARCHIVE items the phase would have written for this proposal, one per member."""
    p = change.payload
    comments: dict[str, str] = dict(p.get("comments") or {})
    reason = str(p.get("reason") or f"{change.phase}: approved")
    entity = "example" if p.get("entity") == "example" else "note"
    return [Change(kind=KitKind.ARCHIVE, name=i, members=(Member(i, v),),
                   comment=comments.get(i, ""), reason=reason, entity=entity,
                   owner_gone=bool(p.get("owner_gone")),
                   protected_ok=bool(p.get("allow_protected")))
            for i, v in sorted(change.versions.items())]


def _archive(ctx: PhaseContext, parent_step_id: str, change: ProposedChange,
             counters: dict[str, Any]) -> tuple[str, str | None]:
    """The phase's own guarded write (version re-check, the guard over the whole batch, the
    operation log and the step in the same transaction); all or nothing, as approved."""
    changes = archive_changes(change)
    target = WriteTarget.of(ctx, change.phase, parent_step_id)
    try:
        with open_write(target) as w:
            results = w.apply(changes, guard_each=False)
            guarded = next((r.reason for r in results if r.status == KitStatus.GUARDED), None)
            if guarded is not None:
                raise _NotAll(GUARDED, w.tripped or guarded)
            if any(r.status != KitStatus.APPLIED for r in results):
                raise _NotAll(STALE)
            done = sorted(m.id for c in changes for m in c.members)
            gone = set(change.payload.get("gone_conversations") or ())
            restored = restore_sources(w, done, gone) if gone else []
            w.step(ChildStep(
                name="approved archive", status=StepStatus.SUCCEEDED.value,
                input={"planned": len(changes)},
                output={"archived": done, "reason": changes[0].reason,
                        **({"restored": restored} if restored else {})}))
    except _NotAll as refused:
        if refused.result == GUARDED:
            assert refused.reason is not None
            with open_write(target) as w:  # why, recorded on its own: the archive rolled back
                w.trip(refused.reason, change.note_ids)
        return refused.result, refused.reason
    counters["archived"] = counters.get("archived", 0) + len(done)
    return OK, None

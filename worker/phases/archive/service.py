"""Archive: expired and long-unused notes and examples leave the active set (phase 4)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import structlog

from worker.domain.types import DEFAULT_NOTE_RETENTION_DAYS, PhaseReport, StepStatus
from worker.phases.archive.core import (
    Decision,
    ExamplePlan,
    NotePlan,
    RetentionPolicy,
    plan_examples,
    plan_notes,
)
from worker.phases.keep.judging import ReviewResult, review_keep
from worker.phases.kit import (
    Change,
    ChangeKind,
    Counters,
    ItemStatus,
    Member,
    WriteTarget,
    open_write,
)
from worker.phases.kit.carry import keep_current, known, load, written
from worker.review.changes import archive_change
from worker.review.items import seen_decided
from worker.review.propose import Proposals, proposals_for
from worker.review.propose import record as record_proposals
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.safety.crashpoints import crashpoint
from worker.store.repositories.examples import Example

log = structlog.get_logger(__name__)


@dataclass
class ArchiveCounters(Counters):
    """What the archive phase counts (its parent step's output)."""

    notes_expired: int = 0
    notes_stale: int = 0
    examples_expired: int = 0
    examples_stale: int = 0
    protected_preserved: int = 0
    manual_preserved: int = 0
    examples_manual_preserved: int = 0
    # Unused past retention but kept: the host records no read in the scope (set when any).
    unread_preserved: int | None = None


COUNTERS = tuple(ArchiveCounters().as_dict())


def run_archive(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
    notes, examples = _load(ctx)
    agent = ctx.agent()
    proposals = proposals_for(ctx)
    notes = [n for n in notes if n.id not in proposals.held]  # waiting for their review
    zero = ArchiveCounters().ints()
    if agent is not None and agent.auto_archive_enabled is False:
        return PhaseReport("archive", StepStatus.SKIPPED.value, zero,
                           reason="auto-archive is disabled for this agent")
    policy = RetentionPolicy(
        note_retention_days=agent.note_retention_days if agent else DEFAULT_NOTE_RETENTION_DAYS,
        example_retention_days=agent.example_retention_days if agent else 180,
        protected_inactive_days=ctx.settings.archive.protected_inactive_days,
    )
    note_plan = plan_notes(notes, policy, ctx.now)
    example_plan = plan_examples(examples, policy, ctx.now)
    if not (note_plan.expired or note_plan.stale or example_plan.expired or example_plan.stale
            or note_plan.protected_preserved or note_plan.manual_preserved
            or note_plan.unread_preserved or example_plan.manual_preserved):
        return PhaseReport("archive", StepStatus.NO_ITEMS.value, zero,
                           reason="nothing expired or unused past retention")

    review = _review(ctx, notes, note_plan, policy)
    stale = note_plan.stale
    kept: list[str] = []
    deferred: list[str] = []
    if review is not None:
        asked = set(review.asked)
        kept = sorted(i for i in asked if review.result.keep.get(i) is True)
        deferred = sorted(i for i in asked if i not in review.result.keep)
        stale = [d for d in stale if d.id not in set(kept) | set(deferred)]

    if _propose(ctx, proposals, note_plan, stale, example_plan):
        note_plan, stale = replace(note_plan, expired=[]), []
        example_plan = replace(example_plan, expired=[], stale=[])
    done = _apply(ctx, parent_step_id, note_plan, stale, example_plan, review, kept, deferred)
    counters: dict[str, Any] = ArchiveCounters(
        notes_expired=len(done["notes_expired"]), notes_stale=len(done["notes_stale"]),
        examples_expired=len(done["examples_expired"]),
        examples_stale=len(done["examples_stale"]),
        protected_preserved=len(note_plan.protected_preserved),
        manual_preserved=len(note_plan.manual_preserved),
        examples_manual_preserved=len(example_plan.manual_preserved),
        unread_preserved=len(note_plan.unread_preserved) or None,
        notes_held=len(done["held"]) if done["held"] else None,
    ).ints()
    record_proposals(ctx, proposals, counters)
    log.info("archive.applied", run_id=ctx.run_id, scope=ctx.scope.key, kept_by_review=len(kept),
             deferred=len(deferred), **counters)
    result = review.result if review else None
    return PhaseReport(
        "archive", StepStatus.SUCCEEDED.value, counters,
        tokens_in=result.tokens_in if result else 0, tokens_out=result.tokens_out if result else 0,
        calls=result.calls if result else 0,
    )


def _load(ctx: PhaseContext) -> tuple[list[Any], list[Example]]:
    """The scope's active notes (from the run's carried scope in-process, else read with the
    agent row) and its active examples, which only this phase reads."""
    held = load(ctx, vectors=False).notes.notes if ctx.carry is not None else None
    with ctx.uow() as uow:
        examples = uow.examples.active(ctx.scope)
        if held is None:
            ctx.agent(uow)
            held = uow.retention.active_notes(ctx.scope)
    return held, examples


def _propose(ctx: PhaseContext, proposals: Proposals, note_plan: NotePlan,
             stale: list[Decision], example_plan: ExamplePlan) -> bool:
    """Review before apply (mode propose): each archiving becomes a review item. Archive's
    rules settle what they archive, so safe_auto applies them."""
    batches = (("note", note_plan.expired, "archive: expired"),
               ("note", stale, "archive: unused past retention"),
               ("example", example_plan.expired, "archive: expired"),
               ("example", example_plan.stale, "archive: unsuccessful and unused"))
    if not any(b[1] for b in batches) or not proposals.wants(settled_by_rule=True):
        return False
    for entity, decisions, reason in batches:
        for d in decisions:
            proposals.add(archive_change("archive", d.id, d.version, reason=reason,
                                         comment=d.comment, entity=entity,
                                         allow_protected=entity == "note",
                                         seen=seen_decided(d.id, d.decided)))
    return True


class _Review:
    def __init__(self, asked: list[str], result: ReviewResult) -> None:
        self.asked = asked
        self.result = result


def _review(ctx: PhaseContext, notes: list[Any], plan: NotePlan,
            policy: RetentionPolicy) -> _Review | None:
    """archive.review=llm: high-importance notes about to go for inactivity are shown to the model."""
    settings = ctx.settings.archive
    if settings.review != "llm" or ctx.app.llm is None:
        return None
    by_id = {n.id: n for n in notes}
    idle = {d.id: d.idle_days for d in plan.stale}
    important = [by_id[d.id] for d in plan.stale if by_id[d.id].importance >= settings.high_importance]
    if not important:
        return None
    result = review_keep(ctx, "archive", [
        {"id": n.id, "type": n.type, "content": n.content, "importance": n.importance,
         "days_unused": idle[n.id],
         "created_at": n.created_at.isoformat() if n.created_at else None}
        for n in important
    ], {"now": ctx.now.date().isoformat(), "retention_days": policy.note_retention_days},
        {n.id: n.version for n in important})
    return _Review([n.id for n in important], result)


_BATCHES = {
    "notes_expired": ("note", "archive: expired"),
    "notes_stale": ("note", "archive: unused past retention"),
    "examples_expired": ("example", "archive: expired"),
    "examples_stale": ("example", "archive: unsuccessful and unused"),
}


def _changes(name: str, decisions: list[Decision]) -> list[Change]:
    entity, reason = _BATCHES[name]
    # The plan already keeps immutable and recently used protected notes out (R23): a
    # protected note long unused may go, an immutable one never.
    # ``expect``: a renewal or a pin since the plan makes the note stale, skipped alone.
    return [Change(kind=ChangeKind.ARCHIVE, name=name, members=(Member(d.id, d.version),),
                   comment=d.comment, reason=reason, entity=entity, protected_ok=True,
                   expect={d.id: dict(d.decided)} if d.decided else {})
            for d in decisions]


def _apply(
    ctx: PhaseContext, parent_step_id: str, note_plan: NotePlan, stale: list[Decision],
    example_plan: ExamplePlan, review: _Review | None, kept: list[str], deferred: list[str],
) -> dict[str, list[str]]:
    """The phase's one guarded write: every archive (notes and examples, the guard's share
    asked once for all notes), the review's steps and one step per batch."""
    planned = {"notes_expired": note_plan.expired, "notes_stale": stale,
               "examples_expired": example_plan.expired, "examples_stale": example_plan.stale}
    changes = [c for name, decisions in planned.items() for c in _changes(name, decisions)]
    done: dict[str, list[str]] = {name: [] for name in [*planned, "held"]}
    held = ctx.carry.scope_notes if ctx.carry is not None else None
    with open_write(WriteTarget.of(ctx, "archive", parent_step_id)) as w:
        results = w.apply(changes, guard_each=False,
                          journal=held.journal if held is not None else None, known=known(ctx))
        for step in review.result.steps if review else []:
            w.step(step)
        for name in planned:
            mine = [r for r in results if r.change.name == name]
            if not mine or any(r.status == ItemStatus.GUARDED for r in mine):
                continue  # nothing planned, or held back by the guard (its trip says so)
            done[name] = [r.change.members[0].id for r in mine if r.applied]
            archived = set(done[name])
            w.step(ChildStep(
                name=name.replace("_", " "), status=StepStatus.SUCCEEDED.value,
                input={"planned": len(mine)},
                output={"archived": sorted(archived), "dry_run": ctx.dry_run,
                        "stale": sorted(r.change.members[0].id for r in mine
                                        if r.change.members[0].id not in archived)},
            ))
        if (note_plan.protected_preserved or note_plan.manual_preserved
                or note_plan.unread_preserved or example_plan.manual_preserved
                or kept or deferred):
            w.step(ChildStep(
                name="preserved", status=StepStatus.SUCCEEDED.value,
                output={"protected": note_plan.protected_preserved,
                        "manual": note_plan.manual_preserved,
                        "unread": note_plan.unread_preserved,
                        "manual_examples": example_plan.manual_preserved,
                        "kept_by_review": kept, "deferred": deferred},
            ))
        if w.tripped is not None:
            done["held"] = [d.id for d in [*note_plan.expired, *stale]]
            w.trip(w.tripped, done["held"])
        crashpoint("archive.after_archive")
        wrote = written(w, results)
    keep_current(ctx, wrote)
    return done

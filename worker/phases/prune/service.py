"""Prune: archive notes whose agent, user, company or source conversation is gone (phase 3)."""

from __future__ import annotations

import structlog

from worker.domain.types import PhaseReport, StepStatus
from worker.phases.keep.judging import ReviewResult, review_keep
from worker.phases.prune.core import (
    REF_ORDER,
    Orphan,
    count_by_kind,
    count_unknown,
    find_orphans,
    references_of,
)
from worker.references import ReferenceChecker, make_reference_checker
from worker.review.changes import archive_change
from worker.review.propose import Proposals, proposals_for
from worker.review.propose import record as record_proposals
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.safety.crashpoints import crashpoint
from worker.safety.guard import OWNER_GONE_REASON, check_retire, record_trip
from worker.store.repositories.retention import ArchiveItem, RetentionRepository

log = structlog.get_logger(__name__)


def _counters(checked: int, archived: list[Orphan],
              unknown: dict[str, int] | None = None) -> dict[str, int]:
    by_kind = count_by_kind(archived)
    unknown = unknown or dict.fromkeys(REF_ORDER, 0)
    return {
        "notes_checked": checked, "notes_archived": len(archived),
        "orphaned_agents": by_kind["agent"], "orphaned_users": by_kind["user"],
        "orphaned_companies": by_kind["company"],
        "orphaned_conversations": by_kind["conversation"],
        # Notes whose entity has no record: never a reason to retire (R25), shown so that an
        # empty or partial registry is visible.
        "unknown_agents": unknown["agent"], "unknown_users": unknown["user"],
        "unknown_companies": unknown["company"], "unknown_conversations": unknown["conversation"],
    }


def run_prune(
    ctx: PhaseContext, parent_step_id: str, checker: ReferenceChecker | None = None
) -> PhaseReport:
    settings = ctx.settings.prune
    checker = checker or make_reference_checker(ctx.app)
    with ctx.uow() as uow:
        notes = RetentionRepository(uow.session).prune_candidates(ctx.scope, settings.max_notes_per_run)
    proposals = proposals_for(ctx)
    notes = [n for n in notes if n.id not in proposals.held]  # waiting for their review
    if not notes:
        return PhaseReport("prune", StepStatus.NO_ITEMS.value, _counters(0, []),
                           reason="no auto-generated notes to check")

    # One batched, cached look-up per entity type for the whole batch (never one per note).
    wanted: dict[str, set[str]] = {k: set() for k in REF_ORDER}
    for note in notes:
        for kind, entity_id in references_of(note).items():
            wanted[kind].add(entity_id)
    records = {kind: checker.records(kind, ids) for kind, ids in wanted.items() if ids}
    orphans = find_orphans(notes, records)
    unknown = count_unknown(notes, records)

    review = _review(ctx, orphans)
    to_archive: list[Orphan] = []
    kept: list[str] = []
    deferred: list[str] = []
    for orphan in orphans:
        if review is not None and orphan.only_conversation:
            decision = review.keep.get(orphan.note.id)
            if decision is None:
                deferred.append(orphan.note.id)
                continue
            if decision:
                kept.append(orphan.note.id)
                continue
        to_archive.append(orphan)

    archived_ids: list[str] = []
    guard_reason: str | None = None
    # A scope whose agent/user/company is recorded disabled or deleted is retired whole: that
    # is one explicit decision, not a blast-radius accident. Everything else (a conversation at a
    # time, ids merely absent from a host table) counts against the guard's share (R20).
    if proposed := _propose(ctx, proposals, to_archive):
        to_archive = []
    owner_gone = [o for o in to_archive if o.owner_recorded_gone]
    guarded = [o for o in to_archive if not o.owner_recorded_gone]
    planned_ids = [o.note.id for o in guarded]
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        if not ctx.dry_run:
            guard_reason = check_retire(uow, ctx, [o.note for o in guarded])  # R20
            if guard_reason:
                guarded = []
            to_archive = owner_gone + guarded
            retention = RetentionRepository(uow.session)
            archived_ids = retention.archive_notes(
                ctx.scope,
                [ArchiveItem(o.note.id, o.note.version, o.comment(ctx.now)) for o in owner_gone],
                run_id=ctx.run_id, reason=OWNER_GONE_REASON, now=ctx.now,
            ) + retention.archive_notes(
                ctx.scope,
                [ArchiveItem(o.note.id, o.note.version, o.comment(ctx.now)) for o in guarded],
                run_id=ctx.run_id, reason="prune: orphaned", now=ctx.now,
            )
            # Deferred notes stay unchecked so the next run looks at them first.
            uow.notes.mark_checked([n.id for n in notes if n.id not in set(deferred)], ctx.now)
        else:
            archived_ids = [o.note.id for o in to_archive]
        for step in review.steps if review else []:
            ctx.steps.child(uow, parent_step_id, "prune", step)
        done = set(archived_ids)
        stale = [o.note.id for o in to_archive if o.note.id not in done]
        ctx.steps.child(uow, parent_step_id, "prune", ChildStep(
            name="orphans", status=StepStatus.SUCCEEDED.value if orphans else StepStatus.NO_ITEMS.value,
            input={"notes_checked": len(notes),
                   "lookups": {k: checker.lookups[k] for k in REF_ORDER}},
            output={
                "archived": {o.note.id: [d.describe() for d in o.dead]
                             for o in to_archive if o.note.id in done},
                "kept_by_review": kept, "deferred": deferred,
                "stale": stale, "dry_run": ctx.dry_run,
                **({"proposed": proposed} if proposed else {}),
            },
        ))
        crashpoint("prune.after_archive")
        uow.commit()
    if guard_reason:
        record_trip(ctx, parent_step_id, "prune", guard_reason, planned_ids)
    counters_extra: dict[str, int] = {}
    record_proposals(ctx, proposals, counters_extra)
    archived = [o for o in to_archive if o.note.id in set(archived_ids)]
    log.info("prune.applied", run_id=ctx.run_id, scope=ctx.scope.key, checked=len(notes),
             archived=len(archived), kept=len(kept), deferred=len(deferred), stale=len(stale))
    return PhaseReport(
        "prune", StepStatus.SUCCEEDED.value,
        {**_counters(len(notes), archived, unknown), **counters_extra},
        tokens_in=review.tokens_in if review else 0, tokens_out=review.tokens_out if review else 0,
        calls=review.calls if review else 0,
    )


def _review(ctx: PhaseContext, orphans: list[Orphan]) -> ReviewResult | None:
    """prune.review=llm: notes whose only dead reference is their conversation go to the model."""
    askable = [o for o in orphans if o.only_conversation]
    if ctx.settings.prune.review != "llm" or not askable or ctx.app.llm is None:
        return None
    return review_keep(ctx, "prune", [
        {"id": o.note.id, "type": o.note.type, "content": o.note.content,
         "created_at": o.note.created_at.isoformat() if o.note.created_at else None,
         "missing": [d.describe() for d in o.dead]}
        for o in askable
    ], {"now": ctx.now.date().isoformat()})


def _propose(ctx: PhaseContext, proposals: Proposals, orphans: list[Orphan]) -> list[str]:
    """Review before apply (mode propose): every archiving becomes a review item, one a note.
    Prune's rules settle what they archive, so safe_auto applies them."""
    if not orphans or not proposals.wants(settled_by_rule=True):
        return []
    for o in orphans:
        proposals.add(archive_change(
            "prune", o.note.id, o.note.version,
            reason=OWNER_GONE_REASON if o.owner_recorded_gone else "prune: orphaned",
            comment=o.comment(ctx.now), owner_gone=o.owner_recorded_gone))
    return [o.note.id for o in orphans]

"""Prune: archive notes whose agent, user, company or source conversation is gone (phase 3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from worker.domain.types import Note, PhaseReport, Protection, StepStatus
from worker.phases.keep.judging import ReviewResult, review_keep
from worker.phases.kit import Change, ChangeKind, ItemStatus, WriteTarget, members_of, open_write
from worker.phases.kit.carry import keep_current, known, load, written
from worker.phases.prune.core import (
    REF_ORDER,
    Orphan,
    as_of,
    count_unknown,
    dead_conversations,
    find_orphans,
    lineage_references,
    references_of,
)
from worker.phases.prune.counters import PruneCounters
from worker.phases.prune.lineage import RESTORED, Behind, read_behind, restore_sources
from worker.references import ReferenceChecker, make_reference_checker, records_of
from worker.review.changes import archive_change
from worker.review.items import seen_of
from worker.review.propose import Proposals, proposals_for
from worker.review.propose import record as record_proposals
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.safety.crashpoints import crashpoint
from worker.safety.guard import OWNER_GONE_REASON
from worker.store.repositories.references import EntityRecord

log = structlog.get_logger(__name__)

_KEPT = (Protection.IMMUTABLE.value, Protection.PROTECTED.value)  # never prune candidates
_EPOCH = datetime.min.replace(tzinfo=UTC)


def _counters(checked: int, archived: list[Orphan],
              unknown: dict[str, int] | None = None) -> dict[str, Any]:
    return PruneCounters.of(checked, archived, unknown).ints()


@dataclass
class _Sorted:
    """The orphans after the model's say: to archive, kept by it, deferred (it did not answer)."""

    to_archive: list[Orphan] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # what the blast-radius guard held back
    # The notes to archive that give back what was retired into them, the lineage behind them
    # and the gone conversations it was checked against (``_behind``).
    givers: set[str] = field(default_factory=set)
    behind: Behind | None = None
    dead: set[str] = field(default_factory=set)


def run_prune(
    ctx: PhaseContext, parent_step_id: str, checker: ReferenceChecker | None = None
) -> PhaseReport:
    settings = ctx.settings.prune
    checker = checker or make_reference_checker(ctx.app)
    notes, absorbed, rotating = _candidates(ctx, settings.max_notes_per_run)
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
        # A fused note's sources' conversations: in the same look-up, no statement of their own.
        wanted["conversation"].update(lineage_references(note))
    records = as_of(records_of(checker, {kind: ids for kind, ids in wanted.items() if ids}),
                    ctx.now)
    orphans = find_orphans(notes, records)
    review = _review(ctx, orphans) if settings.review == "llm" else None
    plan = _sort(orphans, review)
    _behind(ctx, checker, records, plan, absorbed)
    proposed = _propose(ctx, proposals, plan)
    if proposed:
        plan.to_archive = []
    archived = _write(ctx, parent_step_id, notes, orphans, plan, review, checker, proposed,
                      rotating=rotating)
    counters = _counters(len(notes), archived, count_unknown(notes, records))
    if plan.held:
        counters["notes_held"] = len(plan.held)
    record_proposals(ctx, proposals, counters)
    log.info("prune.applied", run_id=ctx.run_id, scope=ctx.scope.key, checked=len(notes),
             archived=len(archived), kept=len(plan.kept), deferred=len(plan.deferred))
    return PhaseReport(
        "prune", StepStatus.SUCCEEDED.value, counters,
        tokens_in=review.tokens_in if review else 0, tokens_out=review.tokens_out if review else 0,
        calls=review.calls if review else 0,
    )


def _behind(ctx: PhaseContext, checker: ReferenceChecker,
            records: dict[str, dict[str, EntityRecord | None]], plan: _Sorted,
            absorbed: set[str]) -> None:
    """The notes to archive for a gone conversation that something was retired into (a fused
    note always; else as the load saw it), the lineage behind them (one read per generation)
    and whether the conversations on it are gone (the checker, one batch for those not looked
    up yet): a note is given back only when its own conversations are alive. Nothing is read
    unless such a note goes."""
    plan.givers = {o.note.id for o in plan.to_archive if o.for_conversation
                   and (o.inherited or o.note.id in absorbed)}
    if not plan.givers or ctx.dry_run:
        return
    with ctx.uow() as uow:
        plan.behind = read_behind(plan.givers, lambda ids: uow.retention.lineage_parents(
            ids, tuple(sorted(RESTORED))))
    known = records.get("conversation", {})
    if more := sorted(plan.behind.conversations - known.keys()):
        looked = as_of(records_of(checker, {"conversation": more}), ctx.now)
        records = {**records, "conversation": {**known, **looked.get("conversation", {})}}
    plan.dead = dead_conversations(records)


def _candidates(ctx: PhaseContext, limit: int) -> tuple[list[Note], set[str], bool]:
    """Active, auto-generated, non-protected notes, least recently checked first (never checked
    first): from the run's carried scope in-process, else one read. With them, those a retired
    note points at, and whether the budget left some out: only then does the next run's choice
    depend on this run's marks."""
    if ctx.carry is None:
        with ctx.uow() as uow:
            notes, absorbed = uow.retention.prune_candidates(ctx.scope, limit + 1, ctx.now)
            ctx.agent(uow)  # on the same transaction; proposals ask for it next
        return notes[:limit], absorbed, len(notes) > limit
    snap = load(ctx, vectors=False).notes
    # A check stamped after the run's clock (a run with a later --now) counts as none: else
    # the note sorted after every other for as long, and was never checked again.
    checked = {i: at for i, at in snap.checked.items() if at is not None and at <= ctx.now}
    mine = [n for n in snap.notes if n.is_auto_generated and n.protection not in _KEPT]
    # The SQL order of ``prune_candidates``: never checked first, then oldest check, age, id.
    mine.sort(key=lambda n: (checked.get(n.id) is not None, checked.get(n.id) or _EPOCH,
                             n.created_at or _EPOCH, n.id))
    return mine[:limit], snap.absorbed, len(mine) > limit


def _review(ctx: PhaseContext, orphans: list[Orphan]) -> ReviewResult | None:
    """prune.review=llm: notes whose only dead reference is their conversation go to the model."""
    askable = [o for o in orphans if o.only_conversation]
    if not askable or ctx.app.llm is None:
        return None
    return review_keep(ctx, "prune", [
        {"id": o.note.id, "type": o.note.type, "content": o.note.content,
         "created_at": o.note.created_at.isoformat() if o.note.created_at else None,
         "missing": [d.describe() for d in o.dead]}
        for o in askable
    ], {"now": ctx.now.date().isoformat()}, {o.note.id: o.note.version for o in askable})


def _sort(orphans: list[Orphan], review: ReviewResult | None) -> _Sorted:
    plan = _Sorted()
    for orphan in orphans:
        if review is not None and orphan.only_conversation:
            decision = review.keep.get(orphan.note.id)
            if decision is None:
                plan.deferred.append(orphan.note.id)
                continue
            if decision:
                plan.kept.append(orphan.note.id)
                continue
        plan.to_archive.append(orphan)
    return plan


def _change(ctx: PhaseContext, o: Orphan) -> Change:
    # A scope whose agent/user/company is recorded disabled or deleted is retired whole: that
    # is one explicit decision, not a blast-radius accident. Everything else (a conversation at a
    # time, ids merely absent from a host table) counts against the guard's share (R20).
    # ``expect``: a note the host pinned (or took over) since the candidates were read is
    # stale, skipped alone; the guard would refuse it and block the whole run.
    gone, n = o.owner_recorded_gone, o.note
    return Change(kind=ChangeKind.ARCHIVE, name=n.id, members=members_of([n]),
                  comment=o.comment(ctx.now), owner_gone=gone,
                  reason=OWNER_GONE_REASON if gone else "prune: orphaned",
                  detail={"dead": [d.describe() for d in o.dead]},
                  expect={n.id: {"protection": n.protection,
                                 "is_auto_generated": n.is_auto_generated}})


def _write(ctx: PhaseContext, parent_step_id: str, notes: list[Note], orphans: list[Orphan],
           plan: _Sorted, review: ReviewResult | None, checker: ReferenceChecker,
           proposed: list[str], *, rotating: bool) -> list[Orphan]:
    """The phase's one guarded write: archives (the guard's share asked once for all), the
    checked marks, the review's and the orphans' steps. The orphans archived.

    Marks are written only while the scope has more candidates than one run checks
    (``rotating``): they order the next run's share. When every candidate fits, every run checks
    them all and a mark would order nothing, so none is written: marking a whole scope rewrote
    every note row on each run, the largest write of the phase."""
    changes = [_change(ctx, o) for o in plan.to_archive]
    held = ctx.carry.scope_notes if ctx.carry is not None else None
    checked: list[str] = []
    with open_write(WriteTarget.of(ctx, "prune", parent_step_id)) as w:
        results = w.apply(changes, guard_each=False,
                          journal=held.journal if held is not None else None, known=known(ctx))
        if rotating and not ctx.dry_run:
            # Deferred notes stay unchecked so the next run looks at them first.
            deferred = set(plan.deferred)
            checked = [n.id for n in notes if n.id not in deferred]
            w.lock_scope()
            w.uow.notes.mark_checked(checked, ctx.now)
        for step in review.steps if review else []:
            w.step(step)
        done = {r.change.name for r in results if r.applied}
        # A note archived for a gone conversation (its own or a source's): what was retired
        # into it and came from elsewhere is active again (owner gone: the whole scope goes,
        # nothing comes back).
        restored = restore_sources(w, sorted(plan.givers & done), plan.dead,
                                   plan.behind.parents if plan.behind else None)
        shown = [o for o, r in zip(plan.to_archive, results, strict=True)
                 if r.status != ItemStatus.GUARDED]
        w.step(ChildStep(
            name="orphans",
            status=StepStatus.SUCCEEDED.value if orphans else StepStatus.NO_ITEMS.value,
            input={"notes_checked": len(notes),
                   "lookups": {k: checker.lookups[k] for k in REF_ORDER}},
            output={
                "archived": {o.note.id: [d.describe() for d in o.dead]
                             for o in shown if o.note.id in done},
                "kept_by_review": plan.kept, "deferred": plan.deferred,
                "stale": [o.note.id for o in shown if o.note.id not in done],
                **({"restored": restored} if restored else {}),
                "dry_run": ctx.dry_run,
                **({"proposed": proposed} if proposed else {}),
            },
        ))
        if w.tripped is not None:
            plan.held = [r.change.name for r in results if not r.change.owner_gone]
            w.trip(w.tripped, plan.held)
        crashpoint("prune.after_archive")
        wrote = written(w, results, checked=checked)
    keep_current(ctx, wrote)
    if restored and ctx.carry is not None:
        ctx.carry.scope_notes = None  # notes active again: the next phase reads the scope
    return [o for o in plan.to_archive if o.note.id in done]


def _propose(ctx: PhaseContext, proposals: Proposals, plan: _Sorted) -> list[str]:
    """Review before apply (mode propose): every archiving becomes a review item, one a note.
    Prune's rules settle what they archive, so safe_auto applies them."""
    orphans = plan.to_archive
    if not orphans or not proposals.wants(settled_by_rule=True):
        return []
    for o in orphans:
        proposals.add(archive_change(
            "prune", o.note.id, o.note.version,
            reason=OWNER_GONE_REASON if o.owner_recorded_gone else "prune: orphaned",
            comment=o.comment(ctx.now), owner_gone=o.owner_recorded_gone,
            seen=seen_of([o.note]),
            gone_conversations=_gone_for(o, plan)))
    return [o.note.id for o in orphans]


def _gone_for(o: Orphan, plan: _Sorted) -> list[str]:
    """The gone conversations an approval of archiving ``o`` checks what it gives back against:
    its own and those on the lineage behind the notes to archive; none when it gives nothing."""
    if o.note.id not in plan.givers:
        return []
    near = {d.entity_id for d in o.dead if d.kind == "conversation"}
    return sorted(plan.dead & (near | (plan.behind.conversations if plan.behind else set())))

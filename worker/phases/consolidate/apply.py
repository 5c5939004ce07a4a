"""Applying decisions: one guarded write for the phase — fused notes inserted, their sources
revoked, lineage, verdict memory and every cluster's step — through the phase kit."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from worker.domain.types import Note, StepStatus
from worker.phases.consolidate.core import (
    PlannedCluster,
    fused_fields,
    majority_type,
    revocation_comment,
)
from worker.phases.consolidate.counters import ConsolidateCounters
from worker.phases.consolidate.decision import (
    KEEP_SEPARATE,
    KIND,
    LINEAGE,
    PHASE,
    VERDICT_COUNTER,
    ClusterVerdict,
    Decision,
)
from worker.phases.kit import (
    Change,
    ItemResult,
    ItemStatus,
    NewNote,
    PhaseWrite,
    RunJournal,
    WriteTarget,
    embed_new_notes,
    open_write,
    supersede,
)
from worker.phases.kit.carry import Written, keep_current, known, written
from worker.review.changes import merge_change as review_merge
from worker.review.propose import Proposals
from worker.runs.context import PhaseContext
from worker.safety.crashpoints import crashpoint

GUARD_STOPPED = "blast-radius guard stopped this run's merges"
OPEN_REASON = "rules cannot settle these; left for a model or the host"


@dataclass
class Unit:
    """Decisions recorded together: one model-judged cluster, or the merges the rules settled
    in one cluster plus the notes they left open (``open_notes``, rules only)."""

    decisions: list[Decision]
    name: str = ""
    cluster: PlannedCluster | None = None
    open_notes: list[Note] | None = None


def merge_change(d: Decision) -> Change:
    """The SUPERSEDE a merge decision asks for (its fused note's id fixed here)."""
    fields = fused_fields(d.members, d.sources)
    d.new_id = d.new_id or str(uuid.uuid4())
    note = NewNote(id=d.new_id, content=d.content, type=majority_type(d.members),
                   reason=f"consolidated {len(d.members)} notes", **fields)
    return supersede(d.name, d.members, new_note=note, relation=LINEAGE, reason="consolidated",
                     comment=revocation_comment(d.new_id, d.reason),
                     detail={"similarity": d.cluster.similarity, "rule": d.rule})


def apply_all(ctx: PhaseContext, parent_step_id: str, decisions: list[Decision],
              counters: Any) -> None:
    """One write for ``decisions`` (what ``judge_and_apply_with_rules`` calls per cluster, and
    an approved proposal); ``counters`` typed or a plain dict, which the counts are added to."""
    typed = counters if isinstance(counters, ConsolidateCounters) else ConsolidateCounters()
    write_units(ctx, parent_step_id, [Unit(decisions)], typed)
    if typed is not counters:
        for key, value in typed.ints().items():
            counters[key] = counters.get(key, 0) + value


def write_units(ctx: PhaseContext, parent_step_id: str, units: Sequence[Unit],
                counters: ConsolidateCounters, *, flags: Sequence[Change] = (),
                journal: RunJournal | None = None, proposals: Proposals | None = None) -> Written:
    """The phase's one write: flags, then every merge; then each unit's steps in order.
    Merges the apply mode holds back (``proposals``, worker.review) are recorded, not applied.
    What it wrote, once committed, keeps the run's carried scope current."""
    merges = [d for u in units for d in u.decisions if d.verdict == ClusterVerdict.MERGE]
    held = {id(d) for d in merges if proposals is not None and proposals.active
            and proposals.wants(settled_by_rule=d.rule is not None)}
    merges = [d for d in merges if id(d) not in held]
    changes = [merge_change(d) for d in merges]
    vectors = embed_new_notes(ctx.app, changes) if not ctx.dry_run else {}
    with open_write(WriteTarget.of(ctx, PHASE, parent_step_id)) as w:
        results = w.apply([*flags, *changes], vectors=vectors, journal=journal,
                          known=known(ctx))
        outcome = {id(d): r for d, r in zip(merges, results[len(flags):], strict=True)}
        # Merges not written but as good as done (proposed, or a dry run's): each leaves the
        # open rest one note-to-be, never its sources back as open notes.
        to_be = held | {k for k, r in outcome.items() if r.status == ItemStatus.DRY_RUN}
        for u in units:
            for d in u.decisions:
                if id(d) in held:
                    _record_proposed(w, d, proposals, counters)
                else:
                    _record(w, d, outcome.get(id(d)), counters)
            if u.open_notes is not None:
                _record_open(w, u, counters, to_be)
        done = written(w, results, vectors)
    keep_current(ctx, done)
    return done


def _record_proposed(w: PhaseWrite, d: Decision, proposals: Proposals | None,
                     counters: ConsolidateCounters) -> None:
    assert proposals is not None
    proposals.add(review_merge(d))
    counters["clusters_proposed"] = counters.get("clusters_proposed", 0) + 1
    w.step(d.child(StepStatus.SKIPPED.value, verdict="proposed"))


def _record(w: PhaseWrite, d: Decision, r: ItemResult | None,
            counters: ConsolidateCounters) -> None:
    if r is not None and r.status == ItemStatus.DRY_RUN:
        counters.clusters_merged += 1
        d.new_id = None
        w.step(d.child(StepStatus.SKIPPED.value, dry_run=True))
        return
    if r is not None and r.status == ItemStatus.APPLIED:
        # Crash points inside the one write: a crash at any of them commits nothing (R9).
        crashpoint("consolidate.after_insert")
        crashpoint("consolidate.after_half_revocations")
        crashpoint("consolidate.before_step")
        w.step(d.child(StepStatus.SUCCEEDED.value, new_note_id=d.new_id))
        counters.clusters_merged += 1
        counters.notes_revoked += len(d.members)
        return
    d.new_id = None
    if r is not None and r.status == ItemStatus.STALE:
        counters.clusters_skipped_stale += 1
        d.verdict = ClusterVerdict.STALE
        w.step(d.child(StepStatus.SKIPPED.value, verdict=ClusterVerdict.STALE,
                       stale_ids=r.stale_ids, proposed_reason=d.reason))
        return
    if r is not None:  # guarded: deferred, the first one with the guard's own reason
        counters.notes_held = (counters.notes_held or 0) + len(d.members)
        first = not counters.guard_tripped
        if first:
            counters.guard_tripped = 1
            w.trip(r.reason, [n.id for n in d.members])
        d.verdict, d.reason = ClusterVerdict.DEFERRED, r.reason if first else GUARD_STOPPED
    counters[VERDICT_COUNTER[ClusterVerdict(d.verdict)]] += 1
    if d.verdict == ClusterVerdict.REFUSED:
        w.judgement(KIND, d.fingerprint, [n.id for n in d.members], KEEP_SEPARATE,
                    d.reason or None)
    w.step(d.child(StepStatus.SKIPPED.value))


def _record_open(w: PhaseWrite, u: Unit, counters: ConsolidateCounters,
                 to_be: Collection[int] = frozenset()) -> None:
    """What the rules left of a cluster: open notes, plus each merged group's fused note (or
    the group itself when it was not written; a proposed or dry-run group counts as its one
    note-to-be, listed nowhere: its sources listed open too told a host to fuse them again)."""
    assert u.open_notes is not None and u.cluster is not None
    remaining = list(u.open_notes)
    for d in u.decisions:
        if d.new_id is not None:
            remaining.append(Note(id=d.new_id, scope=d.members[0].scope, content=d.content))
        elif id(d) not in to_be:
            remaining.extend(d.members)
    if len(remaining) + sum(id(d) in to_be for d in u.decisions) < 2:
        return
    counters.clusters_open += 1
    # Beside a merge step of the same cluster, the open rest reads apart from it by name.
    name = f"{u.name} rest" if u.decisions else u.name
    open_decision = Decision(name, u.cluster, remaining, remaining,
                             verdict=ClusterVerdict.OPEN, reason=OPEN_REASON)
    w.step(open_decision.child(StepStatus.SKIPPED.value))

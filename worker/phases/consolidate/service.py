"""The consolidate phase: short read → clusters → judge (model or rules, no transaction open) →
one short transaction per cluster → steps."""

from __future__ import annotations

from typing import Any

import structlog

from worker.domain.types import Note, PhaseReport, Scope, StepStatus
from worker.phases.consolidate.apply import apply_all
from worker.phases.consolidate.core import plan_clusters
from worker.phases.consolidate.decision import PHASE
from worker.phases.consolidate.judging import judge_and_apply_with_rules, judge_with_model
from worker.runs.context import PhaseContext
from worker.safety.injection import injection_signals
from worker.similarity import neighbour_pairs

log = structlog.get_logger(__name__)

INJECTION_FLAG = "injection"
COUNTERS = (
    "notes_scanned", "clusters_found", "clusters_merged", "clusters_refused",
    "clusters_skipped_stale", "clusters_invalid", "notes_revoked", "tokens_in", "tokens_out",
    "clusters_known_refused", "clusters_deferred", "clusters_open", "notes_flagged", "leftovers",
    "relative_time_reasks", "clusters_relative_time_refused", "omission_warnings",
)


def run_consolidate(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
    settings = ctx.settings.consolidate
    llm = ctx.app.llm
    counters: dict[str, Any] = dict.fromkeys(COUNTERS, 0)
    counters["judge"] = "llm" if llm is not None else "rules"
    with ctx.uow() as uow:
        snap = uow.notes.load_scope(ctx.scope)
        produced = uow.notes.inserted_by_run(ctx.run_id, ctx.scope)
    # R3: a retried attempt plans exactly what a crash-free run would have planned after the
    # merges the interrupted attempt committed; the notes those merges inserted are this run's
    # output, never its input (a crash-free run could not have merged them again).
    held_out = len(snap.notes)
    snap = snap.without(produced)
    held_out -= len(snap.notes)
    notes = snap.notes
    counters["notes_scanned"] = len(notes)
    if held_out:
        counters["notes_skipped_same_run"] = held_out
    flagged = _flag_injections(ctx, notes)
    counters["notes_flagged"] = len(flagged)
    if flagged:
        counters["flagged_ids"] = flagged
    if len(notes) < 2 or snap.vectors.shape[1] == 0:
        return PhaseReport(PHASE, StepStatus.NO_ITEMS.value, counters)

    pairs = neighbour_pairs(snap.vectors, settings.threshold, ctx.settings.ann_threshold)
    # The rule judge settles pairs too (identical notes); a model is only asked about clusters.
    min_size = settings.min_cluster_size if llm is not None else 2
    plan = plan_clusters(notes, snap.vectors, pairs, settings.threshold, min_size,
                         settings.max_cluster_size)
    counters["clusters_found"] = len(plan.clusters)
    counters["leftovers"] = len(plan.leftovers)
    if plan.leftovers:
        counters["leftover_ids"] = [notes[i].id for i in plan.leftovers][:100]
    if not plan.clusters:
        return PhaseReport(PHASE, StepStatus.NO_ITEMS.value, counters)

    clusters = [(f"cluster {k + 1}", c, [notes[i] for i in c.members])
                for k, c in enumerate(plan.clusters)]
    if llm is not None:
        decisions = judge_with_model(ctx, clusters, counters)
        apply_all(ctx, parent_step_id, decisions, counters)
    else:
        judge_and_apply_with_rules(ctx, parent_step_id, clusters, snap, counters)
    report = PhaseReport(PHASE, StepStatus.SUCCEEDED.value, counters,
                         tokens_in=counters["tokens_in"], tokens_out=counters["tokens_out"],
                         calls=counters.get("calls", 0))
    log.info("consolidate.finished", run_id=ctx.run_id, scope=ctx.scope.key,
             **{k: v for k, v in counters.items() if isinstance(v, int)})
    return report



# ---- injection ----------------------------------------------------------------------------
def _flag_injections(ctx: PhaseContext, notes: list[Note]) -> list[str]:
    """Notes whose text reads like instructions never join a cluster; flag them once (R14)."""
    suspects = [n for n in notes if n.retirable and injection_signals(n.content)]
    to_write = [n for n in suspects if INJECTION_FLAG not in n.flags]
    for n in to_write:
        n.flags = [*n.flags, INJECTION_FLAG]  # excluded from clustering even in a dry run
    if to_write and not ctx.dry_run:
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            for n in to_write:
                # A note the host just changed keeps its own flags; it is still excluded here.
                uow.notes.change(n, run_id=ctx.run_id, reason="instruction-like text",
                                 now=ctx.now, flags=list(n.flags))
            uow.commit()
    if suspects:
        log.warning("consolidate.injection_flagged", run_id=ctx.run_id, scope=ctx.scope.key,
                    count=len(suspects))
    return [n.id for n in suspects]



def open_candidates(app: Any, scope: Scope) -> list[dict[str, Any]]:
    """Clusters the rule judge left open in the scope's latest finished run, still current.

    Each item: {"note_ids", "similarity", "reason", "step_id", "run_id"}. The host API reads the
    same records (child steps of "consolidate" with output verdict "open").
    """
    with app.uow() as uow:
        run = uow.runs.latest_finished(scope)
        if run is None:
            return []
        steps = [s for s in uow.runs.steps(run.id)
                 if s.phase == PHASE and s.parent_id is not None
                 and (s.output or {}).get("verdict") == "open"]
        ids = {i for s in steps for i in s.output.get("note_ids", [])}
        current = uow.notes.versions(ids)
    out = []
    for s in steps:
        note_ids = s.output.get("note_ids", [])
        if all(current.get(i, (0, ""))[1] == "active" for i in note_ids):
            out.append({"note_ids": note_ids, "similarity": s.output.get("similarity"),
                        "reason": s.output.get("reason"), "step_id": s.id, "run_id": run.id})
    return out


# Verdicts of clusters this phase found and did not merge: the notes are alike but not one
# fact, often two values of one attribute, so the contradictions phase takes them as candidates.
UNMERGED = frozenset({"refused", "known_refused", "open", "invalid", "deferred"})


def unmerged_clusters(uow: Any, run_id: str) -> list[list[str]]:
    """Note ids of each cluster this run's consolidate phase refused or left open.

    Read from the run's recorded steps, so a phase running in another process (Celery) sees the
    same hand-off as one in the same process.
    """
    return [list(s.output.get("note_ids", [])) for s in uow.runs.steps(run_id)
            if s.phase == PHASE and s.parent_id is not None
            and (s.output or {}).get("verdict") in UNMERGED]

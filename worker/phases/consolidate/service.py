"""The consolidate phase: snapshot read → clusters → judge (model or rules, no transaction
open) → one guarded write for the phase (flags, merges, verdict memory, steps)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from itertools import chain, combinations
from typing import Any

import numpy as np
import structlog

from worker.domain.attempts import latest_attempts
from worker.domain.types import Note, PhaseReport, Scope, StepStatus
from worker.phases.consolidate.apply import Unit, write_units
from worker.phases.consolidate.core import ClusterPlan, TopicalLinks, plan_clusters
from worker.phases.consolidate.counters import ConsolidateCounters
from worker.phases.consolidate.decision import PHASE
from worker.phases.consolidate.judging import judge_with_model
from worker.phases.consolidate.rules import plan_rule_units
from worker.phases.kit import Change, ChangeKind, Member
from worker.phases.kit.carry import Written, load
from worker.phases.kit.forget import forget_dead
from worker.phases.kit.snapshot import Memory
from worker.review.propose import proposals_for
from worker.review.propose import record as record_proposals
from worker.runs.context import PhaseContext
from worker.safety.injection import injection_signals
from worker.similarity import neighbour_pairs
from worker.similarity.candidates import FrameSettings, one_span_apart
from worker.similarity.terms import NoteWords, topical_pairs, words_of

log = structlog.get_logger(__name__)

INJECTION_FLAG = "injection"
# The phase's integer counters (what an approval's run starts from, worker.review).
COUNTERS = tuple(k for k, v in ConsolidateCounters().as_dict().items() if isinstance(v, int))


def run_consolidate(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
    settings = ctx.settings.consolidate
    llm = ctx.app.llm
    counters = ConsolidateCounters(judge="llm" if llm is not None else "rules")
    # Memory for the model's known refusals; in-process also for contradictions, which follows.
    # The memory also holds what the host kept apart, which binds the rule judge too.
    phase_snap = load(ctx, memory=True)
    # Pruned here only in a run without contradictions (``dream run --phase``): kit.forget.
    counters.verdicts_pruned = forget_dead(ctx, phase_snap, PHASE)
    # R3: a retried attempt plans exactly what a crash-free run would have planned after the
    # merges the interrupted attempt committed; the notes those merges inserted are this run's
    # output, never its input (a crash-free run could not have merged them again).
    # An open review item's notes wait for its decision (worker.review).
    proposals = proposals_for(ctx)
    produced = set(phase_snap.journal.produced)
    live = phase_snap.notes.live(ctx.now)  # an expired note is archive's: it joins nothing
    snap = live.without(produced | proposals.held)
    notes = snap.notes
    counters.notes_scanned = len(notes)
    if expired := len(phase_snap.notes.notes) - len(live.notes):
        counters.notes_expired = expired
    _count_left_out(counters, phase_snap.notes.notes, produced, proposals.held)
    flags = _flag_injections(ctx, notes, counters)
    if proposals.active:
        flags = []  # a run that proposes applies nothing, not even the flag (kept out anyway)
    units: list[Unit] = []
    if len(notes) >= 2 and snap.vectors.shape[1] > 0:
        # Notes a host kept apart are never merged together, by a model or by the rules: no
        # cluster holds both, and each may still merge with the rest of its look-alikes.
        apart = _kept_apart(notes, phase_snap.memory, counters)
        plan = _plan(ctx, notes, snap.vectors, counters, phase_snap.words, apart)
        counters.clusters_found = len(plan.clusters)
        counters.leftovers = len(plan.leftovers)
        if plan.leftovers:
            counters.leftover_ids = [notes[i].id for i in plan.leftovers][:100]
        clusters = [(f"cluster {k + 1}", c, [notes[i] for i in c.members])
                    for k, c in enumerate(plan.clusters)]
        if llm is not None and clusters:
            units = [Unit([d]) for d in judge_with_model(ctx, clusters, counters,  # type: ignore[arg-type]
                                                         memory=phase_snap.memory)]
        elif clusters:
            row = {n.id: i for i, n in enumerate(notes)}
            threshold: float = settings.rule_threshold

            def related(a: Note, b: Note) -> bool:
                return float(snap.vectors[row[a.id]] @ snap.vectors[row[b.id]]) >= threshold

            units = plan_rule_units(clusters, row, related, counters)
    done = None
    if flags or units:
        done = write_units(ctx, parent_step_id, units, counters, flags=flags,
                           journal=phase_snap.journal, proposals=proposals)
    _hand_off(ctx, done)
    record_proposals(ctx, proposals, counters)
    if not units:
        return PhaseReport(PHASE, StepStatus.NO_ITEMS.value, counters.as_dict())
    log.info("consolidate.finished", run_id=ctx.run_id, scope=ctx.scope.key, **counters.ints())
    return PhaseReport(PHASE, StepStatus.SUCCEEDED.value, counters.as_dict(),
                       tokens_in=counters.tokens_in, tokens_out=counters.tokens_out,
                       calls=counters.calls or 0)


def _count_left_out(counters: ConsolidateCounters, loaded: list[Note], produced: set[str],
                    held: set[str]) -> None:
    """The notes kept out of the plan, by why: this run's own output, or an open review item's
    (counted as the run's own before, so a propose run's held notes read as a retried one's)."""
    same_run = sum(n.id in produced for n in loaded)
    for_review = sum(n.id in held and n.id not in produced for n in loaded)
    if same_run:
        counters.notes_skipped_same_run = same_run
    if for_review:
        counters.notes_held_for_review = for_review


def _kept_apart(notes: list[Note], memory: Memory | None,
                counters: ConsolidateCounters) -> list[tuple[int, int]]:
    """The row pairs (i < j) of ``notes`` a host kept apart or a reviewer declined to merge,
    revoke or flag, the verdict still holding: no cluster holds both."""
    pairs = memory.kept_apart(notes) if memory is not None else set()
    if not pairs:
        return []
    row = {n.id: i for i, n in enumerate(notes)}
    counters.pairs_kept_apart = len(pairs)
    rows = [sorted(row[i] for i in p) for p in pairs]
    return sorted((i, j) for i, j in rows)


def _plan(ctx: PhaseContext, notes: list[Note], vectors: np.ndarray,
          counters: ConsolidateCounters, words: dict[str, NoteWords],
          kept_apart: list[tuple[int, int]]) -> ClusterPlan:
    """The scope's clusters: cosine neighbours, then (for a model) topical links among the
    notes left over. The rule judge merges nothing below its own cosine bar (RULE_THRESHOLD,
    0.70 by default, above the threshold), so a topical cluster would only leave it open.
    ``words``: the run's words of each text (``ScopeLoad.words``), read and added to."""
    settings = ctx.settings.consolidate
    pairs = neighbour_pairs(vectors, settings.threshold, ctx.settings.ann_threshold)
    # The rule judge settles pairs too (identical notes); a model is only asked about clusters.
    with_model = ctx.app.llm is not None
    min_size = settings.min_cluster_size if with_model else 2
    topical = None
    found: list[NoteWords] = []
    if with_model and settings.term_max_notes >= 2:
        texts = [n.content for n in notes]
        found = words_of(texts, words)
        links = topical_pairs(texts, settings.term_max_notes, vectors,
                              settings.term_min_similarity, words=found)
        apart = _one_frame(ctx, chain(links, ((i, j) for i, j, _ in pairs)), found)
        dropped = len(links)
        links -= apart
        dropped -= len(links)
        topical = TopicalLinks(links, settings.max_chars, apart)
        counters.topical_links = len(links)
        if dropped:
            counters.topical_apart = dropped
    plan = plan_clusters(notes, vectors, pairs, settings.threshold, min_size,
                         settings.max_cluster_size, topical=topical, apart=kept_apart)
    # A member joins on its mean similarity to the others: two members need be neither linked
    # nor a cosine pair. Such a pair of one frame is kept apart too, and the scope planned
    # again (each round keeps at least one more pair apart, so the rounds end).
    while topical is not None and (more := _one_frame(ctx, _members_paired(plan), found)
                                   - set(topical.apart)):
        topical = replace(topical, apart={*topical.apart, *more})
        plan = plan_clusters(notes, vectors, pairs, settings.threshold, min_size,
                             settings.max_cluster_size, topical=topical, apart=kept_apart)
    if topical is not None:
        counters.topical_clusters = sum(c.topical for c in plan.clusters)
    return plan


def _members_paired(plan: ClusterPlan) -> Iterable[tuple[int, int]]:
    """Every pair (i < j) of members of a topical cluster of ``plan``."""
    for cluster in plan.clusters:
        if cluster.topical:
            yield from combinations(sorted(cluster.members), 2)


def _one_frame(ctx: PhaseContext, pairs: Iterable[tuple[int, int]],
               words: list[NoteWords]) -> set[tuple[int, int]]:
    """The ``pairs`` (topical links and cosine pairs) that no topical cluster may hold both
    of: the same words but for one short span, as contradictions' same-frame source finds them
    ("The editor of the user is Vim" / "... is Emacs"; "Asked about X in that chat" / "Asked
    about Y in that chat"). Those are one attribute's values or one template's instances, never
    a topic's facts to fuse; contradictions judges each such pair (equivalent, subsumed,
    conflicting or independent). Two notes of the very same words are restatements and may
    fuse; notes apart in two places ("Gina has a store where she buys pieces" / "Gina owns a
    store where she sells fashion") are mostly one topic told twice, and may too."""
    s = ctx.settings.contradictions
    one_span = FrameSettings(max_span=s.frame_max_span, min_frame=s.frame_min_words)
    return {(i, j) for i, j in pairs
            if words[i].frame != words[j].frame
            and one_span_apart(words[i].frame, words[j].frame, one_span)}


def _hand_off(ctx: PhaseContext, done: Written | None) -> None:
    """In-process: the clusters left unmerged go to the contradictions phase in the carry, as
    the steps just written record them (what it would read back from the run's steps)."""
    held = ctx.carry.scope_notes if ctx.carry is not None else None
    if held is not None:
        rows = done.steps if done is not None else []
        held.unmerged = unmerged_of((r["phase"], r["parent_id"], r["output"]) for r in rows)


# ---- injection ----------------------------------------------------------------------------
def _flag_injections(ctx: PhaseContext, notes: list[Note],
                     counters: ConsolidateCounters) -> list[Change]:
    """Notes whose text reads like instructions never join a cluster; flag them once (R14).

    Returns the annotations for the phase's write; a note the host changed meanwhile keeps its
    own flags there (stale), and is still excluded here."""
    suspects = [n for n in notes if n.retirable and injection_signals(n.content)]
    to_write = [n for n in suspects if INJECTION_FLAG not in n.flags]
    for n in to_write:
        n.flags = [*n.flags, INJECTION_FLAG]  # excluded from clustering even in a dry run
    counters.notes_flagged = len(suspects)
    if suspects:
        counters.flagged_ids = [n.id for n in suspects]
    # Ops are warned once per note: a flagged note stays (a person decides on it), and a warning
    # every night for the same note teaches them to ignore the event.
    if to_write:
        log.warning("consolidate.injection_flagged", run_id=ctx.run_id, scope=ctx.scope.key,
                    count=len(to_write), already_flagged=len(suspects) - len(to_write))
    elif suspects:
        log.info("consolidate.injection_still_flagged", run_id=ctx.run_id,
                 scope=ctx.scope.key, count=len(suspects))
    if ctx.dry_run:
        return []
    return [Change(kind=ChangeKind.ANNOTATE, name="flag", members=(Member(n.id, n.version),),
                   flags=(INJECTION_FLAG,), reason="instruction-like text") for n in to_write]


def open_candidates(app: Any, scope: Scope) -> list[dict[str, Any]]:
    """Clusters the rule judge left open in the scope's latest finished run, still current.

    Each item: {"note_ids", "similarity", "reason", "step_id", "run_id"}. The host API reads the
    same records (child steps of "consolidate" with output verdict "open").
    """
    with app.uow() as uow:
        run = uow.run_history.latest_finished(scope)
        if run is None:
            return []
        # The latest attempts' (an interrupted attempt's open clusters were judged again).
        steps = [s for s in latest_attempts(uow.runs.steps(run.id))
                 if s.phase == PHASE and s.parent_id is not None
                 and (s.output or {}).get("verdict") == "open"]
        ids = {i for s in steps for i in s.output.get("note_ids", [])}
        current = uow.notes.versions(ids)
    out = []
    for s in steps:
        note_ids = s.output.get("note_ids", [])
        # A proposing run's open rest beside a proposed merge may name one note: no cluster.
        if len(note_ids) >= 2 and all(current.get(i, (0, ""))[1] == "active" for i in note_ids):
            out.append({"note_ids": note_ids, "similarity": s.output.get("similarity"),
                        "reason": s.output.get("reason"), "step_id": s.id, "run_id": run.id})
    return out


# Verdicts of clusters this phase found and did not merge: the notes are alike but not one
# fact, often two values of one attribute, so the contradictions phase takes them as candidates.
UNMERGED = frozenset({"refused", "known_refused", "open", "invalid", "deferred"})


def unmerged_clusters(uow: Any, run_id: str) -> list[list[str]]:
    """Note ids of each cluster this run's consolidate phase refused or left open.

    Read from the run's recorded steps, so a phase running in another process (Celery) sees the
    same hand-off as one in the same process: the latest attempt's, as the carry holds them
    (an interrupted attempt's clusters were judged again).
    """
    return unmerged_of((s.phase, s.parent_id, s.output)
                       for s in latest_attempts(uow.runs.steps(run_id)))


def unmerged_of(steps: Iterable[tuple[str, str | None, Any]]) -> list[list[str]]:
    """The note ids of each (phase, parent id, output) child step of this phase recording an
    unmerged cluster."""
    return [list(output.get("note_ids", [])) for phase, parent_id, output in steps
            if phase == PHASE and parent_id is not None
            and (output or {}).get("verdict") in UNMERGED]

"""The contradictions phase: find candidate pairs in a scope, judge them as topics, apply policy.

Short read → candidates from five sources → topics → model calls in rounds (no transaction
open), re-planned after each round → one short transaction per decision → steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import structlog

from worker.clock import utcnow
from worker.domain.types import Note, PhaseReport, Scope, StepStatus, fingerprint_notes
from worker.llm.base import LLMClient
from worker.llm.rules import settles_pair
from worker.phases.contradictions import unsettled
from worker.phases.contradictions.apply import Applier, policy_settings
from worker.phases.contradictions.core import (
    JUDGEMENT_KIND,
    OPEN,
    PHASE,
    Action,
    CandidatePair,
    Decision,
    Relation,
    Verdict,
    apply_order,
    decide,
    relation_of,
    rule_verdict,
)
from worker.phases.contradictions.counters import ContradictionsCounters
from worker.phases.contradictions.judging import judge_topics
from worker.phases.contradictions.steps import call_steps, rule_steps
from worker.phases.contradictions.topics import follow_retirements
from worker.phases.contradictions.whole import large_rows, late_whole, small_scope, without
from worker.phases.kit import PhaseSnapshot, RunJournal, WriteTarget, read_snapshot
from worker.phases.kit.carry import ScopeLoad, load
from worker.phases.kit.evaluate import GuardLimits
from worker.phases.kit.forget import forget_dead
from worker.phases.kit.snapshot import DECLINED_APART, KEEP_APART
from worker.phases.kit.write import guard_limits
from worker.review.propose import proposals_for
from worker.review.propose import record as record_proposals
from worker.runs.context import PhaseContext
from worker.similarity import neighbour_pairs
from worker.similarity.candidates import FrameSettings, source_counts, union_edges
from worker.similarity.lead_ins import frame_pairs
from worker.similarity.terms import TermSettings, shared_term_pairs, words_of
from worker.store.repositories.judgements import PENDING_RETIREMENT

log = structlog.get_logger(__name__)

# The phase's integer counters (what an approval's run starts from, worker.review).
COUNTERS = tuple(k for k, v in ContradictionsCounters().as_dict().items()
                 if isinstance(v, int) and k != "judge")


@dataclass
class Loaded:
    notes: dict[str, Note]
    pairs: list[CandidatePair]  # fresh candidates: not remembered, not two same-run notes
    counters: dict[str, Any]
    # Retirements an earlier run decided and the guard held back, both notes unchanged since.
    held_back: list[tuple[Verdict, Decision]] = field(default_factory=list)
    journal: RunJournal = field(default_factory=RunJournal)
    whole: int = 0  # short notes of a small scope asked about whole (0: not small, or no model)
    # A scope with too many short notes for that: the pairs of those still active once the
    # first rounds retired enough of them (``late_whole``); None: no such scope, or no model.
    late: Callable[[set[str]], list[CandidatePair]] | None = None
    # Pairs no answer may join into one attribute: judged independent before at their
    # current versions, or kept apart by a host or a reviewer (neither retires the other).
    apart: set[frozenset[str]] = field(default_factory=set)
    # ``host``: a small scope's short notes, which a dream's model is asked about whole; with
    # ``large_scope_pieces``, a larger scope's (``large_rows``), which it is asked in pieces.
    small: tuple[str, ...] = ()
    large: tuple[str, ...] = ()


def _snapshot(ctx: PhaseContext) -> tuple[ScopeLoad, list[list[str]]]:
    """The kit's load (notes with current vectors, the run's journal, pair memory) and the
    clusters this run's consolidation did not merge: handed over in the carry when it ran in
    this process on this attempt, else read back from the run's steps (another process, or an
    earlier attempt, may have recorded them)."""
    from worker.phases.consolidate.service import unmerged_clusters

    phase_snap = load(ctx, memory=True)
    clusters = phase_snap.unmerged
    if clusters is None or ctx.carry is None or not ctx.carry.fresh:
        clusters = []
        if ctx.run_id is not None:
            with ctx.uow() as uow:
                clusters = unmerged_clusters(uow, ctx.run_id)
    return phase_snap, clusters


def _host_snapshot(app: Any, scope: Scope) -> PhaseSnapshot:
    """A host's read (``open_pairs``): every note embedded first, no run."""
    from worker.embeddings.refresh import ensure_scope_embeddings

    ensure_scope_embeddings(app, scope)
    with app.uow() as uow:
        return read_snapshot(uow, scope, None, (JUDGEMENT_KIND, PENDING_RETIREMENT,
                                             KEEP_APART, DECLINED_APART))


def load_candidates(app: Any, phase_snap: PhaseSnapshot | ScopeLoad,
                    clusters: list[list[str]], *, model: bool = False,
                    host: bool = False, now: datetime | None = None) -> Loaded:
    """The candidate search over the phase's one load, with no transaction open.

    Candidates: cosine neighbours at the threshold ∪ clusters this run's consolidation did
    not merge ∪ same-frame pairs ∪ short notes sharing rare terms ∪ pairs a little less alike
    that the text rules settle ∪, for a ``model`` judge in a small scope, every pair of its
    short notes. Each source's contribution is counted for the step. A note expired at
    ``now`` (the run's clock; a host's read: the time of the read) is no candidate.
    """
    s = app.settings.contradictions
    snap, memory = phase_snap.notes.live(now or utcnow()), phase_snap.memory
    assert memory is not None
    row = {n.id: k for k, n in enumerate(snap.notes)}
    texts = [n.content for n in snap.notes]
    cosine, contained = _cosine_and_contained(texts, snap.vectors, s.threshold,
                                              s.contained_min_similarity,
                                              app.settings.ann_threshold)
    # One tokenization for both lexical sources; in-process, the run's (consolidation's).
    words = words_of(texts, phase_snap.words if isinstance(phase_snap, ScopeLoad) else None)
    frames = frame_pairs([w.frame for w in words], FrameSettings(
        max_span=s.frame_max_span, min_frame=s.frame_min_words), s.lead_in_notes)
    terms = shared_term_pairs(texts, TermSettings(max_notes=s.term_max_notes), snap.vectors,
                              s.term_min_similarity, words=words)
    cluster_rows = [[row[i] for i in ids if i in row] for ids in clusters]
    whole = small_scope(words, snap.notes, s.small_scope_notes) if model or host else []
    edges = union_edges(snap.vectors, cosine, cluster_rows, frames.pairs, terms, contained,
                        whole if model else [])
    counters: dict[str, Any] = {
        f"candidates_{k}": v for k, v in source_counts(edges).items()}
    counters["generic_frames_skipped"] = frames.generic_frames
    if expired := len(phase_snap.notes.notes) - len(snap.notes):
        counters["notes_expired"] = expired
    # Pairs a host kept apart or a reviewer declined: neither retires the other, whether
    # found now or held back by the guard before the "no".
    apart = memory.kept_apart(snap.notes)
    # Pairs an answer left unsettled lately: not the dream's to ask yet (a host's may).
    cool = unsettled.cooling(memory, now or utcnow(), app) if not host else lambda fp: False
    produced = phase_snap.journal.produced
    late = None if not model or whole else late_whole(
        words, snap, s.small_scope_notes, s.large_scope_pieces,
        lambda found: _new_pairs(found, snap.notes, memory, produced, {}, apart, cool))
    pairs = _new_pairs(edges, snap.notes, memory, produced, counters, apart, cool)
    counters["pairs_considered"] = len(edges)
    notes = snap.by_id()
    pending = [(r.fingerprint, r.note_ids[0], r.note_ids[1], r.verdict, r.reason)
               for r in memory.rows if r.kind == PENDING_RETIREMENT
               and r.note_ids and len(r.note_ids) == 2
               and frozenset(r.note_ids) not in apart]
    held_back = _still_pending(pending, notes)
    counters["retirements_held_back"] = len(held_back)
    swept = sorted({n for pair in whole for n in pair})
    large = large_rows(words, snap.notes, s.small_scope_notes) \
        if host and not whole and s.large_scope_pieces else []
    return Loaded(notes, pairs, counters, held_back, phase_snap.journal,
                  len(swept) if model else 0, late, apart | _judged_apart(memory, notes),
                  tuple(snap.notes[r].id for r in swept) if host else (),
                  tuple(snap.notes[r].id for r in large))


def _judged_apart(memory: Any, notes: dict[str, Note]) -> set[frozenset[str]]:
    """The id pairs a remembered verdict says are independent, at the notes' versions now."""
    out: set[frozenset[str]] = set()
    for r in memory.rows:
        if r.kind != JUDGEMENT_KIND or r.verdict != Relation.INDEPENDENT or not r.note_ids \
                or len(r.note_ids) != 2:
            continue
        a, b = notes.get(r.note_ids[0]), notes.get(r.note_ids[1])
        if a is not None and b is not None and fingerprint_notes([a, b]) == r.fingerprint:
            out.add(frozenset(r.note_ids))
    return out


def _new_pairs(edges: list[Any], notes: list[Note], memory: Any, produced: Any,
               counters: dict[str, Any], apart: set[frozenset[str]],
               cool: Callable[[str], bool]) -> list[CandidatePair]:
    """The candidate edges worth a judgement, best first: not two notes this run wrote, not
    two notes a host kept apart or a reviewer declined to merge, revoke or flag (``apart``:
    both stay, neither retires the other), not a pair judged at these versions before, nor
    one an answer left unsettled recently (``cool``); each left-out kind counted."""
    judged = {tuple(sorted(r.note_ids)) for r in memory.rows
              if r.kind == JUDGEMENT_KIND and r.note_ids and len(r.note_ids) == 2}
    pairs: list[CandidatePair] = []
    same_run = remembered = kept_apart = cooling = 0
    for e in edges:
        a, b = notes[e.i], notes[e.j]
        if b.id < a.id:
            a, b = b, a
        if a.id in produced and b.id in produced:
            same_run += 1
            continue
        if frozenset((a.id, b.id)) in apart:
            kept_apart += 1
            continue
        fp = fingerprint_notes([a, b])
        if (JUDGEMENT_KIND, fp) in memory.verdicts:
            remembered += 1
            continue
        if cool(fp):
            cooling += 1
            continue
        pairs.append(CandidatePair(a.id, b.id, e.similarity, fp, (a.id, b.id) in judged,
                                   tuple(sorted(e.sources))))
    pairs.sort(key=lambda p: (p.judged_before, -p.similarity, p.a_id, p.b_id))
    counters.update(pairs_skipped_same_run=same_run, pairs_remembered=remembered, **{
        k: v for k, v in (("pairs_kept_apart", kept_apart), ("pairs_cooling", cooling)) if v})
    return pairs


def _cosine_and_contained(
    texts: list[str], vectors: Any, threshold: float, floor: float, ann_threshold: int,
) -> tuple[list[tuple[int, int, float]], list[tuple[int, int]]]:
    """Cosine neighbours at ``threshold``; and, from one range search down to ``floor``, the
    pairs below it whose texts the rules settle: one note stated inside the other, word for
    word ("Priya plays the cello." / "Priya plays the cello in a quartet on Sunday evenings.",
    0.65). The added detail lowers the cosine, not the duplication; the text rules never
    settle a NEUTRAL or CONTRADICTION pair of SICK, whatever the cosine."""
    if floor >= threshold:
        return neighbour_pairs(vectors, threshold, ann_threshold), []
    found = neighbour_pairs(vectors, floor, ann_threshold)
    bar = float(np.float32(threshold))  # range search's own comparison: float32 scores ≥ it
    cosine = [p for p in found if p[2] >= bar]
    contained = [(i, j) for i, j, sim in found
                 if sim < bar and settles_pair(texts[i], texts[j])]
    return cosine, contained


def _still_pending(
    rows: list[tuple[str, str, str, str, str | None]], notes: dict[str, Note],
) -> list[tuple[Verdict, Decision]]:
    """The held-back retirements whose two notes are active at the versions decided on.

    A note edited, retired or restored since changes the fingerprint: its decision is void and
    the pair is a candidate like any other again.
    """
    out = []
    for fp, loser_id, winner_id, kind, reason in rows:
        loser, winner = notes.get(loser_id), notes.get(winner_id)
        if loser is None or winner is None or fingerprint_notes([loser, winner]) != fp:
            continue
        a_id, b_id = sorted((loser_id, winner_id))
        pair = CandidatePair(a_id, b_id, 0.0, fp, True)
        verdict = Verdict(pair, relation_of(kind, winner_id, pair), 1.0, reason or "")
        out.append((verdict, Decision(Action.REVOKE, kind, winner_id, loser_id,
                                      why=reason or "")))
    return out


def _limits(ctx: PhaseContext, journal: RunJournal) -> GuardLimits | None:
    """The guard's limits while planning; the write checks with the same ones."""
    if ctx.run_id is None or ctx.dry_run:
        return None
    with ctx.uow() as uow:
        return guard_limits(uow, WriteTarget.of(ctx, PHASE, None), journal)


def run_contradictions(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
    llm: LLMClient | None = ctx.app.llm
    snap, clusters = _snapshot(ctx)
    pruned = forget_dead(ctx, snap, PHASE)  # the rows no run reads again (kit.forget)
    loaded = load_candidates(ctx.app, snap, clusters, model=llm is not None, now=ctx.now)
    proposals = proposals_for(ctx)
    if proposals.held:  # an open review item's notes wait for its decision (worker.review)
        loaded.pairs = [p for p in loaded.pairs if not set(p.ids) & proposals.held]
        loaded.held_back = [(v, d) for v, d in loaded.held_back
                            if not set(v.pair.ids) & proposals.held]
        loaded.late = without(loaded.late, proposals.held)
    counters = ContradictionsCounters(judge="llm" if llm is not None else "rules")
    counters.update(loaded.counters)
    counters.verdicts_pruned = pruned
    # A scope asked about in pieces has its late round even when no signal found a pair.
    pieces = loaded.late is not None and ctx.settings.contradictions.large_scope_pieces
    if not loaded.pairs and not loaded.held_back and not pieces:
        status = StepStatus.NO_ITEMS.value if not counters.pairs_considered else \
            StepStatus.SUCCEEDED.value
        return PhaseReport(phase=PHASE, status=status, counters=counters.as_dict())
    applier = Applier(ctx, parent_step_id, loaded.notes, counters,
                      _limits(ctx, loaded.journal), loaded.journal, proposals=proposals,
                      apart=loaded.apart)
    # What an earlier run decided but could not apply goes first and costs no question; the
    # fresh pairs of every note it retires (or holds back again) pass to the winner.
    pairs = applier.apply_held_back(loaded.held_back, loaded.pairs)
    if llm is None:
        entries, open_pairs_ = _judge_with_rules(ctx, pairs, applier)
        applier.finish(lambda: rule_steps(ctx, entries, open_pairs_))
        record_proposals(ctx, proposals, counters)
        return PhaseReport(phase=PHASE, status=StepStatus.SUCCEEDED.value,
                           counters=counters.as_dict())

    results, deferred = judge_topics(ctx, llm, pairs, applier, whole=loaded.whole,
                                     late=loaded.late)
    applier.finish(lambda: call_steps(ctx, results))
    record_proposals(ctx, proposals, counters)
    return _model_report(ctx, counters, results, deferred)


def _model_report(ctx: PhaseContext, counters: ContradictionsCounters, results: list[Any],
                  deferred: list[Any]) -> PhaseReport:
    counters.tokens_in = sum(r.outcome.tokens_in for r in results if r.outcome is not None)
    counters.tokens_out = sum(r.outcome.tokens_out for r in results if r.outcome is not None)
    calls = sum(r.outcome.attempts for r in results if r.outcome is not None)
    counters.calls = calls
    counters.topics_dropped = sum(len(r.dropped) for r in results)
    counters.topics_deferred = len(deferred)
    if deferred:
        oldest = min(t.waiting_since for t in deferred)
        counters.oldest_deferral_days = round((ctx.now - oldest).total_seconds() / 86400, 1)
    budget_hit = bool(deferred) or any(
        r.outcome is not None and r.outcome.status == "budget_exhausted" for r in results)
    log.info("contradictions.finished", run_id=ctx.run_id, scope=ctx.scope.key, **counters.ints())
    return PhaseReport(
        phase=PHASE, status=StepStatus.SUCCEEDED.value, counters=counters.as_dict(),
        tokens_in=counters.tokens_in, tokens_out=counters.tokens_out, calls=calls,
        reason="model budget exhausted; remaining topics wait for a later run"
        if budget_hit else None,
    )


# ---- judging with rules: pairs --------------------------------------------------------------

def _judge_with_rules(
    ctx: PhaseContext, pairs: list[CandidatePair], applier: Applier,
) -> tuple[list[tuple[Verdict, dict[str, Any]]], list[CandidatePair]]:
    """No model: rules settle identity and containment; every other pair stays open."""
    notes = applier.notes
    policy = policy_settings(ctx)
    verdicts: list[Verdict] = []
    open_pairs_: list[CandidatePair] = []
    for pair in pairs:
        relation, reason = rule_verdict(notes[pair.a_id], notes[pair.b_id], policy.skew)
        if relation == OPEN:
            open_pairs_.append(pair)
        else:
            verdicts.append(Verdict(pair, relation, 1.0, reason))
    entries = []
    seen: set[tuple[str, str]] = set()
    for v in apply_order(verdicts, notes):
        # A note retired (or held back by the guard) by an earlier verdict passes its pair to
        # the note that replaced it, judged again by the rules (free), so no verdict is spent
        # on a retired note.
        active = {k: n for k, n in notes.items() if k not in applier.retired}
        moved = follow_retirements([v.pair], applier.decided_into(), seen, active)
        if not moved:
            continue
        pair = moved[0]
        seen.add(pair.ids)
        if pair.ids != v.pair.ids:
            relation, reason = rule_verdict(notes[pair.a_id], notes[pair.b_id], policy.skew)
            if relation == OPEN:
                open_pairs_.append(pair)
                continue
            v = Verdict(pair, relation, 1.0, reason)
        a, b = notes[v.pair.a_id], notes[v.pair.b_id]
        entries.append((v, applier.apply(v, decide(v, a, b, policy))))
    applier.counters["pairs_open"] = len(open_pairs_)
    return entries, open_pairs_


# ---- host access ----------------------------------------------------------------------------

def open_pairs(app: Any, scope: Scope, limit: int | None = None) -> list[dict[str, Any]]:
    """Candidate pairs no verdict settles yet: what the rule judge leaves for a model or the host.

    Read-only apart from embedding notes that lack a vector. Ordered fairly (never judged first,
    then most similar). Each item: a, b (note ids), similarity, fingerprint (ids + versions; pass
    it back with a verdict so a note changed meanwhile is detected), sources.
    """
    return open_pairs_read(app, scope, limit)[0]


def open_pairs_read(app: Any, scope: Scope, limit: int | None = None,
                    ) -> tuple[list[dict[str, Any]], PhaseSnapshot, Loaded]:
    """``open_pairs``, the scope as it read it (notes and verdict memory) and its candidates."""
    snap = _host_snapshot(app, scope)
    loaded = load_candidates(app, snap, [], host=True)
    out: list[dict[str, Any]] = []
    for pair in loaded.pairs:
        relation, _ = rule_verdict(loaded.notes[pair.a_id], loaded.notes[pair.b_id])
        if relation != OPEN:
            continue
        out.append({"a": pair.a_id, "b": pair.b_id, "similarity": pair.similarity,
                    "fingerprint": pair.fingerprint, "judged_before": pair.judged_before,
                    "sources": list(pair.sources)})
        if limit is not None and len(out) >= limit:
            break
    return out, snap, loaded

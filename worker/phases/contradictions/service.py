"""The contradictions phase: find candidate pairs in a scope, judge them as topics, apply policy.

Short read → candidates from three sources → topics → model calls in rounds (no transaction
open), re-planned after each round → one short transaction per decision → steps.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import structlog
from pydantic import BaseModel, Field

from worker.domain.types import (
    Note,
    NoteStatus,
    PhaseReport,
    Scope,
    StepStatus,
    fingerprint_notes,
    retired_at,
)
from worker.llm.ask import Outcome, ReplyRejected, ask
from worker.llm.base import LLMClient
from worker.llm.prompts import render_prompt
from worker.phases.contradictions.core import (
    OPEN,
    CandidatePair,
    Decision,
    PolicySettings,
    Verdict,
    append_comment,
    apply_order,
    decide,
    flagged_comment,
    relation_of,
    resolved_comment,
    rule_verdict,
)
from worker.phases.contradictions.topics import (
    Call,
    Topic,
    TopicVerdict,
    check_topic_reply,
    follow_retirements,
    independent_pairs,
    isolate_suspicious,
    pack_calls,
    plan_topics,
    prompt_topics,
    topic_decisions,
)
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.safety.crashpoints import crashpoint
from worker.safety.guard import check_retire, record_trip
from worker.safety.injection import injection_signals
from worker.similarity import neighbour_pairs
from worker.similarity.candidates import FrameSettings, same_frame_pairs, source_counts, union_edges
from worker.telemetry import in_current_trace

log = structlog.get_logger(__name__)

PHASE = "contradictions"
PROMPT = "contradictions"
JUDGEMENT_KIND = "pair"
REVIEW_KIND = "contradiction"
REVIEW_FLAG = "contradiction_review"
LINEAGE = {"conflict": "superseded", "equivalent": "duplicate", "subsumed": "subsumed"}
RULE_STEP_PAIRS = 50  # rule verdicts recorded per child step

COUNTERS = (
    "pairs_considered", "pairs_judged", "conflicts_resolved", "conflicts_flagged",
    "equivalents_merged", "pairs_skipped_stale", "tokens_in", "tokens_out", "verdicts_wasted",
)


class ValueReply(BaseModel):
    notes: list[str] = Field(max_length=100)
    fullest: str | None = None


class AttributeReply(BaseModel):
    name: str = Field("", max_length=300)
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field("", max_length=1000)
    values: list[ValueReply] = Field(max_length=100)


class TopicReply(BaseModel):
    topic: str
    attributes: list[AttributeReply] = Field(default_factory=list, max_length=50)


class ContradictionReply(BaseModel):
    topics: list[TopicReply]


@dataclass
class CallResult:
    """One prompt to the judge and what came back, before anything is applied."""

    call: Call
    round: int
    alias_of: dict[str, str] = field(default_factory=dict)
    by_topic: dict[str, Topic] = field(default_factory=dict)
    verdicts: list[TopicVerdict] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    outcome: Outcome[ContradictionReply] | None = None
    template_hash: str | None = None
    duration_ms: float = 0.0
    actions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Loaded:
    notes: dict[str, Note]
    pairs: list[CandidatePair]  # fresh candidates: not remembered, not two same-run notes
    counters: dict[str, Any]
    # Retirements an earlier run decided and the guard held back, both notes unchanged since.
    held_back: list[tuple[Verdict, Decision]] = field(default_factory=list)


@dataclass
class PhaseBudget:
    """The phase's own cap on model calls and tokens (per run and scope), thread-safe."""

    max_calls: int | None
    max_tokens: int | None
    calls: int = 0
    tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reserve(self) -> bool:
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                return False
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return False
            self.calls += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.calls -= 1

    def charge(self, tokens: int) -> None:
        with self._lock:
            self.tokens += tokens

    def calls_left(self) -> int | None:
        with self._lock:
            return None if self.max_calls is None else self.max_calls - self.calls

    def affords(self, estimated_tokens: int) -> bool:
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                return False
            return self.max_tokens is None or self.tokens + estimated_tokens <= self.max_tokens


def _calls_left(ctx: PhaseContext) -> int | None:
    b = ctx.budget
    return None if b.max_calls is None else b.max_calls - b.calls


def _policy(ctx: PhaseContext) -> PolicySettings:
    s = ctx.settings.contradictions
    return PolicySettings(s.min_confidence, s.newer_wins_days, s.high_importance)


def load_candidates(app: Any, scope: Scope, run_id: str | None) -> Loaded:
    """Short reads per scope (notes, memory, the run's steps); candidate search in between.

    Candidates: cosine neighbours at the threshold ∪ clusters this run's consolidation did
    not merge ∪ same-frame pairs. Each source's contribution is counted for the step.
    """
    from worker.phases.consolidate.service import unmerged_clusters

    settings = app.settings
    with app.uow() as uow:
        snap = uow.notes.load_scope(scope)
    if snap.notes and snap.vectors.shape[1] == 0:
        # A note without a vector (the in-process runner embeds once per run; the host may
        # have added one since): embed now and read again.
        from worker.embeddings.refresh import ensure_scope_embeddings

        ensure_scope_embeddings(app, scope)
        with app.uow() as uow:
            snap = uow.notes.load_scope(scope)
    with app.uow() as uow:
        produced = uow.notes.inserted_by_run(run_id, scope) if run_id else set()
        judged = uow.judgements.judged_pairs(scope, JUDGEMENT_KIND)
        pending = uow.judgements.pending_retirements(scope)
        clusters = unmerged_clusters(uow, run_id) if run_id else []
    s = settings.contradictions
    row = {n.id: k for k, n in enumerate(snap.notes)}
    cosine = neighbour_pairs(snap.vectors, s.threshold, settings.ann_threshold)
    frames = same_frame_pairs([n.content for n in snap.notes],
                              FrameSettings(max_span=s.frame_max_span, min_frame=s.frame_min_words))
    cluster_rows = [[row[i] for i in ids if i in row] for ids in clusters]
    edges = union_edges(snap.vectors, cosine, cluster_rows, frames.pairs)
    counters: dict[str, Any] = {
        f"candidates_{k}": v for k, v in source_counts(edges).items()}
    counters["generic_frames_skipped"] = frames.generic_frames
    fps = {(e.i, e.j): fingerprint_notes([snap.notes[e.i], snap.notes[e.j]]) for e in edges}
    with app.uow() as uow:
        known = set(uow.judgements.known(scope, JUDGEMENT_KIND, fps.values())) if fps else set()
    pairs: list[CandidatePair] = []
    same_run = remembered = 0
    for e in edges:
        a, b = snap.notes[e.i], snap.notes[e.j]
        if b.id < a.id:
            a, b = b, a
        if a.id in produced and b.id in produced:
            same_run += 1
            continue
        fp = fps[(e.i, e.j)]
        if fp in known:
            remembered += 1
            continue
        pairs.append(CandidatePair(a.id, b.id, e.similarity, fp, (a.id, b.id) in judged,
                                   tuple(sorted(e.sources))))
    pairs.sort(key=lambda p: (p.judged_before, -p.similarity, p.a_id, p.b_id))
    counters.update(pairs_considered=len(edges), pairs_skipped_same_run=same_run,
                    pairs_remembered=remembered)
    notes = snap.by_id()
    held_back = _still_pending(pending, notes)
    counters["retirements_held_back"] = len(held_back)
    return Loaded(notes, pairs, counters, held_back)


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
        out.append((verdict, Decision("revoke", kind, winner_id, loser_id, why=reason or "")))
    return out


def run_contradictions(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
    llm: LLMClient | None = ctx.app.llm
    loaded = load_candidates(ctx.app, ctx.scope, ctx.run_id)
    notes = loaded.notes
    counters: dict[str, Any] = dict.fromkeys(COUNTERS, 0)
    counters.update(loaded.counters, judge="llm" if llm is not None else "rules")
    if not loaded.pairs and not loaded.held_back:
        status = StepStatus.NO_ITEMS.value if not counters["pairs_considered"] else \
            StepStatus.SUCCEEDED.value
        return PhaseReport(phase=PHASE, status=status, counters=counters)
    applier = Applier(ctx, parent_step_id, notes, counters)
    # What an earlier run decided but could not apply goes first and costs no question; the
    # fresh pairs of every note it retires (or holds back again) pass to the winner.
    pairs = applier.apply_held_back(loaded.held_back, loaded.pairs)
    if llm is None:
        _judge_with_rules(ctx, parent_step_id, pairs, applier)
        applier.finish()
        return PhaseReport(phase=PHASE, status=StepStatus.SUCCEEDED.value, counters=counters)

    results, deferred = _judge_topics(ctx, llm, pairs, applier)
    applier.finish()
    _record_calls(ctx, parent_step_id, results)
    counters["tokens_in"] = sum(r.outcome.tokens_in for r in results if r.outcome is not None)
    counters["tokens_out"] = sum(r.outcome.tokens_out for r in results if r.outcome is not None)
    calls = sum(r.outcome.attempts for r in results if r.outcome is not None)
    counters["calls"] = calls
    counters["topics_dropped"] = sum(len(r.dropped) for r in results)
    counters["topics_deferred"] = len(deferred)
    if deferred:
        oldest = min(t.waiting_since for t in deferred)
        counters["oldest_deferral_days"] = round((ctx.now - oldest).total_seconds() / 86400, 1)
    budget_hit = bool(deferred) or any(
        r.outcome is not None and r.outcome.status == "budget_exhausted" for r in results)
    log.info("contradictions.finished", run_id=ctx.run_id, scope=ctx.scope.key,
             **{k: v for k, v in counters.items() if isinstance(v, int)})
    return PhaseReport(
        phase=PHASE, status=StepStatus.SUCCEEDED.value, counters=counters,
        tokens_in=counters["tokens_in"], tokens_out=counters["tokens_out"], calls=calls,
        reason="model budget exhausted; remaining topics wait for a later run"
        if budget_hit else None,
    )


# ---- judging with a model: topics in rounds -------------------------------------------------

def _suspicious(notes: dict[str, Note], pairs: list[CandidatePair]) -> frozenset[str]:
    return frozenset(
        nid for p in pairs for nid in p.ids
        if any(f.startswith("injection") for f in notes[nid].flags)
        or injection_signals(notes[nid].content))


def _judge_topics(
    ctx: PhaseContext, llm: LLMClient, pairs: list[CandidatePair], applier: Applier,
) -> tuple[list[CallResult], list[Topic]]:
    """Rounds of at most ``llm_concurrency`` concurrent calls; after each round the applied
    retirements re-plan the rest, so no question is ever spent on a note already retired."""
    s = ctx.settings.contradictions
    notes = applier.notes
    budget = PhaseBudget(s.max_calls_per_run, s.max_tokens_per_run)
    suspicious = _suspicious(notes, pairs)
    applier.counters["notes_isolated"] = len(suspicious)
    results: list[CallResult] = []
    asked: set[tuple[str, str]] = set()
    pending, deferred = pairs, []
    round_no = 0
    while pending:
        round_no += 1
        active = {k: n for k, n in notes.items() if n.id not in applier.retired}
        planned = isolate_suspicious(plan_topics(pending, active, s.topic_size), suspicious)
        applier.counters["topics_found"] = applier.counters.get("topics_found", 0) + len(planned)
        calls = pack_calls(planned, suspicious, s.notes_per_call)
        # Never more prompts in flight than calls left: the fair order decides who is asked.
        room = min(x for x in (ctx.settings.llm_concurrency, budget.calls_left(),
                               _calls_left(ctx)) if x is not None)
        batch = calls[: max(0, room)]
        if not batch or ctx.budget.exhausted or not budget.affords(0):
            deferred = planned
            break
        with ThreadPoolExecutor(max_workers=len(batch), thread_name_prefix=PHASE) as pool:
            ask_one = partial(_ask_call, ctx, llm, notes=notes, budget=budget, round_no=round_no)
            done = list(pool.map(in_current_trace(ask_one), batch))
        for result in done:
            results.append(result)
            for verdict in result.verdicts:
                result.actions.extend(applier.apply_topic(verdict))
            for t in result.call.topics:
                asked.update(p.ids for p in t.pairs)
        unasked = [t for c in calls[len(batch):] for t in c.topics]
        unasked += [t for r in done if r.outcome is not None
                    and r.outcome.status == "budget_exhausted" for t in r.call.topics]
        if any(r.outcome is not None and r.outcome.status == "budget_exhausted" for r in done):
            deferred = unasked
            break
        active = {k: n for k, n in notes.items() if n.id not in applier.retired}
        pending = follow_retirements(pending, applier.decided_into(), asked, active)
    applier.counters["rounds"] = round_no
    applier.counters["topics_judged"] = sum(len(r.verdicts) for r in results)
    return results, deferred


def _ask_call(
    ctx: PhaseContext, llm: LLMClient, call: Call, *, notes: dict[str, Note],
    budget: PhaseBudget, round_no: int,
) -> CallResult:
    # Redaction (R29) happens at the one outbound boundary: the App wraps the client.
    items, alias_of, by_topic = prompt_topics(call, notes)
    result = CallResult(call, round_no, alias_of, by_topic)
    started = time.perf_counter()
    prompt = render_prompt(PROMPT, {"topics": items, "topic_ids": list(by_topic)})
    result.template_hash = prompt.template_hash
    estimate = (len(prompt.system) + len(prompt.user)) // 4
    last_reply: list[list[dict[str, object]]] = []

    def validate(reply: ContradictionReply) -> None:
        replied = [t.model_dump() for t in reply.topics]
        last_reply.append(replied)
        _, dropped = check_topic_reply(replied, alias_of, by_topic)
        if dropped:
            problem = "; ".join(f"{tid}: {why}" for tid, why in sorted(dropped.items()))
            raise ReplyRejected(f"every topic needs exactly one clean answer: {problem}"[:300])

    def reserve() -> bool:
        if not budget.affords(estimate) or not budget.reserve():
            return False
        if not ctx.budget.try_reserve_call():
            budget.release()
            return False
        return True

    def charge(tokens: int) -> None:
        budget.charge(tokens)
        ctx.budget.charge(tokens)

    outcome = ask(llm, prompt, ContradictionReply, validate=validate, reserve=reserve,
                  charge=charge)
    result.outcome = outcome
    result.duration_ms = (time.perf_counter() - started) * 1000
    if last_reply:
        # After the re-asks, keep the topics the last parsed reply answered cleanly; a missing,
        # doubled or malformed topic changes nothing for its notes (R12).
        result.verdicts, result.dropped = check_topic_reply(last_reply[-1], alias_of, by_topic)
    else:
        result.dropped = {tid: outcome.reason or outcome.status for tid in by_topic}
    if result.dropped:
        log.warning("contradictions.topics_dropped", run_id=ctx.run_id, scope=ctx.scope.key,
                    dropped=len(result.dropped), status=outcome.status, attempts=outcome.attempts)
    return result


# ---- judging with rules: pairs --------------------------------------------------------------

def _judge_with_rules(
    ctx: PhaseContext, parent_step_id: str, pairs: list[CandidatePair], applier: Applier,
) -> None:
    """No model: rules settle identity and containment; every other pair stays open."""
    notes = applier.notes
    verdicts: list[Verdict] = []
    open_pairs_: list[CandidatePair] = []
    for pair in pairs:
        relation, reason = rule_verdict(notes[pair.a_id], notes[pair.b_id])
        if relation == OPEN:
            open_pairs_.append(pair)
        else:
            verdicts.append(Verdict(pair, relation, 1.0, reason))
    policy = _policy(ctx)
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
            relation, reason = rule_verdict(notes[pair.a_id], notes[pair.b_id])
            if relation == OPEN:
                open_pairs_.append(pair)
                continue
            v = Verdict(pair, relation, 1.0, reason)
        a, b = notes[v.pair.a_id], notes[v.pair.b_id]
        entries.append((v, applier.apply(v, decide(v, a, b, policy))))
    applier.counters["pairs_open"] = len(open_pairs_)
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        for k in range(0, len(entries), RULE_STEP_PAIRS):
            chunk = entries[k: k + RULE_STEP_PAIRS]
            ctx.steps.child(uow, parent_step_id, PHASE, ChildStep(
                name="rules", status=StepStatus.SUCCEEDED.value,
                input={"batch": k // RULE_STEP_PAIRS + 1, "judge": "rules",
                       "pairs": [_pair_json(v.pair) for v, _ in chunk]},
                output={"verdicts": [{"a": v.pair.a_id, "b": v.pair.b_id, "relation": v.relation,
                                      "confidence": v.confidence, "reason": v.reason, **entry}
                                     for v, entry in chunk], "dry_run": ctx.dry_run}))
        # Open pairs get one child each ({"verdict": "open"}, note_ids) so the host API can
        # list them; capped per run, the rest stay reachable through open_pairs().
        for pair in open_pairs_[: ctx.settings.contradictions.max_open_steps]:
            ctx.steps.child(uow, parent_step_id, PHASE, _open_step(pair))
        uow.commit()


def _pair_json(pair: CandidatePair) -> dict[str, Any]:
    return {"a": pair.a_id, "b": pair.b_id, "similarity": pair.similarity,
            "judged_before": pair.judged_before, "sources": list(pair.sources)}


# ---- applying -------------------------------------------------------------------------------

class Applier:
    """Applies decisions one short transaction each and keeps what this run retired."""

    def __init__(self, ctx: PhaseContext, parent_step_id: str, notes: dict[str, Note],
                 counters: dict[str, Any]) -> None:
        self.ctx, self.parent_step_id, self.notes, self.counters = ctx, parent_step_id, notes, counters
        self.policy = _policy(ctx)
        self.retired: set[str] = set()
        self.retired_into: dict[str, str] = {}
        self.remember: dict[tuple[str, str], Verdict] = {}
        self.guard_reason: str | None = None
        self.guarded: list[str] = []
        # Revocations the guard refused: kept for the next run, which applies them unasked.
        self.held_back: list[tuple[Verdict, Decision]] = []
        self.held_into: dict[str, str] = {}

    def decided_into(self) -> dict[str, str]:
        """Loser → winner of every retirement decided, applied or held back by the guard:
        a decided loser's remaining pairs are questions about its winner."""
        return {**self.held_into, **self.retired_into}

    def apply_held_back(
        self, held_back: list[tuple[Verdict, Decision]], pairs: list[CandidatePair],
    ) -> list[CandidatePair]:
        """Apply an earlier run's held-back retirements; the fresh pairs left to ask."""
        if not held_back:
            return pairs
        applied = 0
        for verdict, decision in held_back:
            if {decision.loser_id, decision.winner_id} & self.retired:
                continue  # its winner went too: the loser's pairs are asked about afresh
            entry = self.apply(verdict, decision)
            applied += entry["action"] == "revoke"
        self.counters["retirements_applied_unasked"] = applied
        active = {k: n for k, n in self.notes.items() if k not in self.retired}
        return follow_retirements(pairs, self.decided_into(), set(), active)

    def apply_topic(self, verdict: TopicVerdict) -> list[dict[str, Any]]:
        """Every decision the topic's answer implies, in order; unmentioned pairs remembered."""
        suspicious = _suspicious(self.notes, list(verdict.topic.pairs))
        entries = []
        covered: set[tuple[str, str]] = set()
        for pd in topic_decisions(verdict, self.notes, self.policy, suspicious):
            covered.add(pd.verdict.pair.ids)
            entry = self.apply(pd.verdict, pd.decision)
            entries.append({"a": pd.verdict.pair.a_id, "b": pd.verdict.pair.b_id,
                            "relation": pd.verdict.relation, **entry})
        for p in independent_pairs(verdict):
            if p.ids not in covered and not (set(p.ids) & self.retired):
                self.remember.setdefault(p.ids, Verdict(p, "independent", 1.0,
                                                        "not one attribute's values"))
        self.counters["pairs_judged"] += len(verdict.topic.pairs)
        return entries

    def apply(self, verdict: Verdict, decision: Decision) -> dict[str, Any]:
        ctx, counters = self.ctx, self.counters
        a, b = self.notes[verdict.pair.a_id], self.notes[verdict.pair.b_id]
        entry: dict[str, Any] = {"action": decision.action, "kind": decision.kind}
        if decision.winner_id:
            entry["winner"] = decision.winner_id
        if decision.why:
            entry["why"] = decision.why
        if a.id in self.retired or b.id in self.retired:
            # Planning never asks about a retired note; were one to slip through, it is counted.
            counters["verdicts_wasted"] += 1
            entry.update(action="skipped", why="a note of the pair was already retired in this run")
            return entry
        if decision.action == "none":
            self.remember[verdict.pair.ids] = verdict
            return entry
        if decision.action == "revoke" and self.guard_reason is not None:
            self._hold_back(verdict, decision)
            entry["action"] = "guarded"
            return entry
        if ctx.dry_run:
            entry["dry_run"] = True
            result = "ok"
        elif decision.action == "revoke":
            result = _revoke(ctx, verdict, decision, self.notes)
        else:
            result = "ok" if _flag(ctx, verdict, a, b, decision) else "stale"
        if result.startswith("guard:"):
            # The blast-radius guard said no (R20): this and every later revocation stays undone.
            self.guard_reason = result.removeprefix("guard:")
            self._hold_back(verdict, decision)
            entry["action"] = "guarded"
            return entry
        if result == "stale":
            entry["action"] = "stale"
            counters["pairs_skipped_stale"] += 1
            return entry
        if decision.action == "revoke":
            assert decision.loser_id is not None and decision.winner_id is not None
            self.retired.add(decision.loser_id)
            self.retired_into[decision.loser_id] = decision.winner_id
            key = "conflicts_resolved" if decision.kind == "conflict" else "equivalents_merged"
            counters[key] += 1
        else:
            counters["conflicts_flagged"] += 1
        return entry

    def _hold_back(self, verdict: Verdict, decision: Decision) -> None:
        assert decision.loser_id is not None and decision.winner_id is not None
        self.guarded.append(decision.loser_id)
        if decision.loser_id in self.held_into:
            return  # a loser is held back into one winner: the first decided
        self.held_back.append((verdict, decision))
        self.held_into[decision.loser_id] = decision.winner_id

    def finish(self) -> None:
        """Record the guard's trip and what it held back, and remember every settled pair,
        each at the notes' current versions."""
        ctx = self.ctx
        if self.guard_reason is not None:
            self.counters["pairs_guarded"] = len(self.guarded)
            record_trip(ctx, self.parent_step_id, PHASE, self.guard_reason, self.guarded)
        remember = [v for ids, v in self.remember.items() if not set(ids) & self.retired]
        held_back = [(v, d) for v, d in self.held_back
                     if not {d.loser_id, d.winner_id} & self.retired]
        if not (remember or held_back) or ctx.dry_run:
            return
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            current = uow.notes.versions(
                {i for v in remember for i in v.pair.ids} | {i for v, _ in held_back
                                                             for i in v.pair.ids})
            for v, d in held_back:
                assert d.loser_id is not None and d.winner_id is not None
                pair = [self.notes[d.loser_id], self.notes[d.winner_id]]
                if any(current.get(n.id, (0, ""))[1] != NoteStatus.ACTIVE.value for n in pair):
                    continue
                pair = [replace(n, version=current[n.id][0]) for n in pair]
                uow.judgements.record_retirement(
                    ctx.scope, fingerprint_notes(pair), d.loser_id, d.winner_id, d.kind,
                    v.reason or d.why, ctx.run_id, ctx.now)
            for v in remember:
                pair = [self.notes[i] for i in v.pair.ids]
                if any(current.get(n.id, (0, ""))[1] != NoteStatus.ACTIVE.value for n in pair):
                    continue
                # At the versions now stored (a flag may have moved one), so the next run
                # does not ask again about an unchanged pair.
                pair = [replace(n, version=current[n.id][0]) for n in pair]
                uow.judgements.record(ctx.scope, JUDGEMENT_KIND, fingerprint_notes(pair),
                                      [n.id for n in pair], v.relation, v.reason, ctx.run_id,
                                      ctx.now)
            uow.commit()


def _fresh(uow: Any, *members: Note) -> bool:
    """Both notes still active at the versions this plan read (R10)."""
    current = uow.notes.versions([n.id for n in members])
    return all(current.get(n.id) == (n.version, NoteStatus.ACTIVE.value) for n in members)


def _remember(ctx: PhaseContext, uow: Any, verdict: Verdict, notes: dict[str, Note]) -> None:
    pair = [notes[verdict.pair.a_id], notes[verdict.pair.b_id]]
    uow.judgements.record(
        ctx.scope, JUDGEMENT_KIND, fingerprint_notes(pair), [n.id for n in pair],
        verdict.relation, verdict.reason, ctx.run_id, ctx.now,
    )


def _revoke(ctx: PhaseContext, verdict: Verdict, decision: Decision, notes: dict[str, Note]) -> str:
    """ok | stale (a note changed since the plan) | guard:<reason> (the blast-radius guard)."""
    assert decision.winner_id is not None and decision.loser_id is not None
    winner, loser = notes[decision.winner_id], notes[decision.loser_id]
    reason = verdict.reason or decision.why
    changes: dict[str, Any] = {"status": NoteStatus.REVOKED.value,
                               "consolidated_into_id": winner.id}
    if decision.kind == "conflict":
        # The losing fact stopped being true once the conflicting one was recorded too: the
        # winner's creation, or the loser's own when the winner is the older, more used note.
        assert winner.created_at is not None
        changes["valid_to"] = retired_at(loser, winner.created_at)
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        # One read: the freshness check (R10), the loser's comments and the log's before image.
        state = uow.notes.current_state([winner.id, loser.id])
        if not all((state.get(n.id, {}).get("version"), state.get(n.id, {}).get("status"))
                   == (n.version, NoteStatus.ACTIVE.value) for n in (winner, loser)):
            return "stale"
        refusal = check_retire(uow, ctx, [loser])  # R20
        if refusal is not None:
            uow.rollback()
            return f"guard:{refusal}"
        existing = state[loser.id]["comments"]
        changes["comments"] = append_comment(
            existing, resolved_comment(winner.id, decision.kind, reason))
        if uow.notes.change_many([loser], {loser.id: changes}, run_id=ctx.run_id, now=ctx.now,
                                 reason=f"contradictions.{decision.kind}", current=state):
            uow.rollback()
            return "stale"
        uow.notes.add_lineage(ctx.scope, [loser.id], winner.id, LINEAGE[decision.kind],
                              ctx.run_id, ctx.now)
        _remember(ctx, uow, verdict, notes)
        crashpoint("contradictions.after_revoke")
        uow.commit()
    loser.status = NoteStatus.REVOKED.value
    return "ok"


def _flag(ctx: PhaseContext, verdict: Verdict, a: Note, b: Note, decision: Decision) -> bool:
    """Both kept: a comment and a flag on each, one review record; nothing revoked."""
    reason = f"{decision.why}. {verdict.reason}".strip()
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        if not _fresh(uow, a, b):
            return False
        existing = uow.notes.comments_of([a.id, b.id])
        new_flags: dict[str, list[str]] = {}
        for note, other in ((a, b), (b, a)):
            flags = sorted(set(note.flags) | {REVIEW_FLAG})
            new_flags[note.id] = flags
            ok = uow.notes.change(
                note, run_id=ctx.run_id, now=ctx.now, reason="contradictions.flagged",
                flags=flags,
                comments=append_comment(existing.get(note.id), flagged_comment(other.id, reason)),
            )
            if not ok:
                uow.rollback()
                return False
        uow.judgements.add_review(ctx.scope, REVIEW_KIND, [a.id, b.id], reason[:500],
                                  ctx.run_id, ctx.now)
        # Remembered at the notes' versions (a flag keeps them), so no later run asks again.
        uow.judgements.record(ctx.scope, JUDGEMENT_KIND, fingerprint_notes([a, b]),
                              [a.id, b.id], verdict.relation, verdict.reason, ctx.run_id, ctx.now)
        uow.commit()
    a.flags, b.flags = new_flags[a.id], new_flags[b.id]
    return True


# ---- steps ----------------------------------------------------------------------------------

def _record_calls(ctx: PhaseContext, parent_step_id: str, results: list[CallResult]) -> None:
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        for k, r in enumerate(results, start=1):
            ctx.steps.child(uow, parent_step_id, PHASE, _call_step(ctx, k, r))
        uow.commit()


def _open_step(pair: CandidatePair) -> ChildStep:
    return ChildStep(
        name="open_pair", status=StepStatus.SKIPPED.value,
        input={"note_ids": list(pair.ids), "similarity": pair.similarity,
               "fingerprint": pair.fingerprint, "sources": list(pair.sources)},
        output={"verdict": OPEN, "reason": "the rule-based judge cannot settle this pair",
                "similarity": pair.similarity},
    )


def _call_step(ctx: PhaseContext, number: int, r: CallResult) -> ChildStep:
    tid_of = {t.key: tid for tid, t in r.by_topic.items()}
    topics_in = [{"topic": tid_of[t.key], "note_ids": list(t.note_ids),
                  "pairs": [_pair_json(p) for p in t.pairs], "judged_before": t.judged_before,
                  "waiting_since": t.waiting_since.isoformat()} for t in r.call.topics]
    answered = [{"topic": tid_of[v.topic.key], "attributes": [
        {"name": a.name, "confidence": a.confidence, "reason": a.reason,
         "values": [{"note_ids": list(c.note_ids), "fullest": c.fullest} for c in a.values]}
        for a in v.attributes]} for v in r.verdicts]
    output: dict[str, Any] = {"topics": answered, "actions": r.actions, "dry_run": ctx.dry_run,
                              "aliases": r.alias_of}
    if r.dropped:
        output["dropped"] = [{"topic": tid, "reason": why} for tid, why in sorted(r.dropped.items())]
    o = r.outcome
    assert o is not None
    output["attempts"] = o.attempts
    if o.errors:
        output["errors"] = o.errors
    status = StepStatus.SUCCEEDED.value if r.verdicts else StepStatus.SKIPPED.value
    return ChildStep(
        name="model", status=status,
        input={"call": number, "round": r.round, "judge": "llm", "isolated": r.call.isolated,
               "topics": topics_in},
        output=output, error=None if o.ok else f"{o.status}: {o.reason}"[:300],
        prompt_name=PROMPT, template_hash=r.template_hash, model=o.model or None,
        tokens_in=o.tokens_in, tokens_out=o.tokens_out, duration_ms=r.duration_ms,
    )


# ---- host access ----------------------------------------------------------------------------

def open_pairs(app: Any, scope: Scope, limit: int | None = None) -> list[dict[str, Any]]:
    """Candidate pairs no verdict settles yet: what the rule judge leaves for a model or the host.

    Read-only apart from embedding notes that lack a vector. Ordered fairly (never judged first,
    then most similar). Each item: a, b (note ids), similarity, fingerprint (ids + versions; pass
    it back with a verdict so a note changed meanwhile is detected), sources.
    """
    from worker.embeddings.refresh import ensure_scope_embeddings

    ensure_scope_embeddings(app, scope)
    loaded = load_candidates(app, scope, None)
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
    return out

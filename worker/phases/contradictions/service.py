"""The contradictions phase: find similar pairs in a scope, have them classified, apply policy.

Short read → pure plan → model calls (no transaction open) → one short transaction per pair.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

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
    PairPlan,
    PolicySettings,
    Verdict,
    append_comment,
    apply_order,
    batches,
    check_verdicts,
    decide,
    flagged_comment,
    plan_pairs,
    problems,
    prompt_pairs,
    resolved_comment,
    rule_verdict,
)
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.safety.crashpoints import crashpoint
from worker.safety.guard import check_retire, record_trip
from worker.safety.injection import injection_signals
from worker.similarity import neighbour_pairs

log = structlog.get_logger(__name__)

PHASE = "contradictions"
PROMPT = "contradictions"
JUDGEMENT_KIND = "pair"
REVIEW_KIND = "contradiction"
REVIEW_FLAG = "contradiction_review"
LINEAGE = {"conflict": "superseded", "equivalent": "duplicate", "subsumed": "subsumed"}

COUNTERS = (
    "pairs_considered", "pairs_judged", "conflicts_resolved", "conflicts_flagged",
    "equivalents_merged", "pairs_skipped_stale", "tokens_in", "tokens_out",
)


class PairVerdict(BaseModel):
    pair: str
    relation: Literal["independent", "equivalent", "a_subsumes_b", "b_subsumes_a", "conflicting"]
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field("", max_length=1000)


class ContradictionReply(BaseModel):
    verdicts: list[PairVerdict]


@dataclass
class BatchResult:
    """One question to the judge and what came back, before anything is applied."""

    pairs: list[CandidatePair]
    by_pair: dict[str, CandidatePair]
    verdicts: list[Verdict] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    open: list[CandidatePair] = field(default_factory=list)
    outcome: Outcome[ContradictionReply] | None = None
    template_hash: str | None = None
    started: float = 0.0
    duration_ms: float = 0.0


@dataclass
class Loaded:
    notes: dict[str, Note]
    plan: PairPlan


def _policy(ctx: PhaseContext) -> PolicySettings:
    s = ctx.settings.contradictions
    return PolicySettings(s.min_confidence, s.newer_wins_days, s.high_importance)


def load_candidates(app: Any, scope: Scope, run_id: str | None, max_pairs: int | None) -> Loaded:
    """Two short reads per scope (notes + memory), FAISS range search in between."""
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
    neighbours = neighbour_pairs(
        snap.vectors, settings.contradictions.threshold, settings.ann_threshold
    )
    fps = [fingerprint_notes([snap.notes[i], snap.notes[j]]) for i, j, _ in neighbours]
    with app.uow() as uow:
        known = set(uow.judgements.known(scope, JUDGEMENT_KIND, fps)) if fps else set()
    plan = plan_pairs(
        snap.notes, neighbours, produced_this_run=produced, known_fingerprints=known,
        judged_id_pairs=judged, max_pairs=max_pairs,
    )
    return Loaded(snap.by_id(), plan)


def run_contradictions(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
    settings = ctx.settings.contradictions
    llm: LLMClient | None = ctx.app.llm
    # The rule judge costs nothing, so it is not capped; the cap is for model calls.
    loaded = load_candidates(
        ctx.app, ctx.scope, ctx.run_id, settings.max_pairs_per_run if llm is not None else None
    )
    plan, notes = loaded.plan, loaded.notes
    counters: dict[str, Any] = dict.fromkeys(COUNTERS, 0)
    counters.update(pairs_considered=plan.considered, pairs_skipped_same_run=plan.skipped_same_run,
                    pairs_remembered=plan.remembered, pairs_deferred=plan.deferred,
                    pairs_open=0, pairs_dropped=0)
    if not plan.selected:
        status = StepStatus.NO_ITEMS.value if plan.considered == 0 else StepStatus.SUCCEEDED.value
        return PhaseReport(phase=PHASE, status=status, counters=counters)

    groups = batches(plan.selected, settings.pairs_per_call)
    if llm is None:
        results = [_rule_batch(b, notes) for b in groups]
    else:
        results = _ask_all(ctx, llm, groups, notes)

    outcomes = _apply(ctx, parent_step_id, results, notes, counters)
    _record_batches(ctx, parent_step_id, results, outcomes)

    calls = sum(r.outcome.attempts for r in results if r.outcome is not None)
    counters["tokens_in"] = sum(r.outcome.tokens_in for r in results if r.outcome is not None)
    counters["tokens_out"] = sum(r.outcome.tokens_out for r in results if r.outcome is not None)
    counters["pairs_open"] = sum(len(r.open) for r in results)
    counters["pairs_dropped"] = sum(len(r.dropped) for r in results)
    budget_hit = any(r.outcome is not None and r.outcome.status == "budget_exhausted"
                     for r in results)
    log.info("contradictions.finished", run_id=ctx.run_id, scope=ctx.scope.key,
             **{k: v for k, v in counters.items() if isinstance(v, int)})
    return PhaseReport(
        phase=PHASE, status=StepStatus.SUCCEEDED.value, counters=counters,
        tokens_in=counters["tokens_in"], tokens_out=counters["tokens_out"], calls=calls,
        reason="model budget exhausted; remaining pairs wait for a later run" if budget_hit else None,
    )


# ---- judging --------------------------------------------------------------------------------

def _rule_batch(batch: list[CandidatePair], notes: dict[str, Note]) -> BatchResult:
    result = BatchResult(batch, {f"p{k}": p for k, p in enumerate(batch, start=1)})
    for pair in batch:
        relation, reason = rule_verdict(notes[pair.a_id], notes[pair.b_id])
        if relation == OPEN:
            result.open.append(pair)
        else:
            result.verdicts.append(Verdict(pair, relation, 1.0, reason))
    return result


def _ask_all(
    ctx: PhaseContext, llm: LLMClient, groups: list[list[CandidatePair]], notes: dict[str, Note]
) -> list[BatchResult]:
    # Model calls run concurrently and no transaction is open while they do.
    workers = max(1, min(ctx.settings.llm_concurrency, len(groups)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="contradictions") as pool:
        return list(pool.map(lambda b: _ask_batch(ctx, llm, b, notes), groups))


def _ask_batch(
    ctx: PhaseContext, llm: LLMClient, batch: list[CandidatePair], notes: dict[str, Note]
) -> BatchResult:
    items, by_pair = prompt_pairs(batch, notes)
    result = BatchResult(batch, by_pair, started=time.perf_counter())
    prompt = render_prompt(PROMPT, {"pairs": items, "pair_ids": list(by_pair)})
    result.template_hash = prompt.template_hash
    last_reply: list[list[tuple[str, str, float, str]]] = []

    def validate(reply: ContradictionReply) -> None:
        replied: list[tuple[str, str, float, str]] = [
            (v.pair, str(v.relation), v.confidence, v.reason) for v in reply.verdicts]
        last_reply.append(replied)
        problem = problems(replied, by_pair)
        if problem:
            raise ReplyRejected(f"every pair needs exactly one verdict: {problem}"[:300])

    outcome = ask(llm, prompt, ContradictionReply, validate=validate,
                  reserve=ctx.budget.try_reserve_call, charge=ctx.budget.charge)
    result.outcome = outcome
    result.duration_ms = (time.perf_counter() - result.started) * 1000
    if last_reply:
        # After the re-asks, keep the pairs the last parsed reply answered cleanly; a missing,
        # doubled or unknown pair changes nothing for that pair (R12).
        result.verdicts, result.dropped = check_verdicts(last_reply[-1], by_pair)
    else:
        result.dropped = {pid: outcome.reason or outcome.status for pid in by_pair}
    if result.dropped:
        log.warning("contradictions.pairs_dropped", run_id=ctx.run_id, scope=ctx.scope.key,
                    dropped=len(result.dropped), status=outcome.status, attempts=outcome.attempts)
    return result


# ---- applying -------------------------------------------------------------------------------

def _apply(
    ctx: PhaseContext, parent_step_id: str, results: list[BatchResult], notes: dict[str, Note],
    counters: dict[str, Any],
) -> dict[tuple[str, str], dict[str, Any]]:
    """Apply every verdict in a fixed order; returns what happened to each pair (for the steps)."""
    policy = _policy(ctx)
    retired: set[str] = set()  # revoked by this phase already: never applied twice
    done: dict[tuple[str, str], dict[str, Any]] = {}
    remember: list[Verdict] = []
    guard_reason: str | None = None
    guarded: list[str] = []
    verdicts = [v for r in results for v in r.verdicts]
    suspicious = frozenset(
        nid for v in verdicts for nid in v.pair.ids
        if any(f.startswith("injection") for f in notes[nid].flags)
        or injection_signals(notes[nid].content)
    )
    counters["pairs_judged"] = len(verdicts)
    for verdict in apply_order(verdicts, notes):
        a, b = notes[verdict.pair.a_id], notes[verdict.pair.b_id]
        decision = decide(verdict, a, b, policy, suspicious)
        entry: dict[str, Any] = {"action": decision.action, "kind": decision.kind}
        if decision.winner_id:
            entry["winner"] = decision.winner_id
        done[verdict.pair.ids] = entry
        if a.id in retired or b.id in retired:
            entry["action"] = "skipped"
            entry["why"] = "a note of the pair was already retired in this run"
            continue
        if decision.action == "none":
            remember.append(verdict)
            continue
        if decision.action == "revoke" and guard_reason is not None:
            guarded.append(decision.loser_id or "")
            entry["action"] = "guarded"
            continue
        if ctx.dry_run:
            entry["dry_run"] = True
            result = "ok"
        elif decision.action == "revoke":
            result = _revoke(ctx, verdict, decision, notes)
        else:
            result = "ok" if _flag(ctx, verdict, a, b, decision) else "stale"
        if result.startswith("guard:"):
            # The blast-radius guard said no (R20): this and every later revocation stays undone.
            guard_reason = result.removeprefix("guard:")
            guarded.append(decision.loser_id or "")
            entry["action"] = "guarded"
            continue
        if result == "stale":
            entry["action"] = "stale"
            counters["pairs_skipped_stale"] += 1
            continue
        if decision.action == "revoke":
            assert decision.loser_id is not None
            retired.add(decision.loser_id)
            key = "conflicts_resolved" if decision.kind == "conflict" else "equivalents_merged"
            counters[key] += 1
        else:
            counters["conflicts_flagged"] += 1
    if guard_reason is not None:
        counters["pairs_guarded"] = len(guarded)
        record_trip(ctx, parent_step_id, PHASE, guard_reason, guarded)
    if remember and not ctx.dry_run:
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            for v in remember:
                _remember(ctx, uow, v, notes)
            uow.commit()
    return done


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

def _record_batches(
    ctx: PhaseContext, parent_step_id: str, results: list[BatchResult],
    done: dict[tuple[str, str], dict[str, Any]],
) -> None:
    # Open pairs get one child each ({"verdict": "open"}, note_ids) so the host API can list
    # them; capped per run, the rest stay reachable through open_pairs().
    open_budget = ctx.settings.contradictions.max_pairs_per_run
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        for k, r in enumerate(results, start=1):
            if r.outcome is not None or r.verdicts:
                ctx.steps.child(uow, parent_step_id, PHASE, _batch_step(ctx, k, r, done))
            for pair in r.open[: max(0, open_budget)]:
                ctx.steps.child(uow, parent_step_id, PHASE, _open_step(pair))
            open_budget -= len(r.open)
        uow.commit()


def _open_step(pair: CandidatePair) -> ChildStep:
    return ChildStep(
        name="open_pair", status=StepStatus.SKIPPED.value,
        input={"note_ids": list(pair.ids), "similarity": pair.similarity,
               "fingerprint": pair.fingerprint},
        output={"verdict": OPEN, "reason": "the rule-based judge cannot settle this pair",
                "similarity": pair.similarity},
    )


def _batch_step(
    ctx: PhaseContext, number: int, r: BatchResult, done: dict[tuple[str, str], dict[str, Any]]
) -> ChildStep:
    pid_of = {p.ids: pid for pid, p in r.by_pair.items()}
    pairs = [{"pair": pid_of[p.ids], "a": p.a_id, "b": p.b_id, "similarity": p.similarity,
              "judged_before": p.judged_before} for p in r.pairs]
    verdicts: list[dict[str, Any]] = [
        {"pair": pid_of[v.pair.ids], "relation": v.relation, "confidence": v.confidence,
         "reason": v.reason, **done.get(v.pair.ids, {})}
        for v in r.verdicts
    ]
    output: dict[str, Any] = {"verdicts": verdicts, "dry_run": ctx.dry_run}
    if r.dropped:
        output["dropped"] = [{"pair": pid, "reason": why} for pid, why in sorted(r.dropped.items())]
    o = r.outcome
    if o is None:
        return ChildStep(name="rules", status=StepStatus.SUCCEEDED.value,
                         input={"batch": number, "judge": "rules", "pairs": pairs}, output=output)
    output["attempts"] = o.attempts
    if o.errors:
        output["errors"] = o.errors
    status = StepStatus.SUCCEEDED.value if r.verdicts else StepStatus.SKIPPED.value
    return ChildStep(
        name="model", status=status, input={"batch": number, "judge": "llm", "pairs": pairs},
        output=output, error=None if o.ok else f"{o.status}: {o.reason}"[:300],
        prompt_name=PROMPT, template_hash=r.template_hash, model=o.model or None,
        tokens_in=o.tokens_in, tokens_out=o.tokens_out, duration_ms=r.duration_ms,
    )


# ---- host access ----------------------------------------------------------------------------

def open_pairs(app: Any, scope: Scope, limit: int | None = None) -> list[dict[str, Any]]:
    """Candidate pairs no verdict settles yet: what the rule judge leaves for a model or the host.

    Read-only apart from embedding notes that lack a vector. Ordered fairly (never judged first,
    then most similar). Each item: a, b (note ids), similarity, fingerprint (ids + versions; pass
    it back with a verdict so a note changed meanwhile is detected).
    """
    from worker.embeddings.refresh import ensure_scope_embeddings

    ensure_scope_embeddings(app, scope)
    loaded = load_candidates(app, scope, None, None)
    out: list[dict[str, Any]] = []
    for pair in loaded.plan.selected:
        relation, _ = rule_verdict(loaded.notes[pair.a_id], loaded.notes[pair.b_id])
        if relation != OPEN:
            continue
        out.append({"a": pair.a_id, "b": pair.b_id, "similarity": pair.similarity,
                    "fingerprint": pair.fingerprint, "judged_before": pair.judged_before})
        if limit is not None and len(out) >= limit:
            break
    return out

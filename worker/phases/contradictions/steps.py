"""Child steps the phase records: one per model call, rule verdicts in batches, one per open
pair, and the JSON a pair takes in them."""

from __future__ import annotations

from typing import Any

from worker.domain.types import StepStatus
from worker.phases.contradictions.core import (
    OPEN,
    PROMPT,
    CandidatePair,
    Verdict,
)
from worker.phases.contradictions.judging import CallResult
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep

RULE_STEP_PAIRS = 50  # rule verdicts recorded per child step


def pair_json(pair: CandidatePair) -> dict[str, Any]:
    return {"a": pair.a_id, "b": pair.b_id, "similarity": pair.similarity,
            "judged_before": pair.judged_before, "sources": list(pair.sources)}


def call_steps(ctx: PhaseContext, results: list[CallResult]) -> list[ChildStep]:
    """One child step per model call, in the order asked (written with the phase's write)."""
    return [_call_step(ctx, k, r) for k, r in enumerate(results, start=1)]


def rule_steps(ctx: PhaseContext, entries: list[tuple[Verdict, dict[str, Any]]],
               open_pairs: list[CandidatePair]) -> list[ChildStep]:
    """Rule verdicts in batches of ``RULE_STEP_PAIRS``, then one step per open pair (capped per
    run; the rest stay reachable through ``open_pairs``) so the host API can list them."""
    steps = []
    for k in range(0, len(entries), RULE_STEP_PAIRS):
        chunk = entries[k: k + RULE_STEP_PAIRS]
        steps.append(ChildStep(
            name="rules", status=StepStatus.SUCCEEDED.value,
            input={"batch": k // RULE_STEP_PAIRS + 1, "judge": "rules",
                   "pairs": [pair_json(v.pair) for v, _ in chunk]},
            output={"verdicts": [{"a": v.pair.a_id, "b": v.pair.b_id, "relation": v.relation,
                                  "confidence": v.confidence, "reason": v.reason, **entry}
                                 for v, entry in chunk], "dry_run": ctx.dry_run}))
    steps.extend(open_step(p) for p in open_pairs[: ctx.settings.contradictions.max_open_steps])
    return steps


def open_step(pair: CandidatePair) -> ChildStep:
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
                  "pairs": [pair_json(p) for p in t.pairs], "judged_before": t.judged_before,
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

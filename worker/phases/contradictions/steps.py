"""Child steps the phase records: one per model call, one per open pair, and the JSON a pair takes in them."""

from __future__ import annotations

from typing import Any

from worker.domain.types import StepStatus
from worker.phases.contradictions.core import (
    OPEN,
    PHASE,
    PROMPT,
    CandidatePair,
)
from worker.phases.contradictions.judging import CallResult
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep


def pair_json(pair: CandidatePair) -> dict[str, Any]:
    return {"a": pair.a_id, "b": pair.b_id, "similarity": pair.similarity,
            "judged_before": pair.judged_before, "sources": list(pair.sources)}


def record_calls(ctx: PhaseContext, parent_step_id: str, results: list[CallResult]) -> None:
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        for k, r in enumerate(results, start=1):
            ctx.steps.child(uow, parent_step_id, PHASE, _call_step(ctx, k, r))
        uow.commit()


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

"""Ask the model, in concurrent batches, whether notes about to be archived should be kept.

Shared by prune (only the source conversation is gone) and archive (high-importance notes unused
for long). No transaction is open while the model is asked; replies are validated (R12).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from worker.llm.ask import ReplyRejected, ask
from worker.llm.prompts import render_prompt
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.telemetry import in_current_trace

BATCH = 10


class KeepDecision(BaseModel):
    id: str
    decision: Literal["keep", "archive"]
    reason: str = Field("", max_length=500)


class KeepReply(BaseModel):
    decisions: list[KeepDecision]


@dataclass
class ReviewResult:
    """Per note: True keep, False archive; ids absent were not decided (the model failed)."""

    keep: dict[str, bool] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    steps: list[ChildStep] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0


def _validator(ids: list[str]):  # type: ignore[no-untyped-def]
    wanted = set(ids)

    def validate(reply: KeepReply) -> None:
        got = [d.id for d in reply.decisions]
        unknown = sorted(set(got) - wanted)
        if unknown:
            raise ReplyRejected(f"unknown note id {unknown[0]!r}; decide only the notes listed")
        if len(got) != len(set(got)):
            raise ReplyRejected("a note was decided twice; give exactly one decision per note")
        missing = sorted(wanted - set(got))
        if missing:
            raise ReplyRejected(f"no decision for note {missing[0]!r}; decide every note listed")

    return validate


def review_batches(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Batches of ``BATCH``; a note whose text reads like instructions is asked alone, so it
    can never steer the decision on another note of its prompt (issue 12 item 2, R14)."""
    from worker.safety.injection import injection_signals

    alone = [i for i in items if injection_signals(str(i.get("content", "")))]
    trusted = [i for i in items if not any(i is a for a in alone)]
    return [trusted[k : k + BATCH] for k in range(0, len(trusted), BATCH)] + [[i] for i in alone]


def review_keep(
    ctx: PhaseContext, prompt_name: str, items: list[dict[str, Any]], context: dict[str, Any],
) -> ReviewResult:
    """``items`` are prompt-ready dicts with an ``id``; the prompt gets ``notes`` plus ``context``."""
    result = ReviewResult()
    llm = ctx.app.llm
    if llm is None or not items:
        return result
    batches = review_batches(items)
    # The phase's wall budget: batches not asked by then are deferred (kept), never failed.
    deadline = time.monotonic() + ctx.settings.llm_phase_seconds

    def one(batch: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Any, Any]:
        prompt = render_prompt(prompt_name, {**context, "notes": batch})
        ids = [b["id"] for b in batch]
        outcome = ask(llm, prompt, KeepReply, validate=_validator(ids),
                      reserve=ctx.budget.try_reserve_call, charge=ctx.budget.charge,
                      deadline=deadline)
        return batch, prompt, outcome

    with ThreadPoolExecutor(max_workers=min(ctx.settings.llm_concurrency, len(batches))) as pool:
        answers = list(pool.map(in_current_trace(one), batches))
    for number, (batch, prompt, outcome) in enumerate(answers, start=1):
        ids = [b["id"] for b in batch]
        result.tokens_in += outcome.tokens_in
        result.tokens_out += outcome.tokens_out
        result.calls += outcome.attempts
        output: dict[str, Any] = {"asked": len(ids)}
        if outcome.ok:
            for d in outcome.value.decisions:
                result.keep[d.id] = d.decision == "keep"
                result.reasons[d.id] = d.reason
            output["kept"] = sorted(i for i in ids if result.keep[i])
            output["archive"] = sorted(i for i in ids if not result.keep[i])
        else:
            output["deferred"] = ids
            output["reason"] = f"model {outcome.status}: {outcome.reason}"[:300]
        result.steps.append(ChildStep(
            name=f"review {number}", status="succeeded" if outcome.ok else "skipped",
            input={"note_ids": ids}, output=output, prompt_name=prompt.name,
            template_hash=prompt.template_hash, model=outcome.model or getattr(llm, "model", None),
            tokens_in=outcome.tokens_in, tokens_out=outcome.tokens_out,
        ))
    return result

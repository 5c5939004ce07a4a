"""Ask the model, a batch of notes per prompt, whether notes about to be archived should be kept.

Shared by prune (only the source conversation is gone) and archive (high-importance notes unused
for long). No transaction is open while the model is asked; replies are validated (R12).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, Field

from worker.llm.ask import ReplyRejected
from worker.llm.fanout import Question, ask_all
from worker.llm.prompts import render_prompt
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep

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


def _keeps_all(reply: KeepReply) -> bool:
    return all(d.decision == "keep" for d in reply.decisions)


def _kept(ids: list[str]) -> KeepReply:
    """A review that kept every note of its batch, as later runs take it from memory: the same
    notes at the same versions are not asked about again (and paid for) by every run while
    ``DREAM_LLM_UNANSWERED_HOURS`` last. Before, each run asked again about every note the
    review had kept."""
    return KeepReply(decisions=[KeepDecision(id=i, decision="keep", reason=KEPT_BEFORE)
                                for i in ids])


KEPT_BEFORE = "kept by the review of an earlier run, the note unchanged since"


def review_batches(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Batches of ``BATCH``; a note whose text reads like instructions is asked alone, so it
    can never steer the decision on another note of its prompt (issue 12 item 2, R14)."""
    from worker.safety.injection import injection_signals

    alone = [i for i in items if injection_signals(str(i.get("content", "")))]
    trusted = [i for i in items if not any(i is a for a in alone)]
    return [trusted[k : k + BATCH] for k in range(0, len(trusted), BATCH)] + [[i] for i in alone]


def review_keep(
    ctx: PhaseContext, prompt_name: str, items: list[dict[str, Any]], context: dict[str, Any],
    versions: dict[str, int] | None = None,
) -> ReviewResult:
    """``items`` are prompt-ready dicts with an ``id``; the prompt gets ``notes`` plus ``context``.
    ``versions``: each item's note version (a batch the model refused is then remembered)."""
    result = ReviewResult()
    llm = ctx.app.llm
    if llm is None or not items:
        return result
    batches = review_batches(items)
    # The phase's wall budget: batches not asked by then are deferred (kept), never failed.
    deadline = time.monotonic() + ctx.settings.llm_phase_seconds
    questions = [Question(render_prompt(prompt_name, {**context, "notes": batch}), KeepReply,
                          _validator([b["id"] for b in batch]), about=tuple(
                              (b["id"], versions[b["id"]]) for b in batch) if versions else (),
                          replay=(_keeps_all, partial(_kept, [b["id"] for b in batch])))
                 for batch in batches]
    outcomes = ask_all(ctx, questions, deadline=deadline, phase=prompt_name)
    answers = [(b, q.prompt, o) for b, q, o in zip(batches, questions, outcomes, strict=True)]
    for number, (batch, prompt, outcome) in enumerate(answers, start=1):
        ids = [b["id"] for b in batch]
        result.tokens_in += outcome.tokens_in
        result.tokens_out += outcome.tokens_out
        result.calls += outcome.attempts
        output: dict[str, Any] = {"asked": len(ids)}
        if outcome.ok and outcome.value is not None:
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
            template_hash=prompt.template_hash, model=_model_asked(outcome, llm),
            tokens_in=outcome.tokens_in, tokens_out=outcome.tokens_out,
        ))
    return result


def _model_asked(outcome: Any, llm: Any) -> str | None:
    """The model a review step asked, or None when none was (the budget or the phase's time
    had run out first): a step naming a model counts as a call (``domain.usage``)."""
    if not outcome.attempts:
        return None
    return outcome.model or getattr(llm, "model", None)

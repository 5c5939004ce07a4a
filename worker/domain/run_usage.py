"""Pure: a run's model usage as its totals report it, from its step rows (each call once,
``usage.step_usage``): what ``finalize`` writes as the run ends, what a stop (a cancel, an
erasure, a run given up) writes as it stops the run, and what a late release charges again."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from worker.domain.types import StepStatus
from worker.domain.usage import StepUsage, StepViews, billed_late, step_usage

# In an interrupted step's output: the calls still waiting in its batch when it was
# interrupted, handed over to the attempt that resumes the run, or given up with the run
# stopped for good (``run_stops``); in the step that settled handed-over calls: those
# (``model_calls_taken_over``).
HANDED_OVER = "model_calls_handed_over"
GIVEN_UP = "model_calls_given_up"
TAKEN_OVER = "model_calls_taken_over"
# The totals ``batch_calls`` writes only when not zero: read again, never kept from before.
DERIVED = (HANDED_OVER, GIVEN_UP, "tokens_billed_late")


def step_usages(steps: Iterable[Any]) -> dict[str, StepUsage]:
    """Each parent step's own usage (step id → its calls and tokens, by direction), every
    execution of it included, from the step rows of a run (``snapshot.usage_by_step`` says
    which views of its calls a step keeps, and why the most of them is taken)."""
    kids: dict[str | None, tuple[int, int, int, int, int]] = {}
    parents: list[Any] = []
    for s in steps:
        if s.parent_id is None:
            parents.append(s)
            continue
        calls, tokens_in, tokens_out, late_in, late_out = kids.get(s.parent_id, (0,) * 5)
        more_in, more_out = billed_late(s.output)
        kids[s.parent_id] = (calls + (s.model is not None), tokens_in + (s.tokens_in or 0),
                             tokens_out + (s.tokens_out or 0), late_in + more_in,
                             late_out + more_out)
    return {p.id: step_usage(StepViews.of(kids.get(p.id, (0,) * 5), p.tokens_in, p.tokens_out,
                                          p.output))
            for p in parents}


def usage_totals(steps: Iterable[Any]) -> dict[str, Any]:
    """The run's usage keys of its totals, from every step row of the run."""
    steps = list(steps)
    spent = sum(step_usages(steps).values(), StepUsage())
    return {"tokens_in": spent.tokens_in, "tokens_out": spent.tokens_out,
            "model_calls": spent.calls, "model_tokens": spent.tokens, **batch_calls(steps)}


def with_usage(totals: dict[str, Any] | None, steps: Iterable[Any]) -> dict[str, Any]:
    """``totals`` (a run row's, None for none yet) with its usage keys read again from every
    step row of the run (``usage_totals``); its other keys (``notes_before``, a review item)
    kept."""
    kept = {k: v for k, v in (totals or {}).items() if k not in DERIVED}
    return {**kept, **usage_totals(steps)}


def batch_calls(steps: Sequence[Any]) -> dict[str, Any]:
    """What became of the calls an interrupted attempt left waiting in a provider batch, and
    the tokens billed late; each key only when it is not zero.

    ``model_calls_handed_over``: those a later attempt took over and settled there (answered,
    or failed as its batch ended); ``model_calls_given_up``: those nobody settled (the run was
    stopped for good, or the attempt that resumed it no longer asked them and released their
    batch); ``tokens_billed_late``: (in, out) the provider billed for the run's batches after
    their phases (their usage is in ``tokens_in``/``tokens_out`` and ``model_tokens``)."""
    parents = [s for s in steps if s.parent_id is None]
    taken = sum(_count(s, TAKEN_OVER) for s in parents)
    interrupted = [s for s in parents if s.status == StepStatus.INTERRUPTED.value]
    handed = sum(_count(s, HANDED_OVER) for s in interrupted)
    given = sum(_count(s, GIVEN_UP) for s in interrupted) + max(0, handed - taken)
    late = [billed_late(s.output) for s in steps if s.parent_id is not None]
    late_in, late_out = sum(x[0] for x in late), sum(x[1] for x in late)
    out: dict[str, Any] = {}
    if taken:
        out[HANDED_OVER] = taken
    if given:
        out[GIVEN_UP] = given
    if late_in or late_out:
        out["tokens_billed_late"] = {"tokens_in": late_in, "tokens_out": late_out}
    return out


def _count(step: Any, key: str) -> int:
    value = (step.output or {}).get(key)
    return value if isinstance(value, int) else 0

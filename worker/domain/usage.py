"""Pure: what one phase step spent on the model, from the views its rows keep of the same calls
(R15). Every surface that counts a run's calls or tokens (budget, totals, /metrics, dashboard)
decides through ``step_usage``, so each call is counted once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# In a batch step's output: the tokens the provider billed for its batch that its phase never
# charged (found by a release after the phase, or by the release of a run stopped for good).
BILLED_LATE = "billed_late"


@dataclass(frozen=True)
class StepViews:
    """What a parent step's rows record of its model calls.

    ``kid_*``: its committed child steps that name a model (a subset of its calls: a batch
    submission, or a call of a phase that failed before its write, has none); ``tokens_in`` /
    ``tokens_out``: the parent's columns (every finish adds the step's earlier executions');
    ``calls_started``: ``output.model_calls_started``; ``usage_*``: ``output.usage`` (written by
    every lease beat and every finish, a killed attempt's last beat included; its tokens by
    direction too, except on a step recorded before they were); ``taken_over``:
    ``output.model_calls_taken_over``, the calls an interrupted attempt's step started and
    handed over (their batch) that this step settled: among its calls started and its
    children, never in its ``usage`` (the interrupted step's views count them); ``late_*``:
    the tokens the provider billed for its batches after the step's own views were written
    (its batch children's ``output.billed_late``: a released batch's output found by a later
    release, or the release of a run stopped for good), added to them, never a view of them.
    """

    kid_calls: int = 0
    kid_tokens_in: int = 0
    kid_tokens_out: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    calls_started: int = 0
    usage_calls: int = 0
    usage_tokens: int = 0
    usage_tokens_in: int = 0
    usage_tokens_out: int = 0
    taken_over: int = 0
    late_in: int = 0
    late_out: int = 0

    @classmethod
    def of(cls, kids: tuple[int, ...], tokens_in: int | None, tokens_out: int | None,
           output: dict[str, Any] | None) -> StepViews:
        """From the children's (calls, tokens in, tokens out[, billed late in, out]), the
        parent's token columns and its output."""
        output = output or {}
        usage = output.get("usage") or {}
        return cls(kids[0], kids[1], kids[2], tokens_in or 0, tokens_out or 0,
                   int(output.get("model_calls_started") or 0), int(usage.get("calls") or 0),
                   int(usage.get("tokens") or 0), int(usage.get("tokens_in") or 0),
                   int(usage.get("tokens_out") or 0),
                   int(output.get("model_calls_taken_over") or 0),
                   *(kids[3:5] if len(kids) >= 5 else ()))


@dataclass(frozen=True)
class StepUsage:
    calls: int = 0
    # At least tokens_in + tokens_out: equal unless a beat recorded before the split was kept
    # knew more than the step's other views.
    tokens: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def __add__(self, other: StepUsage) -> StepUsage:
        return StepUsage(self.calls + other.calls, self.tokens + other.tokens,
                         self.tokens_in + other.tokens_in, self.tokens_out + other.tokens_out)


def step_usage(v: StepViews) -> StepUsage:
    """The most of the step's views of the same calls, never their sum (a parent's usage and
    its children's are one spending); separate steps (a killed attempt's, its retry's) add.

    A call handed over by an interrupted step is that step's (the provider got it then, and a
    run stopped for good, or a resumed step that no longer asks it, never settles it), so the
    step that settles it leaves it out of its calls; its tokens, charged when the reply is
    read, are the settling step's (the interrupted one charged none).

    Tokens billed late (``late_*``) were in none of the views: they add, and no call (the
    call was counted when its batch was submitted)."""
    taken = v.taken_over
    tokens_in = max(v.tokens_in, v.kid_tokens_in, v.usage_tokens_in)
    tokens_out = max(v.tokens_out, v.kid_tokens_out, v.usage_tokens_out)
    late = v.late_in + v.late_out
    return StepUsage(
        calls=max(v.kid_calls - taken, v.calls_started - taken, v.usage_calls, 0),
        tokens=max(tokens_in + tokens_out, v.tokens_in + v.tokens_out, v.usage_tokens) + late,
        tokens_in=tokens_in + v.late_in, tokens_out=tokens_out + v.late_out)


def billed_late(output: dict[str, Any] | None) -> tuple[int, int]:
    """A batch step's tokens billed late (``output.billed_late``): (in, out)."""
    late = (output or {}).get(BILLED_LATE)
    if not isinstance(late, dict):
        return 0, 0
    return int(late.get("tokens_in") or 0), int(late.get("tokens_out") or 0)

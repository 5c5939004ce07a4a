"""A run's final status from what its phases recorded (R27): a dream that could not do its work
is never plain ``succeeded``. Pure; ``finalize_run`` gathers the facts."""

from __future__ import annotations

from dataclasses import dataclass, field

from worker.domain.types import RunStatus, StepStatus


@dataclass(frozen=True)
class RunFacts:
    """What finalize read from the run's steps and its scope's earlier runs."""

    phase_statuses: dict[str, str]
    guard_reasons: list[str] = field(default_factory=list)
    # What ran out ("12 of 12 model calls"), when work was left for lack of it.
    budget_exhausted: str | None = None
    open_candidates: int = 0
    # open_candidates of the scope's earlier finished runs, oldest first (dry runs left out).
    open_history: list[int] = field(default_factory=list)
    growth_runs: int = 3
    dry_run: bool = False
    # Model calls the run started and how many of them got no reply (the endpoint was down,
    # timed out, or answered something that is no chat completion), and the first such error.
    model_calls: int = 0
    model_calls_failed: int = 0
    model_failure: str | None = None


@dataclass(frozen=True)
class RunOutcome:
    status: str
    reason: str | None  # one line: ids, counts, phase names; never note text
    flags: list[str]  # guard | budget | model_unavailable | open_growing | phase_failed


def open_growing(facts: RunFacts) -> list[int] | None:
    """The last ``growth_runs`` counts if they rose at every run, else None. A store nobody
    judges (no model, no host fusing) shows up here: the same open items come back, plus more."""
    if facts.dry_run:
        return None
    series = [*facts.open_history[-(facts.growth_runs - 1):], facts.open_candidates]
    if len(series) < facts.growth_runs:
        return None
    rising = all(a < b for a, b in zip(series, series[1:], strict=False))
    return series if rising else None


def model_unavailable(facts: RunFacts) -> bool:
    """Every model call of the run failed, and it made at least one: nothing the model was to
    judge was judged. A run with some replies did part of its work and is not blocked for it
    (each unanswered item is deferred on its step); a run that asked nothing is not either."""
    return facts.model_calls > 0 and facts.model_calls_failed >= facts.model_calls


def decide_outcome(facts: RunFacts) -> RunOutcome:
    """failed if every phase failed; blocked if the guard stopped it, the budget ran out with
    work left, every model call failed, or its open candidates keep growing; partial if some phase failed; else
    succeeded. Each reason is kept, so a blocked run with a failed phase says both."""
    statuses = facts.phase_statuses
    failed = [p for p, s in statuses.items() if s == StepStatus.FAILED.value]
    if not statuses or len(failed) == len(statuses):
        return RunOutcome(RunStatus.FAILED.value, None, ["phase_failed"] if failed else [])
    flags: list[str] = []
    reasons: list[str] = []
    if facts.guard_reasons:
        flags.append("guard")
        more = len(facts.guard_reasons) - 1
        reasons.append(facts.guard_reasons[0] + (f" (and {more} more trips)" if more else ""))
    if facts.budget_exhausted:
        flags.append("budget")
        reasons.append(f"model budget exhausted ({facts.budget_exhausted}): the rest waits for "
                       "the next run or a larger budget")
    if model_unavailable(facts):
        flags.append("model_unavailable")
        cause = f" ({facts.model_failure})" if facts.model_failure else ""
        reasons.append(f"model unavailable: {facts.model_calls_failed} of {facts.model_calls} "
                       f"model calls failed{cause}; check DREAM_LLM_BASE_URL and the endpoint, "
                       "the deferred work waits for the next run")
    series = open_growing(facts)
    if series is not None:
        flags.append("open_growing")
        reasons.append(f"open candidates grew {len(series)} runs in a row "
                       f"({' → '.join(map(str, series))}): nothing judges them; configure a model "
                       "(DREAM_LLM_PROVIDER) or fuse them with `dream candidates` / `dream fuse`")
    blocked = bool(flags)
    if failed:
        flags.append("phase_failed")
        reasons.append(f"phase failed: {', '.join(failed)}")
    if blocked:
        return RunOutcome(RunStatus.BLOCKED.value, "; ".join(reasons), flags)
    if failed:
        return RunOutcome(RunStatus.PARTIAL.value, "; ".join(reasons), flags)
    return RunOutcome(RunStatus.SUCCEEDED.value, None, [])

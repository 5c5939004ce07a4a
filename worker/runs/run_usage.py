"""A run's model usage as its totals report it: its calls and tokens (every attempt's, each call
once: ``snapshot.step_usages``), what became of the batch calls an interrupted attempt left
waiting, and what the provider billed for its batches after their phases. ``finalize`` writes
it when the run ends; ``charge_late`` again when a release finds more billed after that, so
the run that sent a batch is charged what its provider billed for it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import structlog

from worker.domain.types import StepStatus
from worker.domain.usage import StepUsage, billed_late
from worker.runs.snapshot import step_usages
from worker.store.uow import UnitOfWork

log = structlog.get_logger(__name__)

# In an interrupted step's output: the calls still waiting in its batch when it was
# interrupted, handed over to the attempt that resumes the run, or given up with the run
# stopped for good (``run_stops``); in the step that settled handed-over calls: those
# (``model_calls_taken_over``).
HANDED_OVER = "model_calls_handed_over"
GIVEN_UP = "model_calls_given_up"
TAKEN_OVER = "model_calls_taken_over"
# The totals ``batch_calls`` writes only when not zero: read again, never kept from before.
_DERIVED = (HANDED_OVER, GIVEN_UP, "tokens_billed_late")


def usage_totals(steps: Iterable[Any]) -> dict[str, Any]:
    """The run's usage keys of its totals, from every step row of the run."""
    steps = list(steps)
    spent = sum(step_usages(steps).values(), StepUsage())
    return {"tokens_in": spent.tokens_in, "tokens_out": spent.tokens_out,
            "model_calls": spent.calls, "model_tokens": spent.tokens, **batch_calls(steps)}


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


def charge_late(uow: UnitOfWork, run_ids: Iterable[str]) -> None:
    """Each finished run of ``run_ids`` with its usage totals read again from its steps (in
    ``uow``'s transaction, not committed): the tokens its batches' releases found billed
    since it ended are charged to it, each once (a step's ``billed_late`` is what its batch
    billed beyond what its phase charged, not a sum of what each release read). A run not
    finished yet takes them in its own totals when it ends."""
    for run_id in sorted(set(run_ids)):
        run = uow.runs.get(run_id)
        if run is None or run.finished_at is None:
            continue
        before = dict(run.totals or {})
        totals = {k: v for k, v in before.items() if k not in _DERIVED}
        totals.update(usage_totals(uow.runs.steps(run_id)))
        if totals != before:
            uow.batches.set_run_totals(run_id, totals)
            log.info("run.usage_updated", run_id=run_id, tokens_in=totals["tokens_in"],
                     tokens_out=totals["tokens_out"],
                     billed_late=totals.get("tokens_billed_late"))

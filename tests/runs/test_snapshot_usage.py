"""A run's recorded model usage, which a fresh worker process or a retried attempt starts its
budget from (R15)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.runs import service
from worker.runs.snapshot import Usage, usage_by_step, usage_of
from worker.runs.steps import ChildStep, StepRecorder
from worker.store.models import RunStepRow


def test_run_usage_counts_model_children_and_parent_tokens(app: App) -> None:
    """A finished phase: calls = child steps that name a model (or what the phase recorded it
    started, if more); tokens = the parent step's totals. A phase a killed attempt left running:
    its committed children's calls and tokens, or its last heartbeat's, whichever is more."""
    add_notes(app, {"content": "a note"})
    scope = Scope("agent-1")
    run_id = service.create_run(app, scope, force=True)
    assert run_id
    steps = StepRecorder(app, run_id, scope)
    parent = steps.start_phase("consolidate")
    killed = steps.start_phase("contradictions")
    beaten = steps.start_phase("prune")
    with app.uow() as uow:
        steps.child(uow, parent, "consolidate", ChildStep(name="c1", status="succeeded",
                                                          model="m", tokens_in=70, tokens_out=5))
        steps.child(uow, parent, "consolidate", ChildStep(name="c2", status="succeeded",
                                                          model="m", tokens_in=30, tokens_out=5))
        steps.child(uow, parent, "consolidate", ChildStep(name="open", status="skipped"))
        steps.child(uow, killed, "contradictions", ChildStep(name="t1", status="succeeded",
                                                             model="m", tokens_in=40,
                                                             tokens_out=2))
        uow.runs.update_step(beaten, output={"usage": {"calls": 3, "tokens": 900}})
        uow.commit()
    steps.finish_phase(parent, status="succeeded", output={}, started=0.0,
                       tokens_in=100, tokens_out=10)
    with app.uow() as uow:
        assert usage_of(uow.runs.steps(run_id)) == Usage(calls=2 + 1 + 3,
                                                         tokens=110 + 42 + 900)


def _step(step_id: str, status: str = "running", output: dict[str, Any] | None = None,
          tokens: tuple[int, int] = (0, 0), model: str | None = None,
          parent: str | None = None) -> RunStepRow:
    return RunStepRow(id=step_id, parent_id=parent, status=status, output=output,
                      tokens_in=tokens[0], tokens_out=tokens[1], model=model)


def _child(parent: str, n: int, tokens: int) -> RunStepRow:
    return _step(f"{parent}/{n}", "succeeded", tokens=(tokens, 0), model="m", parent=parent)


# What one parent step spent. The decision: what a step records of its calls (its beats' and
# finishes' ``output.usage``, ``model_calls_started`` and tokens, its children) are views of the
# same calls, so the most of them is taken, never their sum; a step resumed after waiting adds
# its executions up where they are recorded (each finish and beat counts from a base that leaves
# the earlier executions in), and separate steps (a killed attempt's, its retry's) add up.
USAGE_BY_STEP = [
    # killed mid-phase: its last beat saw 3 calls, 2 of which had committed children: 3, not 5
    ([_step("p", output={"usage": {"calls": 3, "tokens": 900}}), _child("p", 1, 40),
      _child("p", 2, 2)], Usage(3, 900)),
    # killed after a child committed and before the next beat: the children know more
    ([_step("p", output={"usage": {"calls": 1, "tokens": 10}}), _child("p", 1, 40),
      _child("p", 2, 2)], Usage(2, 42)),
    # left waiting on a batch: the 2 submitted calls its finish recorded (no reply, no tokens)
    ([_step("p", output={"waiting": "b-1", "model_calls_started": 2, "model_calls_failed": 2,
                         "usage": {"calls": 2, "tokens": 0}})], Usage(2, 0)),
    # finished after three executions: its finish's sums (the beat's usage is the same calls)
    ([_step("p", "succeeded", {"model_calls_started": 3, "usage": {"calls": 3, "tokens": 130}},
            tokens=(110, 20)), _child("p", 1, 50)], Usage(3, 130)),
    # a finish from before ``output.usage``: its started count and its tokens
    ([_step("p", "succeeded", {"model_calls_started": 2}, tokens=(100, 10))], Usage(2, 110)),
    # failed after 2 calls: only its usage says so (a failed finish reports no tokens)
    ([_step("p", "failed", {"usage": {"calls": 2, "tokens": 40}})], Usage(2, 40)),
]


@pytest.mark.parametrize(("steps", "expected"), USAGE_BY_STEP)
def test_usage_by_step_takes_the_most_of_one_steps_views(steps: list[RunStepRow],
                                                          expected: Usage) -> None:
    """One parent step's usage is the largest of its views of the same calls (table above)."""
    assert usage_by_step(steps) == {"p": expected}


def test_usage_of_adds_separate_steps_of_a_phase() -> None:
    """A killed attempt's step (3 calls beaten) and its retry's (2 calls finished) are separate
    calls: the run spent 5 (the retry's budget started from the 3)."""
    steps = [_step("killed", output={"usage": {"calls": 3, "tokens": 300}}),
             _step("retry", "succeeded", {"usage": {"calls": 2, "tokens": 20}}, tokens=(15, 5))]
    assert usage_of(steps) == Usage(5, 320)

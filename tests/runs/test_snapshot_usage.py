"""A run's recorded model usage, which a fresh worker process or a retried attempt starts its
budget from (R15)."""

from __future__ import annotations

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.runs import service
from worker.runs.snapshot import Usage, usage_of
from worker.runs.steps import ChildStep, StepRecorder


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

"""A run's recorded model usage, which a fresh worker process starts its budget from (R15)."""

from __future__ import annotations

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.runs import service
from worker.runs.steps import ChildStep, StepRecorder


def test_run_usage_counts_model_children_and_parent_tokens(app: App) -> None:
    """Calls = child steps that name a model; tokens = the finished parent steps' totals."""
    add_notes(app, {"content": "a note"})
    scope = Scope("agent-1")
    run_id = service.create_run(app, scope, force=True)
    assert run_id
    steps = StepRecorder(app, run_id, scope)
    parent = steps.start_phase("consolidate")
    with app.uow() as uow:
        steps.child(uow, parent, "consolidate", ChildStep(name="c1", status="succeeded",
                                                          model="m", tokens_in=70, tokens_out=5))
        steps.child(uow, parent, "consolidate", ChildStep(name="c2", status="succeeded",
                                                          model="m", tokens_in=30, tokens_out=5))
        steps.child(uow, parent, "consolidate", ChildStep(name="open", status="skipped"))
        uow.commit()
    steps.finish_phase(parent, status="succeeded", output={}, started=0.0,
                       tokens_in=100, tokens_out=10)
    with app.uow() as uow:
        assert uow.runs.run_usage(run_id) == (2, 110)

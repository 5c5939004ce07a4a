"""A phase step's recorded model usage over its executions, on SQLite and PostgreSQL: a phase
left waiting on a provider batch and resumed (under Celery, one task per execution; in-process,
by the same executor) records the sum of its executions' calls and tokens, a failed phase the
calls it made before failing, so the run's budget counts every call exactly once (R15)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import app_on
from tests.support.factories import add_notes
from worker.app import App
from worker.cli import main
from worker.config import BudgetSettings
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.runs import engine, service
from worker.runs.context import PhaseContext, PhaseFn, Registry
from worker.runs.outcome import PhaseOutcome
from worker.runs.snapshot import Usage, usage_of
from worker.store.models import RunStepRow
from worker.store.repositories.dashboard import DashboardQueries

SCOPE = Scope("agent-1")


def _quiet(phase: str) -> PhaseFn:
    return lambda ctx, step_id: PhaseReport(phase, StepStatus.NO_ITEMS.value)


QUIET: Registry = {p: _quiet(p) for p in PHASES}
Execution = Callable[[PhaseContext], PhaseReport]


def _calls(ctx: PhaseContext, wanted: int, tokens_each: int | None) -> int:
    """Up to ``wanted`` model calls on the run's budget, as the fan-out makes them: reserved
    before, charged on the reply (None: no reply yet, a batch still pending)."""
    made = 0
    for _ in range(wanted):
        if not ctx.budget.try_reserve_call():
            break
        made += 1
        if tokens_each is not None:
            ctx.budget.charge(tokens_each)
    return made


def _waiting(made: int = 0) -> PhaseReport:
    return PhaseReport("consolidate", PhaseOutcome.WAITING.value,
                       {"retry_after": 0.01, "made": made}, reason="waiting on batch b-1")


def _phase(executions: list[Execution]) -> Callable[[PhaseContext, str], PhaseReport]:
    """A consolidate phase whose n-th execution is ``executions[n]``."""
    left = iter(executions)
    return lambda ctx, step_id: next(left)(ctx)


def _parent(app: App, run_id: str, phase: str = "consolidate") -> RunStepRow:
    with app.uow() as uow:
        [step] = [s for s in uow.runs.steps(run_id) if s.parent_id is None and s.phase == phase]
    return step


def _usage(app: App, run_id: str) -> Usage:
    with app.uow() as uow:
        return usage_of(uow.runs.steps(run_id))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def capped_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    """An app whose runs may make 3 model calls, on SQLite and on PostgreSQL."""
    budget = BudgetSettings(max_calls_per_run=3)
    with app_on(request.param, tmp_path, budget=budget) as app:
        yield app


def test_a_rescheduled_waiting_phase_keeps_its_submissions_calls(app: App) -> None:
    """Under Celery: the batch's 2 calls, submitted by the first execution, stay on the step
    through a second execution that finds the batch still pending (the old finish replaced the
    step's output with that execution's calls, none, and the run forgot the submission), and the
    last execution's finish records the sum of the three: calls 2 + 1, tokens 2*50 + 30, the
    reply tokens the executions reported added up, no call counted as failed."""
    add_notes(app, {"content": "a note"})

    def answered(ctx: PhaseContext) -> PhaseReport:
        ctx.budget.charge(40, 10)  # the batch's two replies, charged as they are read
        ctx.budget.charge(40, 10)
        _calls(ctx, 1, 30)  # and one online follow-up
        return PhaseReport("consolidate", StepStatus.SUCCEEDED.value, {"merged": 1},
                           tokens_in=110, tokens_out=20)

    phase = _phase([lambda ctx: _waiting(_calls(ctx, 2, None)), lambda ctx: _waiting(),
                    answered])
    registry = {**QUIET, "consolidate": phase}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    assert engine.execute_phase(app, run_id, "consolidate", registry).outcome \
        is PhaseOutcome.WAITING
    assert _usage(app, run_id) == Usage(calls=2, tokens=0)
    assert engine.execute_phase(app, run_id, "consolidate", registry).outcome \
        is PhaseOutcome.WAITING
    assert _usage(app, run_id) == Usage(calls=2, tokens=0)
    assert engine.execute_phase(app, run_id, "consolidate", registry).outcome \
        is PhaseOutcome.SUCCEEDED
    step = _parent(app, run_id)
    assert (step.tokens_in, step.tokens_out) == (110, 20)
    output = step.output or {}
    assert (output["model_calls_started"], output["model_calls_failed"]) == (3, 0)
    assert output["usage"] == {"calls": 3, "tokens": 130, "tokens_in": 110, "tokens_out": 20}
    assert _usage(app, run_id) == Usage(calls=3, tokens=130)


def test_r15_a_resumed_batch_phase_stays_within_the_runs_call_cap(capped_app: App) -> None:
    """A run capped at 3 calls: the first execution submits 2, the resumed one asks for 2 more
    and gets 1, so the run records 3 calls (the resumed task's budget started from the
    step's recorded usage; before, from 0 once a pending execution's finish had dropped it)."""
    app = capped_app
    add_notes(app, {"content": "a note"})
    got: list[int] = []

    def more(ctx: PhaseContext) -> PhaseReport:
        got.append(_calls(ctx, 2, 10))
        return PhaseReport("consolidate", StepStatus.SUCCEEDED.value)

    phase = _phase([lambda ctx: _waiting(_calls(ctx, 2, None)), lambda ctx: _waiting(), more])
    registry = {**QUIET, "consolidate": phase}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    for _ in range(3):
        engine.execute_phase(app, run_id, "consolidate", registry)
    assert got == [1]
    assert _usage(app, run_id).calls == 3


def test_an_in_process_resumed_phase_records_the_sum_of_its_executions(app: App) -> None:
    """In-process, the executor resumes the waiting step itself: its finish adds every
    execution's calls and charged tokens (2 + 1 calls, tokens in 10 + 5 + 7, the last the
    batch's reply read by the last execution), so the run's totals say what the phase spent,
    not what its last execution did."""
    add_notes(app, {"content": "a note"})

    def done(ctx: PhaseContext) -> PhaseReport:
        ctx.budget.charge(7)
        return PhaseReport("consolidate", StepStatus.SUCCEEDED.value, tokens_in=7)

    def pending(calls: int, tokens_each: int) -> Execution:
        def run(ctx: PhaseContext) -> PhaseReport:
            _calls(ctx, calls, tokens_each)
            report = _waiting()
            report.tokens_in = calls * tokens_each
            return report
        return run

    registry = {**QUIET, "consolidate": _phase([pending(2, 5), pending(1, 5), done])}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    assert engine.execute_run(app, run_id, registry) == RunStatus.SUCCEEDED.value
    step = _parent(app, run_id)
    assert step.tokens_in == 10 + 5 + 7
    assert (step.output or {})["model_calls_started"] == 3
    assert _usage(app, run_id) == Usage(calls=3, tokens=22)


def test_a_failed_phase_keeps_the_calls_it_made(app: App) -> None:
    """A phase that made 2 calls (40 tokens) and then raised: its failed step records them, so
    the next phase task's budget, which starts from the steps, still counts them (the failed
    finish recorded no usage at all)."""
    add_notes(app, {"content": "a note"})

    def failing(ctx: PhaseContext, step_id: str) -> PhaseReport:
        _calls(ctx, 2, 20)
        raise RuntimeError("the phase broke after its calls")

    registry: dict[str, Any] = {**QUIET, "consolidate": failing}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    assert engine.execute_phase(app, run_id, "consolidate", registry).outcome \
        is PhaseOutcome.FAILED
    assert _parent(app, run_id).status == StepStatus.FAILED.value
    assert _usage(app, run_id) == Usage(calls=2, tokens=40)


def test_a_phases_step_tokens_are_its_budgets_not_its_report(app: App) -> None:
    """A phase that charged its budget 2 calls of 90 in / 10 out, whose report says 5 in / 1
    out (it under-reports): its parent step's token columns, the run's totals, /metrics'
    per-phase figures, the dashboard's and `dream runs show` all say 180 in / 20 out, one
    count of the same calls (before: the step's columns were the report's 5/1, and so were the
    totals' in and out, which then fell 194 short of the run's 200 model tokens)."""
    add_notes(app, {"content": "a note"})

    def under_reporting(ctx: PhaseContext, step_id: str) -> PhaseReport:
        for _ in range(2):
            assert ctx.budget.try_reserve_call()
            ctx.budget.charge(90, 10)
        return PhaseReport("consolidate", StepStatus.SUCCEEDED.value, tokens_in=5,
                           tokens_out=1, calls=2)

    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    assert engine.execute_run(app, run_id, {**QUIET, "consolidate": under_reporting}) \
        == RunStatus.SUCCEEDED.value
    step = _parent(app, run_id)
    assert (step.tokens_in, step.tokens_out) == (180, 20)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        totals = run.totals or {}
        metrics = uow.run_history.step_usage(SCOPE)["consolidate"]
        (dashboard,) = [f for f in DashboardQueries(uow.session).phase_figures([run_id])
                        if f["phase"] == "consolidate"]
    assert (totals["tokens_in"], totals["tokens_out"], totals["model_tokens"]) == (180, 20, 200)
    assert (metrics["tokens_in"], metrics["tokens_out"]) == (180, 20)
    assert (dashboard["tokens_in"], dashboard["tokens_out"]) == (180, 20)
    shown = CliRunner().invoke(main, ["runs", "show", run_id], env={
        "DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING"})
    assert shown.exit_code == 0, shown.output
    (line,) = [x for x in shown.output.splitlines() if x.strip().startswith("consolidate")]
    assert "tokens 180/20" in line, line

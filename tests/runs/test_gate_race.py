"""A scope's run that ends between the gate's reading and the insert of the next run: the gate
is asked again in the inserting transaction, so no second dream follows at once (a gate check,
an unforced `dream run`/API/MCP start, `dream run --due`). SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from tests.support.factories import add_sessions
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.runs import scheduling, service
from worker.runs.context import Registry
from worker.runs.decide import GateClosed, decide_scopes
from worker.runs.due import execute_due, find_due
from worker.runs.gate import GateDecision, GateRule
from worker.runs.start import NotDue, RunRequest, Via, start_run

SCOPE = Scope("racing-bot", "alice")
WORKING: Registry = {p: (lambda name: lambda ctx, step_id: PhaseReport(
    phase=name, status=StepStatus.NO_ITEMS.value))(p) for p in PHASES}


def _held_by_a_run(app: App) -> str:
    """The scope due (five sessions, never dreamed) and held by a queued run not yet executed."""
    add_sessions(app, 5, agent_id=SCOPE.agent_id, user_id=SCOPE.user_id,
                 start=utcnow() - timedelta(hours=1))
    run_id = service.create_run(app, SCOPE, trigger="beat")
    assert run_id is not None
    return run_id


def _finishing_after(read: Callable[..., Any], app: App, run_id: str) -> Callable[..., Any]:
    """``read`` (the gate's reading), after which the run holding the scope dreams and ends:
    what a worker finishing it between that reading and the insert does."""
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        decided = read(*args, **kwargs)
        assert service.execute_run(app, run_id, WORKING) == RunStatus.SUCCEEDED.value
        return decided
    return wrapped


def _runs(app: App) -> list[str]:
    with app.uow() as uow:
        return [r.status for r in uow.runs.list(SCOPE, limit=10)]


def test_gate_check_creates_no_second_run_when_the_first_ends_meanwhile(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _held_by_a_run(app)
    monkeypatch.setattr(scheduling, "decide_scopes",
                        _finishing_after(decide_scopes, app, first))
    result = service.gate_check(app)
    assert result.created == []
    assert result.decisions[SCOPE.key].rule is GateRule.TOO_LITTLE_ACTIVITY
    assert _runs(app) == [RunStatus.SUCCEEDED.value]


@pytest.mark.parametrize("via", [Via.HERE, Via.THREAD])
def test_an_unforced_start_is_refused_when_the_held_run_dreams_meanwhile(
        app: App, monkeypatch: pytest.MonkeyPatch, via: Via) -> None:
    first = _held_by_a_run(app)
    gate: Callable[..., GateDecision] = service.scope_gate
    monkeypatch.setattr(service, "scope_gate", _finishing_after(gate, app, first))
    with pytest.raises(NotDue, match="not due for .*0 of 5 sessions.*--force"):
        start_run(app, RunRequest(SCOPE, trigger="cli"), via)
    assert _runs(app) == [RunStatus.SUCCEEDED.value]


def test_create_run_with_gate_at_writes_nothing_once_no_longer_due(app: App) -> None:
    first = _held_by_a_run(app)
    assert service.execute_run(app, first, WORKING) == RunStatus.SUCCEEDED.value
    with pytest.raises(GateClosed):
        service.create_run(app, SCOPE, trigger="api", gated=True)
    assert _runs(app) == [RunStatus.SUCCEEDED.value]


def test_run_due_creates_no_second_run_when_the_held_one_dreams_meanwhile(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _held_by_a_run(app)
    with app.uow() as uow:  # held by another executor: not among the waiting runs
        uow.runs.set_status(first, RunStatus.RUNNING.value)
        uow.commit()
    work = find_due(app, None)
    assert work.check.due == [SCOPE] and work.waiting == []
    with app.uow() as uow:  # the holder, handed back, is the run that ends meanwhile
        uow.runs.set_status(first, RunStatus.QUEUED.value)
        uow.runs.set_status(first, RunStatus.QUEUED.value)
        uow.commit()
    gate: Callable[..., GateDecision] = service.scope_gate
    monkeypatch.setattr(service, "scope_gate", _finishing_after(gate, app, first))
    assert list(execute_due(app, work, None)) == []
    assert _runs(app) == [RunStatus.SUCCEEDED.value]

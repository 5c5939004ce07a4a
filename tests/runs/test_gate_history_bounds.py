"""What the gate counts from a scope's run history: a run asked for some phases only is no
dream and ends no failure streak (as it starts no new 24 h); a past `--now` (`dream gate
--explain`, `dream run --dry-run`) counts no run begun after it. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from tests.runs.test_gate_backoff import BROKEN, WORKING
from tests.support.factories import add_sessions
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import RunStatus, Scope
from worker.runs import service
from worker.runs.gate import GateRule

SCOPE = Scope("history-bot", "bob")


def _sessions(app: App) -> None:
    add_sessions(app, 5, agent_id=SCOPE.agent_id, user_id=SCOPE.user_id,
                 start=utcnow() - timedelta(days=3))


def _run(app: App, registry: object, **options: object) -> str:
    run_id = service.create_run(app, SCOPE, **options)  # type: ignore[arg-type]
    assert run_id is not None
    return service.execute_run(app, run_id, registry)  # type: ignore[arg-type]


def test_a_run_of_some_phases_only_ends_no_failure_streak(app: App) -> None:
    _sessions(app)
    for _ in range(3):
        assert _run(app, BROKEN) == RunStatus.FAILED.value
    assert _run(app, WORKING, phases=["prune"]) == RunStatus.SUCCEEDED.value
    with app.uow() as uow:
        assert [n for n, _ in uow.run_history.failure_streaks([SCOPE.key]).values()] == [3]
    assert service.scope_gate(app, SCOPE).rule is GateRule.BACKING_OFF
    # A forced one still does, whatever it asked for.
    assert _run(app, WORKING, phases=["prune"], force=True) == RunStatus.SUCCEEDED.value
    with app.uow() as uow:
        assert uow.run_history.failure_streaks([SCOPE.key]) == {}


def test_a_past_now_counts_no_dream_begun_after_it(app: App) -> None:
    _sessions(app)
    before = utcnow() - timedelta(hours=1)
    assert _run(app, WORKING) == RunStatus.SUCCEEDED.value
    assert service.scope_gate(app, SCOPE).rule is GateRule.TOO_LITTLE_ACTIVITY
    then = service.explain_scopes(app, now=before, scopes=[SCOPE])[SCOPE]
    assert then.rule is GateRule.DUE and "first dream" in then.reason
    assert service.scope_gate(app, SCOPE, now=before).rule is GateRule.DUE


def test_a_past_now_counts_no_failure_begun_after_it(app: App) -> None:
    _sessions(app)
    before = utcnow() - timedelta(hours=1)
    for _ in range(2):
        assert _run(app, BROKEN) == RunStatus.FAILED.value
    assert service.scope_gate(app, SCOPE).rule is GateRule.BACKING_OFF
    assert service.scope_gate(app, SCOPE, now=before).rule is GateRule.DUE

"""The gate's back-off against a real store (SQLite and PostgreSQL): a scope whose runs keep
failing waits longer after each failure instead of being retried at every beat; a dream or a
forced run ends the streak; `dream gate --explain` and MCP's `dream_status` say so."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from tests.support.factories import add_sessions
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.runs import service
from worker.runs.context import Registry
from worker.runs.gate import GateRule
from worker.runs.start import NotDue, RunRequest, Via, start_run

SCOPE = Scope("flaky-bot")
BEAT = timedelta(seconds=900)  # DREAM_BEAT_INTERVAL_SECONDS, the first wait


def _failing(name: str) -> Any:
    def phase(ctx: object, step_id: str) -> PhaseReport:
        raise RuntimeError(f"{name}: the store refused the write")
    return phase


def _quiet(name: str) -> Any:
    return lambda ctx, step_id: PhaseReport(phase=name, status=StepStatus.NO_ITEMS.value)


BROKEN: Registry = {p: _failing(p) for p in PHASES}  # every phase fails: the run fails
WORKING: Registry = {p: _quiet(p) for p in PHASES}


def _fail_once(app: App, *, force: bool = False) -> datetime:
    """One run of the scope that ends failed; when it ended."""
    run_id = service.create_run(app, SCOPE, force=force)
    assert run_id is not None
    assert service.execute_run(app, run_id, BROKEN) == RunStatus.FAILED.value
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.finished_at is not None
        return run.finished_at


@pytest.fixture
def due(app: App) -> App:
    add_sessions(app, 5, agent_id=SCOPE.agent_id, start=utcnow() - timedelta(hours=1))
    return app


def test_a_failing_scope_waits_longer_after_each_failure(due: App) -> None:
    """A due scope's failed run holds the next beat's check for one beat interval, a second
    failure in a row for two, and the gate check creates no run meanwhile; once the wait is
    over the check hands the scope out again."""
    app = due
    ended = _fail_once(app)
    soon = service.gate_check(app, now=ended + BEAT - timedelta(seconds=1))
    decision = soon.decisions[SCOPE.key]
    assert (decision.rule, decision.failures, decision.retry_at) == (
        GateRule.BACKING_OFF, 1, ended + BEAT)
    assert soon.created == [] and "backing off after 1 failed run in a row" in decision.reason
    retried = service.gate_check(app, now=ended + BEAT)
    assert len(retried.created) == 1
    assert service.execute_run(app, retried.created[0], BROKEN) == RunStatus.FAILED.value
    with app.uow() as uow:
        (failures, second), = uow.run_history.failure_streaks([SCOPE.key]).values()
    assert failures == 2
    assert service.gate_check(app, now=second + 2 * BEAT - timedelta(seconds=1)).created == []
    assert service.scope_gate(app, SCOPE, now=second + 2 * BEAT).due


def test_a_dream_or_a_forced_run_ends_the_streak(due: App) -> None:
    """After two failures an unforced `dream run` is refused with the back-off's reason and the
    way out; a forced run resets the streak whatever it ends as (here: failed again), and so
    does a run that dreams."""
    app = due
    _fail_once(app)
    ended = _fail_once(app)
    with pytest.raises(NotDue) as refused:
        start_run(app, RunRequest(SCOPE, trigger="cli", clock=ended), Via.HERE)
    assert "backing off after 2 failed runs in a row" in str(refused.value)
    assert str(refused.value).endswith("use --force to run anyway")
    forced = _fail_once(app, force=True)
    with app.uow() as uow:
        assert uow.run_history.failure_streaks([SCOPE.key]) == {}
    assert service.scope_gate(app, SCOPE, now=forced).rule is GateRule.DUE
    _fail_once(app)
    run_id = service.create_run(app, SCOPE)
    assert run_id is not None
    assert service.execute_run(app, run_id, WORKING) == RunStatus.SUCCEEDED.value
    with app.uow() as uow:
        assert uow.run_history.failure_streaks([SCOPE.key]) == {}


def test_an_undone_failed_run_still_failed(due: App) -> None:
    """An undone run counted as the scope's last dream whatever it had ended as: undoing a
    failed run ended the streak it was part of (the scope was handed out at the next beat) and
    spent the sessions. It failed all the same (``totals.undone_from``): counted, no reset."""
    from worker.safety.undo import undo_run

    app = due
    _fail_once(app)
    run_id = service.create_run(app, SCOPE)
    assert run_id is not None
    assert service.execute_run(app, run_id, BROKEN) == RunStatus.FAILED.value
    undo_run(app, run_id)
    with app.uow() as uow:
        (failures, ended), = uow.run_history.failure_streaks([SCOPE.key]).values()
    assert failures == 2
    decision = service.scope_gate(app, SCOPE, now=ended + BEAT)
    assert (decision.rule, decision.failures) == (GateRule.BACKING_OFF, 2)
    assert service.scope_gate(app, SCOPE, now=ended + 2 * BEAT).rule is GateRule.DUE


def test_only_runs_that_ran_and_failed_count(due: App) -> None:
    """Cancelled runs, dry runs and runs failed before any worker claimed them (a broker that
    was down) say nothing about the scope: none counts, none resets; the claimed failures
    around them still make a streak of two."""
    app = due
    _fail_once(app)
    cancelled = service.create_run(app, SCOPE)
    assert cancelled is not None
    service.cancel_run(app, cancelled)
    unsent = service.create_run(app, SCOPE)
    assert unsent is not None
    service.abandon_run(app, unsent, "could not enqueue: OperationalError")
    dry = service.create_run(app, SCOPE, dry_run=True)
    assert dry is not None and service.execute_run(app, dry, BROKEN) == RunStatus.FAILED.value
    ended = _fail_once(app)
    with app.uow() as uow:
        assert uow.run_history.failure_streaks([SCOPE.key, Scope("other").key]) == {
            SCOPE.key: (2, ended)}


def test_the_explanation_and_the_log_name_the_back_off(due: App) -> None:
    """`dream gate --explain --json` and MCP's `dream_status` give the rule, the failures and
    the next try; `dream gate` counts the scope as backing off; the check logs
    `gate.backing_off` with counts only."""
    from worker.mcp.tools import ScopedTools

    app = due
    ended = _fail_once(app)
    at = ended + timedelta(minutes=1)
    env = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING",
           "DREAM_BROKER_URL": None, "DREAM_LLM_PROVIDER": "none"}
    shown = CliRunner().invoke(main, ["gate", "--explain", "--json", "--now", at.isoformat()],
                               env=env)
    assert shown.exit_code == 0, shown.output
    (scope,) = json.loads(shown.output)["scopes"]
    assert (scope["rule"], scope["due"], scope["failures"]) == ("backing_off", False, 1)
    assert scope["retry_at"] == (ended + BEAT).isoformat()
    status = ScopedTools(app, SCOPE).dream_status()["gate"]
    assert status["rule"] == "backing_off" and status["failures"] == 1
    gated = CliRunner().invoke(main, ["gate", "--now", at.isoformat()], env=env)
    assert gated.exit_code == 0, gated.output
    assert gated.stdout.startswith("created 0 runs, 1 scope not due (1 backing off after "
                                   "failed runs), 0 interrupted runs")
    with capture_logs() as logs:
        service.gate_check(app, now=at)
    (event,) = [e for e in logs if e["event"] == "gate.backing_off"]
    assert event == {"event": "gate.backing_off", "scopes": 1, "most_failures": 1,
                     "log_level": "warning"}


def test_the_back_off_can_be_turned_off(due: App) -> None:
    """DREAM_FAILURE_BACKOFF_MAX_SECONDS=0: a failing scope is due at the next check, as it
    was before the back-off existed (and the streak is not even read)."""
    app = due
    app.settings.failure_backoff_max_seconds = 0
    ended = _fail_once(app)
    assert len(service.gate_check(app, now=ended + timedelta(seconds=1)).created) == 1


def test_metrics_name_the_failing_scopes_until_a_dream_ends_the_streak(due: App) -> None:
    """/metrics counts the scopes whose runs failed in a row and names each with its streak,
    counted as the gate's back-off counts it (a forced run starts it afresh, and does not count
    itself); a scoped token sees its own scope alone; a run that succeeds clears both."""
    from worker.api.metrics import collect, render

    app = due
    _fail_once(app)
    _fail_once(app, force=True)
    assert "dream_scopes_failing 0\n" in render(collect(app, None))
    _fail_once(app)
    _fail_once(app)
    text = render(collect(app, None))
    assert "dream_scopes_failing 1\n" in text
    label = SCOPE.key.replace('"', '\\"')  # the scope key is JSON: its quotes escaped
    assert f'dream_failed_runs_in_a_row{{scope="{label}"}} 2\n' in text
    other = render(collect(app, Scope("other")))
    assert "dream_scopes_failing 0\n" in other and "dream_failed_runs_in_a_row{" not in other
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    assert service.execute_run(app, run_id, WORKING) == RunStatus.SUCCEEDED.value
    assert "dream_scopes_failing 0\n" in render(collect(app, None))


def test_an_erased_users_failed_runs_leave_the_gauge(app: App) -> None:
    """The runs kept of an erased user move to a placeholder scope that no run will ever reset:
    their streak is not reported (before: named in /metrics forever)."""
    from worker.api.metrics import collect, render
    from worker.safety.erase import erase

    gone = Scope("flaky-bot", "u-gone")
    run_id = service.create_run(app, gone, force=True)
    assert run_id is not None
    assert service.execute_run(app, run_id, BROKEN) == RunStatus.FAILED.value
    run_id = service.create_run(app, gone)  # unforced: counted in the streak
    assert run_id is not None
    assert service.execute_run(app, run_id, BROKEN) == RunStatus.FAILED.value
    assert "dream_scopes_failing 1\n" in render(collect(app, None))
    erase(app, user_id="u-gone")
    text = render(collect(app, None))
    assert "dream_scopes_failing 0\n" in text and "dream_failed_runs_in_a_row{" not in text


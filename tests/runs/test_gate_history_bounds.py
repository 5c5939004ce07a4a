"""What the gate counts from a scope's run history: a run asked for some phases only is no
dream and ends no failure streak (as it starts no new 24 h); a past `--now` (`dream gate
--explain`, `dream run --dry-run`) counts no run ended after it. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from tests.runs.test_gate_backoff import BROKEN, WORKING
from tests.runs.test_gate_service import _dream
from tests.support.factories import add_sessions
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import RunStatus, Scope
from worker.runs import service
from worker.runs.gate import GateRule
from worker.store.models import DreamRunRow

SCOPE = Scope("history-bot", "bob")


def _sessions(app: App) -> None:
    add_sessions(app, 5, agent_id=SCOPE.agent_id, user_id=SCOPE.user_id,
                 start=utcnow() - timedelta(days=3))


def _begun_before(app: App, hours: float) -> None:
    """Every run of the scope stamped as begun (and created) ``hours`` ago; each still ended
    now: a past clock in between finds them running."""
    with app.uow() as uow:
        uow.session.execute(update(DreamRunRow).values(
            started_at=utcnow() - timedelta(hours=hours),
            created_at=utcnow() - timedelta(hours=hours)))
        uow.commit()


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


def test_a_past_now_counts_no_dream_still_running_then(app: App) -> None:
    """A dream begun two hours ago and ended now was running an hour ago: no dream yet then
    (it made the scope too soon); a run dated then would dream it again."""
    _sessions(app)
    assert _run(app, WORKING) == RunStatus.SUCCEEDED.value
    _begun_before(app, 2)
    before = utcnow() - timedelta(hours=1)
    assert service.scope_gate(app, SCOPE).rule is GateRule.TOO_SOON
    assert service.scope_gate(app, SCOPE, now=before).rule is GateRule.DUE
    assert service.scope_gate(app, SCOPE, now=before,
                              writing=True).rule is GateRule.DREAMT_SINCE


def test_a_past_now_counts_no_failure_still_running_then(app: App) -> None:
    """Failed runs begun two hours ago and ended now had not failed an hour ago: no back-off
    then (it backed off from a failure still to come)."""
    _sessions(app)
    for _ in range(2):
        assert _run(app, BROKEN) == RunStatus.FAILED.value
    _begun_before(app, 2)
    assert service.scope_gate(app, SCOPE).rule is GateRule.BACKING_OFF
    assert service.scope_gate(app, SCOPE, now=utcnow() - timedelta(hours=1)).rule is GateRule.DUE


def test_gate_explain_without_now_counts_a_dream_stamped_a_little_ahead(app: App) -> None:
    """`dream gate --explain` without --now read the present as a --now given: a dream a worker
    whose clock runs a minute ahead stamped after this process's present was not counted, and
    the scope it had just dreamt read due again. The gate itself (beat) counts it."""
    _sessions(app)
    assert _run(app, WORKING) == RunStatus.SUCCEEDED.value
    ahead = utcnow() + timedelta(minutes=2)
    with app.uow() as uow:
        uow.session.execute(update(DreamRunRow).values(started_at=ahead, finished_at=ahead))
        uow.commit()
    assert service.scope_gate(app, SCOPE).rule is GateRule.TOO_LITTLE_ACTIVITY
    said = _dream(app, "gate", "--explain", "--agent", SCOPE.agent_id, "--user", "bob")
    assert said.exit_code == 0, said.output
    assert said.output.startswith("not due  too_little_activity"), said.output

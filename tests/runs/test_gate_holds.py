"""What holds a scope back from the gate besides its last dream, against a real store (SQLite
and PostgreSQL): an operator's cancel of its run, a gate with no hours and no sessions, a
session recorded after a dream but dated before it, and a `--now` replay of a time the scope
has been dreamt since."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.runs.test_gate_backoff import WORKING
from tests.support.factories import add_sessions
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import RunStatus, Scope
from worker.ingest import import_sessions
from worker.runs import service
from worker.runs.gate import GatePolicy, GateRule, ScopeActivity, decide_gate
from worker.runs.start import NotDue, RunRequest, Via, start_run

SCOPE = Scope("hold-bot", "ann")


def _sessions(app: App, count: int = 5, start: object = None) -> None:
    add_sessions(app, count, agent_id=SCOPE.agent_id, user_id=SCOPE.user_id,
                 start=start or utcnow() - timedelta(days=3))  # type: ignore[arg-type]


def test_a_cancelled_beat_run_is_not_created_again_by_the_next_beat(app: App) -> None:
    _sessions(app)
    first = service.gate_check(app)
    assert len(first.created) == 1
    service.cancel_run(app, first.created[0])
    again = service.gate_check(app)
    assert again.created == []
    decision = again.decisions[SCOPE.key]
    assert decision.rule is GateRule.TOO_SOON and "cancelled" in decision.reason
    # The sessions are not spent: once the gate's hours have passed since the cancel, due.
    later = utcnow() + timedelta(hours=app.settings.gate_hours, minutes=1)
    assert service.scope_gate(app, SCOPE, now=later).due
    # A forced run is the operator's own call: the cancel never holds it.
    assert service.create_run(app, SCOPE, force=True) is not None


def test_a_cancel_before_the_last_dream_holds_nothing(app: App) -> None:
    _sessions(app)
    run_id = service.create_run(app, SCOPE)
    assert run_id is not None
    service.cancel_run(app, run_id)
    done = service.create_run(app, SCOPE, force=True)
    assert done is not None and service.execute_run(app, done, WORKING) == "succeeded"
    later = utcnow() + timedelta(hours=app.settings.gate_hours, minutes=1)
    _sessions(app, 5, start=utcnow() + timedelta(hours=1))
    assert service.scope_gate(app, SCOPE, now=later).due


def test_no_hours_and_no_sessions_dream_only_after_a_new_session() -> None:
    policy = GatePolicy(hours=0, sessions=0)
    now = utcnow()
    idle = decide_gate(now=now, policy=policy,
                       activity=ScopeActivity(last_success_at=now, sessions_since=0))
    assert not idle.due and idle.rule is GateRule.TOO_LITTLE_ACTIVITY
    busy = decide_gate(now=now, policy=policy,
                       activity=ScopeActivity(last_success_at=now, sessions_since=1))
    assert busy.due
    # Hours alone (no sessions) keeps its meaning: a dream every N hours, activity or not.
    daily = GatePolicy(hours=24, sessions=0)
    assert decide_gate(now=now, policy=daily, activity=ScopeActivity(
        last_success_at=now - timedelta(hours=25), sessions_since=0)).due


def test_a_session_recorded_after_a_dream_but_dated_before_it_counts_once(app: App) -> None:
    _sessions(app)
    done = service.create_run(app, SCOPE)
    assert done is not None and service.execute_run(app, done, WORKING) == "succeeded"
    with app.uow() as uow:
        dreamt = uow.runs.get(done)
        assert dreamt is not None and dreamt.started_at is not None
    # Five sessions that happened an hour before the dream, imported after it.
    import_sessions(app, [json.dumps({
        "agent_id": SCOPE.agent_id, "user_id": SCOPE.user_id,
        "started_at": (dreamt.started_at - timedelta(hours=1, minutes=i)).isoformat()})
        for i in range(5)])
    later = utcnow() + timedelta(hours=app.settings.gate_hours, minutes=1)
    decision = service.scope_gate(app, SCOPE, now=later)
    assert decision.due, decision.reason
    # Dreamt once, they are spent: the next dream needs new ones.
    again = service.create_run(app, SCOPE, force=True)
    assert again is not None and service.execute_run(app, again, WORKING) == "succeeded"
    even_later = later + timedelta(hours=app.settings.gate_hours, minutes=1)
    assert service.scope_gate(app, SCOPE, now=even_later).rule is GateRule.TOO_LITTLE_ACTIVITY


def test_a_replay_of_a_time_the_scope_was_dreamt_since_is_refused(app: App) -> None:
    _sessions(app)
    before = utcnow() - timedelta(hours=1)
    done = service.create_run(app, SCOPE)
    assert done is not None and service.execute_run(app, done, WORKING) == "succeeded"
    with pytest.raises(NotDue) as caught:
        start_run(app, RunRequest(SCOPE, trigger="cli", clock=before), Via.HERE)
    assert "dreamt" in str(caught.value) and "--force" in str(caught.value)
    assert service.gate_check(app, now=before).created == []
    with app.uow() as uow:
        assert [r.status for r in uow.runs.list(SCOPE)] == [RunStatus.SUCCEEDED.value]
    # A dry run only looks: it may replay; a forced run is the operator's call.
    assert start_run(app, RunRequest(SCOPE, trigger="cli", clock=before, dry_run=True),
                     Via.HERE).run_id


def test_scope_known_is_one_bounded_statement(app: App) -> None:
    from tests.support.sql import recorded_statements

    _sessions(app, 50)
    with recorded_statements(app) as statements:
        assert service.scope_known(app, SCOPE)
        assert not service.scope_known(app, Scope("nobody"))
    assert len(statements) == 2, statements
    assert all("EXISTS" in s.upper() and "GROUP BY" not in s.upper() for s in statements), \
        statements


def test_a_cancel_of_what_would_not_have_been_a_dream_holds_nothing(app: App) -> None:
    """A run of some phases only, had it ended, would not have counted as the scope's dream,
    so its cancel holds nothing either (it held the scope's real dream for the gate's hours);
    nor does an erasure's cancel of its user's runs: its user's next sessions are due."""
    from worker.safety.erase import erase

    _sessions(app)
    prune_only = service.create_run(app, SCOPE, phases=["prune"], force=True)
    assert prune_only is not None
    service.cancel_run(app, prune_only)
    assert service.scope_gate(app, SCOPE).due
    queued = service.create_run(app, SCOPE)
    assert queued is not None
    erase(app, user_id=SCOPE.user_id)
    with app.uow() as uow:
        run = uow.runs.get(queued)
    assert run is not None and run.status == RunStatus.CANCELLED.value
    _sessions(app, start=utcnow() - timedelta(days=1))
    assert service.scope_gate(app, SCOPE).due

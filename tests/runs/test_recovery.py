"""No run blocks a scope forever (R30): lost queued runs are handed out again or failed by the
gate check, `dream runs cancel`, lease renewal while a run works, interrupted runs resumed by
`dream run --due` (SQLite and PostgreSQL; real `dream` processes where a crash is involved)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import update

from tests.conftest import app_on
from tests.support.factories import add_notes
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.errors import Conflict, NotFound
from worker.reporting import run_tree
from worker.runs import service
from worker.runs.context import PhaseContext
from worker.store.models import DreamRunRow

DREAM = str(Path(sys.executable).parent / "dream")
SCOPE = Scope("a1")


def dream(app: App, *args: str, **env: str) -> Result:
    environ = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING",
               "DREAM_BROKER_URL": None, "DREAM_LLM_PROVIDER": "none", **env}
    return CliRunner().invoke(main, list(args), env=environ, catch_exceptions=False)


def one_error_line(result: Result, code: int) -> str:
    """One `error:` line and the exit code of the error's class (worker.errors)."""
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def status_of(app: App, run_id: str) -> str:
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        return run.status


def _notes(app: App) -> None:
    add_notes(app, {"agent_id": "a1", "content": "User prefers tea in the morning"},
              {"agent_id": "a1", "content": "User works from Lisbon"})


def test_creator_killed_after_creating_its_run_leaves_a_run_that_run_due_resumes(
        app: App) -> None:
    """R30 (case 1 of issue 12.4): `dream run` creates its run already claimed; SIGKILLed
    before its first phase, it leaves a running run whose lease lapses: the gate check marks
    it interrupted, a new `dream run` for the scope refuses with one line naming that run and
    `dream runs cancel`, and `dream run --due` executes it to the end."""
    _notes(app)
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_LLM_PROVIDER": "none", "DREAM_CRASH_AT": "run.after_create"}
    killed = subprocess.run([DREAM, "run", "--agent", "a1", "--force"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr[-2000:]
    with app.uow() as uow:
        run = uow.runs.active_for_scope(SCOPE)
        assert run is not None and run.status == RunStatus.RUNNING.value
        run_id = run.id
    assert service.gate_check(app).retried == []  # its lease has not lapsed yet
    later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 1)
    assert service.gate_check(app, now=later).retried == [run_id]
    assert status_of(app, run_id) == RunStatus.INTERRUPTED.value
    line = one_error_line(dream(app, "run", "--agent", "a1", "--force"), Conflict.exit_code)
    assert run_id in line and f"dream runs cancel {run_id}" in line and "--due" in line
    resumed = dream(app, "run", "--due")
    assert resumed.exit_code == 0, resumed.output
    assert f"run {run_id} succeeded" in resumed.stdout
    assert status_of(app, run_id) == RunStatus.SUCCEEDED.value


def test_unclaimed_queued_run_is_handed_out_again_then_failed(app: App) -> None:
    """R30: a queued run nobody claims (no broker, a lost message) is handed out again by each
    gate check after DREAM_QUEUED_TIMEOUT_SECONDS, and failed with the reason after
    max_attempts hand-overs, which frees its scope. A fresh queued run is left alone."""
    _notes(app)
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    timeout = timedelta(seconds=app.settings.queued_timeout_seconds)
    assert service.gate_check(app).requeued == []  # not yet expired
    later = utcnow()
    for attempt in range(app.settings.max_attempts):
        later += timeout + timedelta(seconds=1)
        result = service.gate_check(app, now=later)
        assert result.requeued == [run_id], (attempt, result)
        assert service.gate_check(app, now=later).requeued == []  # one hand-over per timeout
    later += timeout + timedelta(seconds=1)
    assert service.gate_check(app, now=later).failed == [run_id]
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status == RunStatus.FAILED.value
        assert run.requeues == app.settings.max_attempts
        assert "never claimed" in (run.error or "")
    assert service.create_run(app, SCOPE, force=True) is not None


def test_gate_without_a_broker_says_how_its_runs_execute(app: App) -> None:
    """R30 (case 2): `dream gate` with no broker creates the run and says it waits for
    `dream run --due`, which then executes it (it is not skipped as "already queued")."""
    _notes(app)
    for _ in range(5):
        assert dream(app, "sessions", "add", "--agent", "a1").exit_code == 0
    gate = dream(app, "gate")
    assert gate.exit_code == 0, gate.output
    assert "created 1 run," in gate.stdout and "dream run --due" in gate.stdout
    with app.uow() as uow:
        run = uow.runs.active_for_scope(SCOPE)
        assert run is not None
        run_id = run.id
    resumed = dream(app, "run", "--due")
    assert f"run {run_id} succeeded" in resumed.stdout, resumed.output
    assert dream(app, "run", "--due").stdout.startswith("no scope is due")


def _unclaimed_for(app: App, run_id: str, seconds: float) -> None:
    """The run last handed out ``seconds`` ago (the gate's clock cannot be set ahead)."""
    with app.uow() as uow:
        uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == run_id).values(
            enqueued_at=utcnow() - timedelta(seconds=seconds)))
        uow.commit()


def test_gate_without_a_broker_names_the_hand_overs_a_run_gets(app: App) -> None:
    """R30: with DREAM_MAX_ATTEMPTS=1 the no-broker line said unclaimed runs are failed "after
    1 hand-overs", where the gate check fails one after two: its creation's and one more. The
    line counts them as the check does, and each further check keeps its word."""
    _notes(app)
    for _ in range(5):
        assert dream(app, "sessions", "add", "--agent", "a1").exit_code == 0
    once = {"DREAM_MAX_ATTEMPTS": "1"}
    created = dream(app, "gate", **once)
    assert created.exit_code == 0, created.output
    timeout = app.settings.queued_timeout_seconds
    assert f"unclaimed runs are failed after 2 hand-overs of {timeout} s" in created.stdout
    with app.uow() as uow:
        run = uow.runs.active_for_scope(SCOPE)
        assert run is not None
        run_id = run.id
    _unclaimed_for(app, run_id, timeout + 1)
    again = dream(app, "gate", **once)
    assert "1 unclaimed run handed out again" in again.stdout, again.output
    _unclaimed_for(app, run_id, timeout + 1)
    given_up = dream(app, "gate", **once)
    assert "1 given up" in given_up.stdout, given_up.output
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status == RunStatus.FAILED.value
        assert (run.error or "").startswith(f"never claimed after 2 hand-overs of {timeout} s")


def test_interrupted_run_owns_its_scope_until_resumed_by_run_due(app: App) -> None:
    """R30 + R1: a run whose lease expired is interrupted; no second run may start beside it
    (the unique index covers interrupted), and `dream run --due` resumes it to the end."""
    _notes(app)
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None and service.claim_run(app, run_id) == 1
    later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 1)
    assert service.gate_check(app, now=later).retried == [run_id]
    assert status_of(app, run_id) == RunStatus.INTERRUPTED.value
    assert service.create_run(app, SCOPE, force=True) is None
    assert "is already interrupted" in one_error_line(dream(app, "run", "--agent", "a1", "--force"),
                                                   Conflict.exit_code)
    resumed = dream(app, "run", "--due")
    assert f"run {run_id} succeeded" in resumed.stdout, resumed.output
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.attempts == 2


def test_runs_cancel_frees_the_scope_and_refuses_finished_runs(app: App) -> None:
    """`dream runs cancel RUN_ID` cancels a queued run (the scope takes a new run at once);
    a finished run or an unknown id is refused with one error line, changing nothing."""
    _notes(app)
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    done = dream(app, "runs", "cancel", run_id)
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == f"run {run_id} cancelled (was queued)"
    tree = json.loads(dream(app, "runs", "show", run_id, "--json").stdout)
    assert tree["status"] == "cancelled" and tree["status_reason"] == "cancelled by the operator"
    listed = dream(app, "runs", "list").stdout
    assert "cancelled" in listed and "(cancelled by the operator)" in listed
    second = service.create_run(app, SCOPE, force=True)
    assert second is not None and service.execute_run(app, second) == RunStatus.SUCCEEDED.value
    assert "only queued, interrupted or running" in one_error_line(
        dream(app, "runs", "cancel", second), Conflict.exit_code)
    assert "no run with id nope" in one_error_line(dream(app, "runs", "cancel", "nope"),
                                                    NotFound.exit_code)
    assert status_of(app, second) == RunStatus.SUCCEEDED.value


def _blocking_consolidate(monkeypatch: pytest.MonkeyPatch, started: threading.Event,
                          release: threading.Event) -> None:
    """Wrap the real consolidation so it first waits (a long model call, say)."""
    from worker import phases

    real = phases.phase_registry()

    def slow(ctx: PhaseContext, step_id: str) -> PhaseReport:
        started.set()
        assert release.wait(60)
        report: PhaseReport = real["consolidate"](ctx, step_id)
        return report

    monkeypatch.setattr(phases, "phase_registry", lambda: {**real, "consolidate": slow})


def test_cancelling_a_running_run_stops_its_executor_cleanly(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running run cancelled mid-phase: its executor stops at the next fenced step without a
    traceback, no later phase runs, and the run stays cancelled with its reason."""
    _notes(app)
    started, release = threading.Event(), threading.Event()
    _blocking_consolidate(monkeypatch, started, release)
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(service.execute_run(app, run_id)))
    worker.start()
    assert started.wait(30)
    assert service.cancel_run(app, run_id, "operator stop").was == RunStatus.RUNNING.value
    release.set()
    worker.join(60)
    assert outcome == [RunStatus.CANCELLED.value]
    tree = run_tree(app, run_id)
    assert tree["status_reason"] == "operator stop"
    # In-process every phase's parent step is opened with the claim; the cancel interrupted
    # them all, saying why, and none ran (no step finished, no child step recorded): the
    # cancel cut consolidation short, the others had not started.
    steps = tree["steps"]
    assert [s["phase"] for s in steps] == list(PHASES)
    why = "the run was cancelled: operator stop"
    assert [(s["status"], s["error"]) for s in steps] == [
        ("interrupted", f"interrupted; {why}"),
        *(("interrupted", f"not started; {why}") for _ in PHASES[1:])]
    assert all(not s["children"] for s in steps)


@pytest.fixture(params=["sqlite", "postgres"])
def short_lease_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    """An App whose lease is the shortest allowed (10 s)."""
    with app_on(request.param, tmp_path, lease_seconds=10) as a:
        yield a


def test_a_working_run_renews_its_lease_past_lease_seconds(
    short_lease_app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R30 (issue 12.11): a healthy in-process run whose phase outlives DREAM_LEASE_SECONDS
    while a gate check runs is not interrupted: the heartbeat renewed its lease, and the run
    finishes succeeded instead of crashing with StaleLease."""
    app = short_lease_app
    _notes(app)
    started, release = threading.Event(), threading.Event()
    _blocking_consolidate(monkeypatch, started, release)
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(service.execute_run(app, run_id)))
    worker.start()
    assert started.wait(30)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.started_at is not None
        claimed_at = run.started_at
    time.sleep(app.settings.lease_seconds + 1.5)
    result = service.gate_check(app)
    assert result.retried == [] and result.failed == []
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status == RunStatus.RUNNING.value
        assert run.lease_expires_at is not None
        assert run.lease_expires_at > claimed_at + timedelta(seconds=app.settings.lease_seconds)
    release.set()
    worker.join(60)
    assert outcome == [RunStatus.SUCCEEDED.value]
    statuses = {s["phase"]: s["status"] for s in run_tree(app, run_id)["steps"]}
    assert statuses["consolidate"] != StepStatus.FAILED.value


def _queued_run_ids(client: object, queue: str) -> list[str]:
    """The run id argument of every message waiting in the queue (kombu JSON envelopes)."""
    ids = []
    for raw in client.lrange(queue, 0, -1):  # type: ignore[attr-defined]
        body = json.loads(base64.b64decode(json.loads(raw)["body"]))
        ids.append(body[0][0])
    return ids


@dataclass
class BrokerGate:
    """`dream gate` processes for scope a1 (due: notes and five sessions) on a Redis queue of
    their own; ``gate(s)`` runs one with the clock ``s`` seconds ahead and returns its stdout.
    Their queued runs time out after ``timeout`` seconds, so that a few timeouts stay within
    the hour a writing gate's ``--now`` may be ahead of the present."""

    app: App
    env: dict[str, str]
    client: Any
    queue: str
    timeout: int = 10

    def gate(self, after_seconds: int = 0) -> str:
        later = utcnow() + timedelta(seconds=after_seconds)
        done = subprocess.run([DREAM, "gate", "--now", later.isoformat()], env=self.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def run_id(self) -> str:
        with self.app.uow() as uow:
            run = uow.runs.active_for_scope(SCOPE)
            assert run is not None
            return str(run.id)

    def queued(self) -> list[str]:
        return _queued_run_ids(self.client, self.queue)


@contextmanager
def broker_gate(app: App, prefix: str) -> Iterator[BrokerGate]:
    import redis

    from tests.support.services import redis_url

    broker = redis_url().rsplit("/", 1)[0] + "/13"
    queue = f"{prefix}-{uuid.uuid4().hex[:10]}"
    _notes(app)
    for _ in range(5):
        assert dream(app, "sessions", "add", "--agent", "a1").exit_code == 0
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_LLM_PROVIDER": "none", "DREAM_BROKER_URL": broker, "DREAM_CELERY_QUEUE": queue,
           "DREAM_QUEUED_TIMEOUT_SECONDS": str(BrokerGate.timeout)}
    client = redis.Redis.from_url(broker)
    try:
        yield BrokerGate(app, env, client, queue)
    finally:
        client.delete(queue)
        client.close()


@pytest.mark.redis
def test_lost_broker_message_is_sent_again_by_the_gate(app: App) -> None:
    """R30 (case 3): `dream gate` with a broker sends the run; the message is lost (the queue
    deleted, as a Redis flush would); a later `dream gate` hands it out again on the broker."""
    with broker_gate(app, "dream-recovery") as b:
        assert "1 run sent to the broker" in b.gate()
        run_id = b.run_id()
        assert b.queued() == [run_id]
        b.client.delete(b.queue)  # the message is lost
        again = b.gate(b.timeout + 1)
        assert "1 unclaimed run handed out again" in again
        assert b.queued() == [run_id]


@pytest.mark.redis
def test_a_run_waiting_behind_a_broker_backlog_is_not_sent_twice(app: App) -> None:
    """R30 at fleet scale: a run whose message still waits in the queue (a backlog that takes
    longer than DREAM_QUEUED_TIMEOUT_SECONDS to drain) is not handed out again by `dream gate`,
    which says why; once its message is gone from the queue, the next check sends it again."""
    with broker_gate(app, "dream-backlog") as b:
        assert "1 run sent to the broker" in b.gate()
        run_id = b.run_id()
        timeout = b.timeout
        for k in range(1, app.settings.max_attempts + 2):  # more timeouts than it may be sent
            out = b.gate(k * (timeout + 1))
            assert "0 unclaimed runs handed out again, 0 given up" in out, out
            assert "(1 messages still queued: waiting runs get 86400 s)" in out, out
        assert b.queued() == [run_id]  # still the one message
        assert status_of(app, run_id) == RunStatus.QUEUED.value
        b.client.delete(b.queue)  # now the message is lost
        assert "1 unclaimed run handed out again" in b.gate(2 * timeout)
        assert b.queued() == [run_id]


def test_a_backlog_gives_queued_and_between_phase_runs_patience_then_recovers_them(
        app: App) -> None:
    """R30 + R5 with a backlog (the gate check's ``backlog``): neither a queued run past its
    timeout nor a running one whose lease lapsed (a chain's next phase task queued behind the
    backlog) is handed out, recovered or failed, however many timeouts pass, until the queue
    is empty or they have waited DREAM_BACKLOG_PATIENCE_SECONDS; without a backlog, as before."""
    _notes(app)
    add_notes(app, {"agent_id": "a2", "content": "User likes jazz"})
    queued = service.create_run(app, SCOPE, force=True)
    running = service.create_run(app, Scope("a2"), force=True)
    assert queued is not None and running is not None and service.claim_run(app, running) == 1
    s = app.settings
    start = utcnow()
    step = timedelta(seconds=max(s.queued_timeout_seconds, s.lease_seconds) + 1)
    for k in range(1, s.max_attempts + 3):
        result = service.gate_check(app, now=start + k * step, backlog=40)
        assert (result.requeued, result.retried, result.failed) == ([], [], []), k
        assert result.backlog == 40
    assert status_of(app, queued) == RunStatus.QUEUED.value
    assert status_of(app, running) == RunStatus.RUNNING.value
    result = service.gate_check(app, now=start + step, backlog=0)
    assert (result.requeued, result.retried) == ([queued], [running])

    # Both now wait for an executor again: a backlog that never drains still hands them out
    # once they have waited the patience.
    wait = start + step + timedelta(seconds=s.queued_timeout_seconds + 1)
    assert service.gate_check(app, now=wait, backlog=40).requeued == []
    later = start + step + timedelta(seconds=s.backlog_patience_seconds + 1)
    assert sorted(service.gate_check(app, now=later, backlog=40).requeued) == sorted(
        [queued, running])
    assert service.gate_check(app, now=later, backlog=None).requeued == []  # once per timeout

"""Handing runs to the broker in bulk (``worker.tasks.enqueue_runs``) on a real Redis: one
message per run over one producer in both task modes; a broker that does not answer fails the
run being sent with one line and leaves the rest queued (R30 hands them out again)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from worker.app import App
from worker.domain.types import PHASES, RunStatus, Scope
from worker.runs import service

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BrokerQueue:
    broker: str
    name: str
    client: Any  # redis.Redis, to read the queue


@pytest.fixture
def queue() -> Iterator[BrokerQueue]:
    """A Redis queue of the test's own, deleted afterwards."""
    import redis

    from tests.support.services import redis_url

    broker = redis_url()
    client = redis.Redis.from_url(broker)
    found = BrokerQueue(broker, f"dream-enqueue-{uuid.uuid4().hex[:10]}", client)
    try:
        yield found
    finally:
        client.delete(found.name)
        client.close()


def _probe(app: App, broker: str, queue: str, tasks: str, run_ids: list[str]) -> dict[str, Any]:
    """``tasks`` "" leaves DREAM_CELERY_TASKS unset (the default)."""
    env = {k: v for k, v in os.environ.items() if k != "DREAM_CELERY_TASKS"}
    env |= {"DREAM_DATABASE_URL": app.settings.database_url,
            "DREAM_BROKER_URL": broker, "DREAM_CELERY_QUEUE": queue,
            "DREAM_LLM_PROVIDER": "none", "DREAM_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT)} | ({"DREAM_CELERY_TASKS": tasks} if tasks else {})
    done = subprocess.run([sys.executable, "-m", "tests.support.enqueue_probe", *run_ids],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _messages(client: Any, queue: str) -> list[tuple[str, list[Any], list[tuple[str, Any]]]]:
    """Each message waiting in the queue, oldest first: its task, its arguments, and the tasks
    the chain sends after it (name and arguments, in order)."""
    found = []
    for raw in reversed(client.lrange(queue, 0, -1)):  # kombu LPUSHes: the oldest is last
        envelope = json.loads(raw)
        args, _kwargs, embed = json.loads(base64.b64decode(envelope["body"]))
        then = [(sig["task"], sig["args"]) for sig in reversed(embed.get("chain") or [])]
        found.append((envelope["headers"]["task"], args, then))
    return found


def _runs(app: App, n: int) -> list[str]:
    runs = service.create_runs(app, [Scope(f"enqueue-{i}") for i in range(n)], trigger="beat")
    ids = [run_id for run_id in runs.values() if run_id is not None]
    assert len(ids) == n
    return ids


@pytest.mark.redis
@pytest.mark.parametrize("tasks", ["phase", "run", ""])
def test_enqueue_runs_sends_one_message_per_run_over_one_producer(
        sqlite_app: App, queue: BrokerQueue, tasks: str) -> None:
    """Three runs, one producer taken from the pool: three messages in the order given, each
    carrying only its run id; "phase" sends the phase chain (consolidate first, the other
    three phases chained after it), "run" the one run task, and so does the default (unset;
    before: the chain). The runs stay queued."""
    run_ids = _runs(sqlite_app, 3)
    assert _probe(sqlite_app, queue.broker, queue.name, tasks, run_ids) == {
        "producers": 1, "error": None}
    expected: list[tuple[str, list[Any], list[tuple[str, Any]]]]
    if tasks in ("run", ""):
        expected = [("dream.run", [run_id], []) for run_id in run_ids]
    else:
        expected = [(f"dream.{PHASES[0]}", [run_id],
                     [(f"dream.{p}", [run_id]) for p in PHASES[1:]]) for run_id in run_ids]
    assert _messages(queue.client, queue.name) == expected
    with sqlite_app.uow() as uow:
        assert {uow.runs.get(r).status for r in run_ids} == {  # type: ignore[union-attr]
            RunStatus.QUEUED.value}


@pytest.mark.redis
def test_an_unreachable_broker_fails_the_run_being_sent_and_leaves_the_rest(
        sqlite_app: App) -> None:
    """Nothing answers at the broker URL: the first run is failed at once with the reason (its
    scope freed), the error is one line naming the broker, the run that failed and how many
    stay queued, and the runs after it stay queued for the gate check to hand out again (R30)."""
    run_ids = _runs(sqlite_app, 3)
    out = _probe(sqlite_app, "redis://127.0.0.1:1/0", "dream-nowhere", "phase", run_ids)
    error = out["error"]
    assert error is not None and "\n" not in error
    assert error.startswith("cannot reach the broker at redis://127.0.0.1:1/0 (")
    assert (f"; run {run_ids[0]} failed unsent after 0 of 3 were sent, 2 more stay queued for "
            "the gate check to hand out again after 3600 s; check DREAM_BROKER_URL") in error
    with sqlite_app.uow() as uow:
        runs = [uow.runs.get(r) for r in run_ids]
        assert [(r.status, r.error) for r in runs if r is not None] == [
            (RunStatus.FAILED.value, "could not enqueue: OperationalError"),
            (RunStatus.QUEUED.value, None), (RunStatus.QUEUED.value, None)]


def test_gate_check_hands_out_nothing_on_a_schema_older_than_the_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose beat ran before `dream db upgrade`: the gate check created a queued run
    for each due scope on the old schema, and each then failed in every phase. Now it creates
    none and logs why (no broker is asked: the check comes first)."""
    import sqlite3

    from worker import celery_app, tasks
    from worker.app import build_app
    from worker.config import Settings
    from worker.store.migrate import upgrade

    path = tmp_path / "old.db"
    old = build_app(Settings(database_url=f"sqlite:///{path}", llm_provider="none"))
    upgrade(old.engine, "0010")
    old.dispose()
    with sqlite3.connect(path) as conn:  # a scope the gate finds due: sessions, no dream yet
        conn.executemany("INSERT INTO sessions (id, scope_key, agent_id, started_at) VALUES "
                         "(?, '[\"a\",null,null]', 'a', '2026-01-01 00:00:00')",
                         [(f"s{i}",) for i in range(6)])
    monkeypatch.setenv("DREAM_DATABASE_URL", f"sqlite:///{path}")
    monkeypatch.setattr(celery_app, "_resources", {})
    # Never a broker: without the check the runs would be sent to the default Redis.
    sent: list[str] = []
    monkeypatch.setattr(tasks, "queue_backlog", lambda _app: None)
    monkeypatch.setattr(tasks, "enqueue_runs", lambda ids, _app: sent.extend(ids))
    try:
        assert tasks.gate_check() == [] and sent == []
    finally:
        celery_app._resources.pop("app", old).dispose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM dream_runs").fetchone() == (0,)


@pytest.mark.parametrize("task_name", ["run", "consolidate", "finalize"])
def test_a_run_task_on_a_schema_older_than_the_code_waits_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_name: str) -> None:
    """A run's message reaching a worker deployed before `dream db upgrade` ran: the run task
    (or a phase task) claimed the run and failed it in every phase on a missing column. Now it
    asks to be tried again later and touches nothing; once the schema is current, the process
    goes on and never asks again."""
    import sqlite3

    from celery.exceptions import Retry

    from worker import celery_app, tasks
    from worker.app import build_app
    from worker.config import Settings
    from worker.store.migrate import upgrade

    path = tmp_path / "old.db"
    old = build_app(Settings(database_url=f"sqlite:///{path}", llm_provider="none"))
    upgrade(old.engine, "0010")
    old.dispose()
    monkeypatch.setenv("DREAM_DATABASE_URL", f"sqlite:///{path}")
    monkeypatch.setattr(celery_app, "_resources", {})
    monkeypatch.setattr(tasks, "_schema_current", [])
    task = getattr(tasks, task_name)
    try:
        with pytest.raises(Retry):
            task("run-1")
        with pytest.raises(Retry):  # asked again at every delivery while the schema is old
            task("run-1")
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM dream_runs").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM run_steps").fetchone() == (0,)
        app = celery_app.resources()
        upgrade(app.engine)
        tasks._wait_for_schema(task, app)
        assert tasks._schema_current == [app]
    finally:
        celery_app._resources.pop("app", old).dispose()


def test_each_retry_of_a_run_task_is_a_message_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delivery is counted by its message's identity, and the same identity arriving again
    counts as a delivery that died. A retry keeps the task id and counts ``retries`` up, so a
    broker's duplicate of one message, retrying beside the original (each waiting on a batch),
    gave the same identities again, and three such waits failed a healthy run as "died 3 times
    in a row". Each retry now carries a token of its own: a duplicate's retries meet none of the
    original's."""
    from tests.conftest import make_sqlite_app
    from tests.support.safety_store import SCOPE, mixed_store
    from worker import celery_app, tasks
    from worker.runs.deliveries import begin_delivery
    from worker.runs.engine import PhaseResult
    from worker.runs.outcome import PhaseOutcome

    app = make_sqlite_app(tmp_path)
    monkeypatch.setattr(celery_app, "_resources", {"app": app})
    monkeypatch.setattr(tasks, "_schema_current", [app])
    try:
        mixed_store(app)
        run_id = service.create_run(app, SCOPE, force=True)
        assert run_id is not None
        keys: list[str] = []
        real = begin_delivery

        def counted(dream_app: App, run: str, task: str, message: str, carried: int) -> Any:
            keys.append(message)
            return real(dream_app, run, task, message, carried)

        monkeypatch.setattr(tasks, "begin_delivery", counted)
        # The phase waits on its provider's batch twice, then ends (each copy of the message).
        waiting, done = PhaseResult(PhaseOutcome.WAITING, 1.0), PhaseResult(PhaseOutcome.SUCCEEDED)
        replies = iter([waiting, waiting, done] * 2)
        monkeypatch.setattr(service, "execute_phase", lambda *_: next(replies))
        for _ in range(2):  # the message, then a broker's duplicate of it (same task id)
            result = tasks.consolidate.apply(args=(run_id,), task_id="message-1")
            assert result.successful() and result.result == PhaseOutcome.SUCCEEDED.value
        original, duplicate = keys[:3], keys[3:]
        assert len(duplicate) == 3 and original[0] == duplicate[0]
        assert not set(original[1:]) & set(duplicate[1:]), keys
        with app.uow() as uow:
            run = uow.runs.get(run_id)
        assert run is not None and run.status != RunStatus.FAILED.value and run.deliveries == 1
    finally:
        app.dispose()

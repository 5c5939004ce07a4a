"""`dream run --due --via-celery` on a real Redis: the gate's runs go to the broker in bulk, over
one producer as the gate check task sends them, one "queued" line per run sent; a broker lost
mid-way is one error line saying what was sent and what stays queued."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import add_sessions
from tests.support.services import redis_url, unavailable
from worker.app import App
from worker.domain.types import RunStatus

ROOT = Path(__file__).resolve().parents[2]
SCOPES = [f"due-{i}" for i in range(4)]


def _due(app: App) -> None:
    """Four scopes, each due for its first run (enough sessions)."""
    for agent in SCOPES:
        add_sessions(app, app.settings.gate_sessions, agent_id=agent)


def _dream(app: App, broker: str, queue: str, *args: str, **env: str) -> tuple[list[str], str,
                                                                                dict[str, Any]]:
    """`dream ARGS` in a fresh process (tests.support.dream_probe): its stdout lines, its
    stderr and what the probe counted (producers taken, exit code)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DREAM_")}
    environ |= {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_BROKER_URL": broker,
                "DREAM_CELERY_QUEUE": queue, "DREAM_LLM_PROVIDER": "none",
                "DREAM_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT), **env}
    done = subprocess.run([sys.executable, "-m", "tests.support.dream_probe", *args], cwd=ROOT,
                          env=environ, capture_output=True, text=True, timeout=120)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    return lines[:-1], done.stderr, json.loads(lines[-1])


def _sent_run_ids(client: Any, queue: str) -> list[str]:
    """The run id of each message waiting in ``queue``, oldest first."""
    return [json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0]
            for raw in reversed(client.lrange(queue, 0, -1))]


def _statuses(app: App) -> dict[str, str]:
    with app.uow() as uow:
        return {r.agent_id: r.status for r in uow.runs.list(limit=100)}


@pytest.mark.redis
def test_due_via_celery_sends_every_due_run_over_one_producer(sqlite_app: App) -> None:
    """Four due scopes: four messages, one per run and each run's id once, over one producer
    taken from the pool (before: one producer per run, ``dispatch_run`` for each), and one
    "queued" line per run sent; the runs stay queued for the workers."""
    import redis

    _due(sqlite_app)
    broker, queue = redis_url(), f"dream-due-{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url(broker)
    try:
        out, err, probe = _dream(sqlite_app, broker, queue, "run", "--due", "--via-celery")
        sent = _sent_run_ids(client, queue)
    finally:
        client.delete(queue)
        client.close()
    assert probe == {"producers": 1, "exit": 0}, (out, err)
    assert len(sent) == len(SCOPES) == len(set(sent))
    assert out == [f"run {r} queued on the broker; follow it with `dream runs show {r}`"
                   for r in sent]
    assert _statuses(sqlite_app) == dict.fromkeys(SCOPES, RunStatus.QUEUED.value)


@pytest.fixture
def doomed_broker(tmp_path: Path) -> Iterator[str]:
    """A Redis server of the test's own on a free port (the test shuts it down)."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server is not installed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.kill()
        server.wait(10)


@pytest.mark.redis
def test_a_broker_lost_mid_way_says_what_was_sent_and_what_stays_queued(
        sqlite_app: App, doomed_broker: str) -> None:
    """The broker goes away after two of four messages: the two sent runs each have their
    "queued" line, then one error line (exit 5) names the broker, the run that failed unsent
    and the one left queued for the gate check; that run stays queued, the failed one frees
    its scope."""
    _due(sqlite_app)
    out, err, probe = _dream(sqlite_app, doomed_broker, "dream-doomed", "run", "--due",
                             "--via-celery", PROBE_BROKER_DIES_AFTER="2")
    assert probe == {"producers": 1, "exit": 5}, (out, err)
    sent = [line.split()[1] for line in out]
    assert len(out) == 2 and all(line.endswith("queued on the broker; follow it with "
                                               f"`dream runs show {r}`")
                                 for line, r in zip(out, sent, strict=True))
    [line] = err.strip().splitlines()
    with sqlite_app.uow() as uow:
        runs = {r.id: r for r in uow.runs.list(limit=100)}
    failed = [r for r in runs.values() if r.status == RunStatus.FAILED.value]
    assert len(failed) == 1 and failed[0].error == "could not enqueue: OperationalError"
    assert line.startswith(f"error: cannot reach the broker at {doomed_broker} (")
    assert (f"; run {failed[0].id} failed unsent after 2 of 4 were sent, 1 more stays queued "
            "for the gate check") in line, line
    assert line.endswith("check DREAM_BROKER_URL and that the broker it names is running")
    assert sorted(r.status for r in runs.values()) == [
        RunStatus.FAILED.value, RunStatus.QUEUED.value, RunStatus.QUEUED.value,
        RunStatus.QUEUED.value]
    assert set(sent) < {r.id for r in runs.values() if r.status == RunStatus.QUEUED.value}


@pytest.mark.redis
def test_the_gate_command_says_what_a_broker_lost_mid_way_left(sqlite_app: App,
                                                                doomed_broker: str) -> None:
    """`dream gate` hands the same runs out in bulk: a broker lost after two messages is one
    error line naming the run that failed unsent and the one left queued (before: only the
    broker's error, not how far the hand-out got)."""
    _due(sqlite_app)
    out, err, probe = _dream(sqlite_app, doomed_broker, "dream-doomed", "gate",
                             PROBE_BROKER_DIES_AFTER="2")
    assert probe == {"producers": 1, "exit": 5}, (out, err)
    assert out == ["created 4 runs, 0 scopes not due, 0 interrupted runs to retry, 0 unclaimed "
                   "runs handed out again, 0 given up"]
    [line] = err.strip().splitlines()
    assert "failed unsent after 2 of 4 were sent, 1 more stays queued for the gate check" in line

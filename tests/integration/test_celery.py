"""A real Celery worker (prefork, 2 processes) against Redis and PostgreSQL+pgvector.

The worker is a subprocess started exactly as production starts it (`celery -A worker.celery_app
worker`); the test only talks to it through the broker and reads the results from the database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import drop_postgres_app, make_postgres_app
from tests.support.factories import DARK_MODE_NOTES, add_entities, add_notes, add_sessions
from tests.support.services import redis_url
from worker.app import App
from worker.celery_app import celery_config, make_celery
from worker.clock import utcnow
from worker.config import Settings
from worker.domain.types import PHASES, Scope
from worker.reporting import list_runs, run_tree

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
REDIS_DB = 14  # dedicated to this module; the queue name is unique per test session as well
TERMINAL = {"succeeded", "partial", "failed"}
FINE_PHASE = {"succeeded", "no_items", "skipped"}


@dataclass
class Cluster:
    app: App
    env: dict[str, str]
    settings: Settings
    log: Path
    tmp: Path


def _broker() -> str:
    return redis_url().rsplit("/", 1)[0] + f"/{REDIS_DB}"


def _stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """Warm shutdown (SIGTERM lets running tasks finish); SIGKILL only if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode


def _events(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        start = line.find("{")
        if start < 0:
            continue
        try:
            obj = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "event" in obj:
            out.append(obj)
    return out


def _wait_terminal(app: App, run_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tree = run_tree(app, run_id)
        if tree["status"] in TERMINAL:
            return tree
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} still {tree['status']} after {timeout}s")


def _assert_four_phases(tree: dict[str, Any]) -> None:
    assert tree["status"] == "succeeded", tree
    parents = tree["steps"]
    assert [s["phase"] for s in parents] == list(PHASES)
    assert all(s["status"] in FINE_PHASE for s in parents), [(s["phase"], s["status"]) for s in parents]
    assert all(s["finished_at"] is not None for s in parents)
    assert set(tree["totals"]["phases"]) == set(PHASES)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("celery")
    broker = _broker()
    queue = f"dream-test-{uuid.uuid4().hex[:10]}"
    app = make_postgres_app()
    env = {
        **os.environ,
        "DREAM_DATABASE_URL": app.settings.database_url,
        "DREAM_BROKER_URL": broker,
        "DREAM_RESULT_BACKEND": broker,
        "DREAM_CELERY_QUEUE": queue,
        "DREAM_LLM_PROVIDER": "none",
        "DREAM_LOG_FORMAT": "json",
        "DREAM_LOG_LEVEL": "INFO",
        "DREAM_BEAT_INTERVAL_SECONDS": "10",
        # The chain of phase tasks, which these tests follow task by task (the default, one
        # run task, is the subject of test_one_task_per_run_runs_every_phase_in_one_task).
        "DREAM_CELERY_TASKS": "phase",
        "PYTHONUNBUFFERED": "1",
    }
    settings = Settings(database_url=app.settings.database_url, broker_url=broker,
                        result_backend=broker, celery_queue=queue, beat_interval_seconds=10)
    log = tmp / "worker.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker",
             "--pool", "prefork", "-c", "2", "-Q", queue, "-n", f"{queue}@%h",
             "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
        )
    try:
        yield Cluster(app=app, env=env, settings=settings, log=log, tmp=tmp)
    finally:
        code = _stop(proc)
        import redis

        client = redis.Redis.from_url(broker)
        client.delete(queue)
        client.close()
        drop_postgres_app(app)
        assert code == 0, f"worker did not shut down cleanly (exit {code}):\n{log.read_text()[-4000:]}"


def test_gate_check_task_runs_the_chain_to_finalize(cluster: Cluster) -> None:
    """gate_check on the broker creates one run for the due scope; the worker runs consolidate →
    contradictions → prune → archive, which finalizes; each task's logs carry its id and name; both
    prefork children built their own engine (worker_process_init)."""
    app = cluster.app
    add_notes(app, {"agent_id": "celery-1", "content": "User prefers Python"},
              {"agent_id": "celery-1", "content": "User writes tests with pytest"})
    add_sessions(app, 5, agent_id="celery-1", start=utcnow())
    client = make_celery(cluster.settings)
    created = client.send_task("dream.gate_check").get(timeout=90)
    runs = list_runs(app, scope=Scope("celery-1"))
    assert [r["id"] for r in runs] == created and len(created) == 1
    tree = _wait_terminal(app, created[0])
    _assert_four_phases(tree)
    assert tree["trigger"] == "beat"
    assert tree["totals"]["notes_before"] == {"active": 2}

    events = _events(cluster.log)
    ready = [e for e in events if e["event"] == "celery.process_ready"]
    assert len({e["pid"] for e in ready}) == 2 and all(e["database"] == "postgresql" for e in ready)
    finished = [e for e in events if e["event"] == "phase.finished" and e.get("run_id") == created[0]]
    assert sorted(e["task_name"] for e in finished) == sorted(f"dream.{p}" for p in PHASES)
    assert all(e["task_id"] for e in finished) and len({e["task_id"] for e in finished}) == 4
    done = [e for e in events if e["event"] == "run.finished" and e.get("run_id") == created[0]]
    assert done and done[0]["task_name"] == "dream.archive"  # the last phase task finalizes
    gate = [e for e in events if e["event"] == "gate.checked"]
    assert gate and gate[0]["task_name"] == "dream.gate_check"
    assert isinstance(gate[0]["backlog"], int)  # the worker read its queue's backlog
    assert "User prefers Python" not in cluster.log.read_text()  # no note text in logs


def test_cli_run_via_celery(cluster: Cluster) -> None:
    """`dream run --agent A --force --via-celery` queues the chain; the worker finishes the run."""
    app = cluster.app
    add_notes(app, {"agent_id": "celery-2", "content": "Deploys happen on Tuesdays"})
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("dream")), "run", "--agent", "celery-2", "--force", "--via-celery"],
        cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert "queued on the broker" in line
    run_id = line.split()[1]
    tree = _wait_terminal(app, run_id)
    _assert_four_phases(tree)
    assert tree["trigger"] == "cli" and tree["force"] is True


def _via_celery(cluster: Cluster, agent: str, tasks: str) -> str:
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("dream")), "run", "--agent", agent, "--force",
         "--via-celery"],
        cwd=ROOT, env={**cluster.env, "DREAM_CELERY_TASKS": tasks}, capture_output=True,
        text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1].split()[1]


def test_one_task_per_run_runs_every_phase_in_one_task(cluster: Cluster) -> None:
    """With DREAM_CELERY_TASKS=run the CLI enqueues one ``dream.run`` task: every phase and the
    finalize run in it (one task id), and the scope ends as the same notes do under the chain
    of phase tasks."""
    app = cluster.app
    add_entities(app, {"kind": "conversation", "id": "c-gone", "status": "deleted"})
    for agent in ("celery-chain", "celery-run"):
        add_notes(app, *({"agent_id": agent, "content": text, "type": "Preference"}
                         for text in DARK_MODE_NOTES),
                  {"agent_id": agent, "content": "Trial ends soon",
                   "expires_at": (utcnow() - timedelta(days=3)).isoformat()},
                  {"agent_id": agent, "content": "Asked about invoice 4411 in a deleted chat",
                   "source_conversation_id": "c-gone"})
    chained = _via_celery(cluster, "celery-chain", "phase")
    run_id = _via_celery(cluster, "celery-run", "run")
    ends = {}
    for agent, rid in (("celery-chain", chained), ("celery-run", run_id)):
        tree = _wait_terminal(app, rid)
        _assert_four_phases(tree)
        assert tree["totals"]["notes_before"] == {"active": len(DARK_MODE_NOTES) + 2}
        with app.uow() as uow:
            notes = uow.notes.load_scope(Scope(agent), ("active", "revoked", "archived")).notes
        ends[agent] = sorted((n.status, n.content) for n in notes)
    assert ends["celery-run"] == ends["celery-chain"]
    assert {status for status, _ in ends["celery-run"]} == {"active", "revoked", "archived"}
    events = [e for e in _events(cluster.log) if e.get("run_id") == run_id]
    finished = [e for e in events if e["event"] == "phase.finished"]
    assert [e["phase"] for e in finished] == list(PHASES)
    assert {e["task_name"] for e in finished} == {"dream.run"}
    assert len({e["task_id"] for e in finished}) == 1
    done = [e for e in events if e["event"] == "run.finished"]
    assert len(done) == 1 and done[0]["task_name"] == "dream.run"
    assert done[0]["task_id"] == finished[0]["task_id"]


def test_beat_fires_gate_check_on_its_interval(cluster: Cluster) -> None:
    """One `celery beat` with DREAM_BEAT_INTERVAL_SECONDS=10 sends gate_check; the worker creates
    and finishes a run for the newly due scope without anyone else calling gate_check."""
    app = cluster.app
    add_sessions(app, 5, agent_id="celery-3", start=utcnow())
    started = time.monotonic()
    with open(cluster.tmp / "beat.log", "ab") as fh:
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "worker.celery_app", "beat",
             "-s", str(cluster.tmp / "beat-schedule"), "--pidfile=", "--loglevel", "INFO"],
            cwd=ROOT, env=cluster.env, stdout=fh, stderr=subprocess.STDOUT,
        )
    try:
        deadline = started + 45
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not runs:
            runs = list_runs(app, scope=Scope("celery-3"))
            time.sleep(0.3)
        assert runs, f"beat created no run in 45 s:\n{(cluster.tmp / 'beat.log').read_text()[-3000:]}"
        assert time.monotonic() - started >= 9  # not before the first interval elapsed
    finally:
        assert _stop(beat) == 0
    _assert_four_phases(_wait_terminal(app, runs[0]["id"]))


def _start_beat(cluster: Cluster, name: str) -> subprocess.Popen[bytes]:
    with open(cluster.tmp / f"{name}.log", "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "worker.celery_app", "beat",
             "-s", str(cluster.tmp / f"{name}-schedule"), "--pidfile=", "--loglevel", "INFO"],
            cwd=ROOT, env=cluster.env, stdout=fh, stderr=subprocess.STDOUT,
        )


def test_beat_applies_each_agents_idle_wait_staleness_and_volume(cluster: Cluster) -> None:
    """Under beat and a real worker, the agents table's gates decide: a busy scope (session a
    moment ago, idle wait 30 min) gets no run; a busy scope past its 1 h maximum staleness and a
    quiet scope with 2 new notes (volume trigger, no sessions) each get one; the worker's
    gate.checked log counts the waiting scope by its rule."""
    app = cluster.app
    now = utcnow()
    add_entities(app, {"kind": "agent", "id": "celery-busy", "gate_idle_minutes": 30},
                 {"kind": "agent", "id": "celery-stale", "gate_idle_minutes": 30,
                  "gate_max_stale_hours": 1},
                 {"kind": "agent", "id": "celery-volume", "gate_notes": 2})
    add_sessions(app, 5, agent_id="celery-busy", start=now)
    add_sessions(app, 1, agent_id="celery-stale", start=now - timedelta(hours=2))
    add_sessions(app, 4, agent_id="celery-stale", start=now)
    add_notes(app, {"agent_id": "celery-volume", "content": "Invoices go out on the 3rd"},
              {"agent_id": "celery-volume", "content": "The office closes at six"})
    beat = _start_beat(cluster, "gate-beat")
    try:
        deadline = time.monotonic() + 45
        due = [Scope("celery-stale"), Scope("celery-volume")]
        while time.monotonic() < deadline and not all(list_runs(app, scope=s) for s in due):
            time.sleep(0.3)
    finally:
        assert _stop(beat) == 0
    for scope in due:
        (run,) = list_runs(app, scope=scope)
        _assert_four_phases(_wait_terminal(app, run["id"]))
        assert run["trigger"] == "beat"
    assert list_runs(app, scope=Scope("celery-busy")) == []
    checks = [e for e in _events(cluster.log) if e["event"] == "gate.checked"
              and (e.get("rules") or {}).get("waiting_for_idle")]
    assert checks and checks[-1]["task_name"] == "dream.gate_check"


def test_celery_settings_follow_r7() -> None:
    """R7: late acks, prefetch 1, redelivery only after the hard limit, JSON only, the beat entry
    fires dream.gate_check every beat_interval_seconds (expiring after one), on the configured
    queue."""
    settings = Settings(broker_url="redis://example:6379/3", beat_interval_seconds=120,
                        task_time_limit=600, celery_queue="q1")
    conf = celery_config(settings)
    assert conf["task_acks_late"] is True and conf["task_reject_on_worker_lost"] is True
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["task_time_limit"] == 600 and conf["task_soft_time_limit"] < 600
    assert conf["broker_transport_options"]["visibility_timeout"] > conf["task_time_limit"]
    assert conf["task_serializer"] == "json" and conf["result_serializer"] == "json"
    assert conf["accept_content"] == ["json"]
    assert conf["task_default_queue"] == "q1"
    assert conf["beat_schedule"] == {
        "dream-gate-check": {"task": "dream.gate_check", "schedule": 120.0,
                             "options": {"expires": 120.0}}  # a check not taken in time: dropped
    }
    celery = make_celery(settings)
    assert celery.conf.broker_url == "redis://example:6379/3"
    assert celery.conf.beat_schedule["dream-gate-check"]["schedule"] == timedelta(seconds=120).total_seconds()


def test_phase_messages_carry_only_the_run_id() -> None:
    """R7: chain signatures are immutable and their only argument is the run id."""
    from worker import tasks
    from worker.celery_app import app as celery_app  # the app worker.tasks registers on

    for task in (tasks.consolidate, tasks.contradictions, tasks.prune, tasks.archive, tasks.finalize):
        sig = task.si("run-123")
        assert sig.immutable and tuple(sig.args) == ("run-123",) and not sig.kwargs
    assert {"dream.gate_check", "dream.finalize", *(f"dream.{p}" for p in PHASES)} <= set(
        celery_app.tasks
    )

"""A run's task that dies on every delivery (a crash in finalize, a worker killed each time) is
not redelivered forever: each delivery that died is counted on the run, the next one backs off,
and after DREAM_MAX_ATTEMPTS of them in a row the run is failed with the reason (real Redis, a
real prefork Celery worker, PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.test_crash_recovery import ROOT, _celery_broker, _enqueue, _wait
from tests.support.safety_store import SCOPE, check_invariants, mixed_store
from worker.app import App
from worker.reporting import run_tree
from worker.runs import service

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres]

ATTEMPTS = 2


def _crashing_worker(app: App, tmp: Path, queue: str, crash_at: str) -> subprocess.Popen[bytes]:
    """`celery -A worker.celery_app worker` (prefork, one child) dying at ``crash_at`` every
    time (no marker: every delivery dies)."""
    environ = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
               "DREAM_BROKER_URL": _celery_broker(), "DREAM_RESULT_BACKEND": _celery_broker(),
               "DREAM_CELERY_QUEUE": queue, "DREAM_LOG_FORMAT": "json",
               "DREAM_LLM_PROVIDER": "none", "DREAM_MAX_ATTEMPTS": str(ATTEMPTS),
               "DREAM_CRASH_AT": crash_at, "PYTHONUNBUFFERED": "1"}
    environ.pop("DREAM_CRASH_MARKER", None)
    with open(tmp / "worker.log", "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker", "--pool",
             "prefork", "-c", "1", "-Q", queue, "-n", f"{queue}@%h", "--without-gossip",
             "--without-mingle", "--loglevel", "INFO"],
            cwd=ROOT, env=environ, stdout=fh, stderr=subprocess.STDOUT)


def _forks(tmp: Path) -> int:
    return (tmp / "worker.log").read_text(errors="replace").count("celery.process_ready")


@pytest.mark.parametrize("tasks", ["phase", "run"])
def test_a_task_dying_on_every_delivery_fails_its_run_after_max_attempts(
        pg_app: App, tmp_path: Path, tasks: str) -> None:
    mixed_store(pg_app)
    queue = f"dream-deliveries-{uuid.uuid4().hex[:10]}"
    worker = _crashing_worker(pg_app, tmp_path, queue, "run.before_finalize")
    try:
        run_id = service.create_run(pg_app, SCOPE, force=True)
        assert run_id
        _enqueue(pg_app, run_id, queue, tasks)
        _wait(lambda: run_tree(pg_app, run_id)["status"] == "failed", 60,
              "the run to be failed")
        time.sleep(3)  # no further delivery: the worker's child is not killed again
        forks = _forks(tmp_path)
        time.sleep(3)
        assert _forks(tmp_path) == forks
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        import redis

        client = redis.Redis.from_url(_celery_broker())
        client.delete(queue)
        client.close()
    tree = run_tree(pg_app, run_id)
    assert tree["status"] == "failed"
    assert f"died {ATTEMPTS} times in a row" in (tree["error"] or ""), tree["error"]
    # One child for each delivery that died (the first child included), one more after them.
    assert forks <= ATTEMPTS + 2, forks
    assert service.create_run(pg_app, SCOPE, force=True) is not None  # the scope is free
    check_invariants(pg_app)

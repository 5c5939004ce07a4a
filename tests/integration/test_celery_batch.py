"""Batch pricing under a real Celery worker: a phase waiting on its provider batch re-schedules
its task instead of holding the worker, and picks the finished batch up on a later attempt.

One prefork worker process (``-c 1``), Redis, PostgreSQL+pgvector and the local stub model
(its /v1/files and /v1/batches endpoints) through the real `openai` client.
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
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import drop_postgres_app, make_postgres_app
from tests.llm.test_openai_batch import answer
from tests.support.factories import DARK_MODE_NOTES, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from tests.support.services import redis_url
from worker.app import App
from worker.celery_app import make_celery
from worker.config import Settings
from worker.domain.types import Scope
from worker.reporting import run_tree

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
REDIS_DB = 13  # test_celery.py uses 14


@dataclass
class Worker:
    app: App
    env: dict[str, str]
    settings: Settings
    stub: LLMStub
    log: Path


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    tmp = tmp_path_factory.mktemp("celery-batch")
    broker = redis_url().rsplit("/", 1)[0] + f"/{REDIS_DB}"
    queue = f"dream-batch-{uuid.uuid4().hex[:10]}"
    stub = LLMStub().start()
    stub.set_handler(answer)
    app = make_postgres_app()
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_BROKER_URL": broker, "DREAM_RESULT_BACKEND": broker, "DREAM_CELERY_QUEUE": queue,
           "DREAM_LLM_PROVIDER": "openai", "DREAM_LLM_BASE_URL": stub.url,
           "DREAM_LLM_API_KEY": "k", "DREAM_LLM_MODEL": "stub-model", "DREAM_LLM_BATCH": "true",
           "DREAM_LLM_BATCH_POLL": "1", "DREAM_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1",
           # A phase may ask the model as long as the soft time limit (2,700 s) leaves after
           # the call in flight (100 s) and its writes (60 s): a run task hands every phase
           # after its first to a new task (``run_task_hand_off`` = 0).
           "DREAM_LLM_PHASE_SECONDS": "2540"}
    settings = Settings(database_url=app.settings.database_url, broker_url=broker,
                        result_backend=broker, celery_queue=queue)
    log = tmp / "worker.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker", "--pool",
             "prefork", "-c", "1", "-Q", queue, "-n", f"{queue}@%h", "--without-gossip",
             "--without-mingle", "--loglevel", "INFO"],
            cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        yield Worker(app, env, settings, stub, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        import redis

        client = redis.Redis.from_url(broker)
        client.delete(queue)
        client.close()
        stub.stop()
        drop_postgres_app(app)


def _until(check: Any, timeout: float, what: str, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout}s:\n{log.read_text()[-3000:]}")


def _events(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        start = line.find("{")
        if start >= 0:
            try:
                out.append(json.loads(line[start:]))
            except json.JSONDecodeError:
                continue
    return [e for e in out if isinstance(e, dict)]


def _consolidate_step(app: App, run_id: str) -> dict[str, Any]:
    tree = run_tree(app, run_id)
    return next((s for s in tree["steps"] if s["phase"] == "consolidate"), {})


@pytest.mark.parametrize("tasks", ["phase", "run"])
def test_a_waiting_phase_frees_the_worker_and_completes_after_re_scheduling(
        worker: Worker, tasks: str) -> None:
    """The consolidate task (or the run's one task, ``DREAM_CELERY_TASKS=run``) submits its
    batch and re-schedules itself while the batch is in progress: the one worker process
    meanwhile answers another task. When the stub finishes the batch, a later attempt picks its
    answers up (no second batch) and the run completes with the cluster merged, its tokens
    counted."""
    app, stub = worker.app, worker.stub
    agent = f"celery-batch-{tasks}"
    add_notes(app, *[{"agent_id": agent, "id": f"cb-{tasks}-{k}", "type": "Preference",
                      "content": text, "created_at": days_ago(30 - k)}
                     for k, text in enumerate(DARK_MODE_NOTES)])
    stub.batches.batches.clear()
    stub.batches.polls = 10**6  # the batch stays in progress until released below
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("dream")), "run", "--agent", agent,
         "--force", "--via-celery"],
        cwd=ROOT, env={**worker.env, "DREAM_CELERY_TASKS": tasks}, capture_output=True,
        text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.strip().splitlines()[-1].split()[1]
    _until(lambda: stub.batches.batches, 60, "a batch submitted", worker.log)
    waiting = _until(lambda: (_consolidate_step(app, run_id).get("output") or {}).get("waiting"),
                     30, "the consolidate step waiting", worker.log)
    assert "waiting on batch" in waiting
    # The only worker process is free: another task runs while the batch is pending.
    client = make_celery(worker.settings)
    assert client.send_task("dream.gate_check").get(timeout=30) == []
    (batch,) = stub.batches.batches.values()
    # More looks than Celery's default retry limit (3): the wait is unbounded.
    _until(lambda: batch.retrieves >= 6, 40, "the batch polled by re-scheduled tasks", worker.log)
    stub.batches.polls = 0
    tree = _until(lambda: (t := run_tree(app, run_id))["status"] in ("succeeded", "partial",
                                                                     "failed") and t,
                  90, "the run finished", worker.log)
    assert tree["status"] == "succeeded", tree
    assert len(stub.batches.batches) == 1 and stub.chat_requests() == []
    step = _consolidate_step(app, run_id)
    assert step["status"] == "succeeded" and step["tokens_in"] > 0
    with app.uow() as uow:
        active = uow.notes.load_scope(Scope(agent), ("active",)).notes
    assert [n.content for n in active] == [DARK_MODE_NOTES[0]]
    task_names = {e.get("task_name") for e in _events(worker.log)
                  if e.get("event") == "phase.finished" and e.get("run_id") == run_id}
    assert task_names == ({"dream.run"} if tasks == "run"
                          else {"dream.consolidate", "dream.contradictions", "dream.prune",
                                "dream.archive"})
    handed = [e["next_phase"] for e in _events(worker.log)
              if e.get("event") == "run.handed_off" and e.get("run_id") == run_id]
    assert handed == (["contradictions", "prune", "archive"] if tasks == "run" else [])

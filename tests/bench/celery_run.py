"""Celery runs: a real ``celery worker -c N`` (prefork) on Redis executing every scope's run.

The worker is ``tests.bench.celery_worker`` (the real tasks, the bench model stand-in per
process). Wall = first enqueue → no run left queued or running; CPU = the worker processes'
user + system seconds (read from /proc before they exit).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from tests.bench import corpus
from tests.bench.inprocess import ALLOW_EVERY_NOTE, scopes_in, status_counts, step_summary
from tests.bench.stores import WORKDIR
from worker.domain.types import RunStatus

BENCH_BROKER = "redis://127.0.0.1:6379/14"


def run_celery(url: str, *, latency: float = 0.0, workers: int = 2,
               tasks: str = "phase") -> dict[str, Any]:
    """``tasks``: DREAM_CELERY_TASKS, how this process enqueues each run (a chain of phase
    tasks, or one run task)."""
    import psutil
    import redis

    redis.Redis.from_url(BENCH_BROKER).flushdb()
    env = dict(os.environ, DREAM_DATABASE_URL=url, DREAM_BROKER_URL=BENCH_BROKER,
               DREAM_LLM_PROVIDER="none", DREAM_BENCH_LATENCY=str(latency),
               DREAM_LOG_LEVEL="WARNING", DREAM_LOG_FORMAT="json", PYTHONPATH=str(Path.cwd()),
               DREAM_CELERY_TASKS=tasks)
    WORKDIR.mkdir(parents=True, exist_ok=True)
    log_path = WORKDIR / f"celery-{os.getpid()}.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.bench.celery_worker", "worker",
             "-c", str(workers), "-P", "prefork", "-Q", "dream", "--loglevel=WARNING",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            env=env, stdout=subprocess.DEVNULL, stderr=log_file, start_new_session=True)
        try:
            return _drive(url, proc, psutil.Process(proc.pid), workers, log_path, env)
        finally:
            # SIGTERM to the main process only: a warm shutdown lets each child finish its task.
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _drive(url: str, proc: Any, ps: Any, workers: int, log_path: Path,
           env: dict[str, str]) -> dict[str, Any]:
    os.environ.update(DREAM_DATABASE_URL=url, DREAM_BROKER_URL=BENCH_BROKER,
                      DREAM_LOG_LEVEL="WARNING", DREAM_CELERY_TASKS=env["DREAM_CELERY_TASKS"])
    from worker import celery_app as capp

    capp.app.conf.update(broker_url=BENCH_BROKER)
    capp._resources.clear()
    from worker.runs import service
    from worker.store.models import DreamRunRow
    from worker.tasks import enqueue_runs

    app = capp.resources()
    before = status_counts(app)
    scope_list = scopes_in(app)
    children = _wait_children(ps, workers)
    cpu0 = _cpu([ps, *children])
    loads: list[float] = []
    t0 = time.perf_counter()
    # Every run in one transaction and every message over one producer: the wall measures the
    # workers, not one driver transaction and one pooled producer per scope.
    runs = service.create_runs(app, scope_list, trigger="bench", force=True, clock=corpus.NOW,
                               allow_retire=ALLOW_EVERY_NOTE)
    run_ids = [run_id for run_id in runs.values() if run_id is not None]
    assert len(run_ids) == len(scope_list), "a scope already had an active run"
    enqueue_runs(run_ids)
    peak, cpu = 0.0, 0.0
    while True:
        with app.uow() as uow:
            open_runs = uow.session.scalar(
                select(func.count()).select_from(DreamRunRow).where(
                    DreamRunRow.status.in_([RunStatus.QUEUED.value, RunStatus.RUNNING.value])))
        peak = max(peak, max((c.memory_info().rss for c in children), default=0) / 2**20)
        cpu = max(cpu, _cpu([ps, *children]) - cpu0)
        loads.append(os.getloadavg()[0])
        if not open_runs:
            break
        if proc.poll() is not None:
            raise SystemExit(f"error: the celery worker exited; see {log_path}")
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    with app.uow() as uow:
        run_status = Counter(str(s) for s in uow.session.scalars(select(DreamRunRow.status)))
    result = {"wall": wall, "cpu": cpu, "before": before, "after": status_counts(app),
              "steps": step_summary(app), "rss_mb": peak, "scopes": len(scope_list),
              "workers": workers, "run_status": dict(run_status),
              "load": sum(loads) / len(loads), "load_max": max(loads)}
    app.dispose()
    capp._resources.clear()
    return result


def _wait_children(ps: Any, n: int, timeout: float = 60) -> list[Any]:
    end = time.time() + timeout
    while time.time() < end:
        children = ps.children(recursive=True)
        if len(children) >= n:
            time.sleep(1.0)  # let worker_process_init finish building the App
            return list(children)
        time.sleep(0.2)
    raise SystemExit("error: the celery worker processes did not start")


def _cpu(children: list[Any]) -> float:
    total = 0.0
    for c in children:
        try:
            t = c.cpu_times()
            total += t.user + t.system
        except Exception:  # a child that exited keeps its last reading in ``cpu``
            pass
    return total

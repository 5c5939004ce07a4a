"""Celery entry module for the benchmark: the real tasks, with the bench model stand-in per process.

``celery -A tests.bench.celery_worker worker -c 2`` — each forked child builds its App as the
real worker does, then swaps in a BenchLLM with ``DREAM_BENCH_LATENCY`` seconds per call.
"""

from __future__ import annotations

import os
from typing import Any

from celery import signals

import worker.tasks  # noqa: F401  (registers the tasks)
from tests.bench.bench_llm import BenchLLM
from worker.app import build_app
from worker.celery_app import _resources, app, resources
from worker.config import load_settings

__all__ = ["app"]


@signals.worker_process_init.connect
def _bench_llm(**_: Any) -> None:
    # Runs after worker.celery_app's own init handler (connected first, at import).
    latency = os.environ.get("DREAM_BENCH_LATENCY")
    if latency is None:
        return
    old = _resources.pop("app", None)
    if old is not None:
        old.dispose()
    _resources["app"] = build_app(load_settings(), llm=BenchLLM(float(latency)))
    resources()

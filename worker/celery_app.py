"""Celery app, beat schedule and per-process resources; no maintenance logic lives here."""

from __future__ import annotations

import os
import sys
from typing import Any

import structlog
from celery import Celery, signals

from worker.app import App, build_app, settle_process
from worker.config import ConfigError, Settings, load_settings
from worker.logging import configure_logging
from worker.telemetry import configure_telemetry

_resources: dict[str, App] = {}


def celery_config(settings: Settings) -> dict[str, Any]:
    """R7: a message is acknowledged only after its task finished, one at a time, and a lost
    worker's message is redelivered only after the hard time limit has surely passed."""
    return {
        "broker_url": settings.broker_url or "redis://127.0.0.1:6379/0",
        "result_backend": settings.result_backend,
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": settings.task_time_limit,
        "task_soft_time_limit": settings.task_soft_time_limit,
        "broker_transport_options": {"visibility_timeout": settings.task_time_limit * 2},
        "result_expires": 24 * 3600,
        "task_default_queue": settings.celery_queue,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        # structlog writes JSON lines to the real stderr; Celery must not wrap them as warnings.
        "worker_redirect_stdouts": False,
        "beat_schedule": {
            "dream-gate-check": {
                "task": "dream.gate_check",
                "schedule": float(settings.beat_interval_seconds),
                # A check no worker took within one interval is dropped unrun: after an outage
                # the stale checks would otherwise run back to back; the next beat's is current.
                "options": {"expires": float(settings.beat_interval_seconds)},
            }
        },
    }


def make_celery(settings: Settings | None = None) -> Celery:
    settings = settings or load_settings()
    celery = Celery("dream")
    celery.conf.update(celery_config(settings))
    celery.conf.update(include=["worker.tasks"])
    return celery


def _module_app() -> Celery:
    """The app ``celery -A worker.celery_app`` runs. A bad setting there is the one line every
    ``dream`` command prints for it (exit 8): Celery would print the traceback of this import,
    the line last. Imported by anything else, the error is raised as it is."""
    try:
        return make_celery()
    except ConfigError as exc:
        if not _celery_command():
            raise
        print(" ".join(f"error: {exc}".split()), file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


def _celery_command() -> bool:
    """Whether this process is Celery's command line (``celery …`` or ``python -m celery``)."""
    program = sys.argv[0] if sys.argv else ""
    return os.path.basename(program) == "celery" or program.endswith(
        os.path.join("celery", "__main__.py"))


app = _module_app()


def resources() -> App:
    """This process's App; created in worker_process_init (or lazily in a solo/threads pool)."""
    if "app" not in _resources:
        settings = load_settings()
        configure_logging(settings.log_format, settings.log_level)
        _resources["app"] = build_app(settings)
        configure_telemetry(_resources["app"])  # after the fork: spans and instrumentation
    return _resources["app"]


@signals.worker_process_init.connect
def _init_process(**_: Any) -> None:
    # A forked child must not reuse the parent's connections.
    _resources.pop("app", None)
    res = resources()
    settle_process()  # the collector tuned for runs (~3 % of a run's CPU went to it, frozen)
    structlog.get_logger(__name__).info(
        "celery.process_ready", pid=os.getpid(), database=res.engine.url.get_backend_name()
    )


@signals.worker_process_shutdown.connect
def _shutdown_process(**_: Any) -> None:
    res = _resources.pop("app", None)
    if res is not None:
        res.dispose()


@signals.task_prerun.connect
def _bind_task(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    structlog.contextvars.bind_contextvars(task_id=task_id, task_name=getattr(task, "name", None))


@signals.task_postrun.connect
def _clear_task(**_: Any) -> None:
    structlog.contextvars.clear_contextvars()

"""Thin Celery tasks: run ids in, services do the work; every task is safe to run twice."""

from __future__ import annotations

from celery import chain
from kombu import Connection
from kombu.exceptions import OperationalError as KombuOperationalError

from worker.app import App
from worker.celery_app import app, resources
from worker.runs import service


@app.task(name="dream.gate_check")
def gate_check() -> list[str]:
    result = service.gate_check(resources())
    handed_out = result.created + result.retried + result.requeued
    for run_id in handed_out:
        enqueue_run(run_id)
    return handed_out


def _phase(run_id: str, phase: str) -> str:
    return service.execute_phase(resources(), run_id, phase)


@app.task(name="dream.consolidate")
def consolidate(run_id: str) -> str:
    return _phase(run_id, "consolidate")


@app.task(name="dream.contradictions")
def contradictions(run_id: str) -> str:
    return _phase(run_id, "contradictions")


@app.task(name="dream.prune")
def prune(run_id: str) -> str:
    return _phase(run_id, "prune")


@app.task(name="dream.archive")
def archive(run_id: str) -> str:
    return _phase(run_id, "archive")


@app.task(name="dream.finalize")
def finalize(run_id: str) -> str:
    return service.finalize_run(resources(), run_id)


def enqueue_run(run_id: str, dream_app: App | None = None) -> None:
    """One chain per run; immutable signatures so no result is passed along, only the id.

    ``dream_app`` is the caller's App (the CLI passes its own); in a task, this process's."""
    dream_app = dream_app or resources()
    service.record_before(dream_app, run_id)
    try:
        chain(
            consolidate.si(run_id), contradictions.si(run_id), prune.si(run_id),
            archive.si(run_id), finalize.si(run_id),
        ).apply_async()
    except (KombuOperationalError, OSError) as exc:
        service.abandon_run(dream_app, run_id, f"could not enqueue: {type(exc).__name__}")
        raise service.BrokerUnavailable(_broker_message(exc)) from None


def check_broker(url: str | None = None, timeout: float = 5.0) -> None:
    """Raise BrokerUnavailable unless the broker (``url`` or this app's) answers; called before
    anything is written."""
    try:
        with (Connection(url) if url else app.connection_for_write()) as conn:
            # celery-types declares these int; kombu takes (fractional) seconds.
            conn.ensure_connection(max_retries=1, interval_start=0,
                                   interval_step=0.2, interval_max=0.5,  # type: ignore[arg-type]
                                   timeout=timeout)  # type: ignore[arg-type]
    except (KombuOperationalError, OSError) as exc:
        raise service.BrokerUnavailable(_broker_message(exc, url)) from None


def _broker_message(exc: Exception, url: str | None = None) -> str:
    where = (Connection(url) if url else app.connection_for_write()).as_uri()  # password masked
    return (f"cannot reach the broker at {where} ({str(exc).splitlines()[0][:120]}); check "
            "DREAM_BROKER_URL and that Redis is running")

"""Thin Celery tasks: run ids in, services do the work; every task is safe to run twice."""

from __future__ import annotations

from celery import chain

from worker.app import App
from worker.celery_app import app, resources
from worker.runs import service


@app.task(name="dream.gate_check")
def gate_check() -> list[str]:
    result = service.gate_check(resources())
    for run_id in result.created + result.retried:
        enqueue_run(run_id)
    return result.created + result.retried


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
    service.record_before(dream_app or resources(), run_id)
    chain(
        consolidate.si(run_id), contradictions.si(run_id), prune.si(run_id),
        archive.si(run_id), finalize.si(run_id),
    ).apply_async()

"""Run lifecycle on SQLite and PostgreSQL: one active run per scope, failing phases, gate check."""

from __future__ import annotations

import threading

import pytest

from tests.support.factories import NOW, add_notes, add_sessions
from worker.app import App
from worker.domain.types import PhaseReport, RunStatus, Scope, StepStatus
from worker.reporting import run_tree
from worker.runs import service

SCOPE = Scope("agent-1")


def test_two_concurrent_gate_checks_create_one_run(app: App) -> None:
    """R1: two concurrent gate checks and a duplicate beat tick create one run row."""
    add_sessions(app, 5)
    barrier = threading.Barrier(2)
    results: list[list[str]] = []

    def check() -> None:
        barrier.wait()
        results.append(service.gate_check(app, now=NOW).created)

    threads = [threading.Thread(target=check) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.append(service.gate_check(app, now=NOW).created)  # the duplicate tick
    created = [r for batch in results for r in batch]
    assert len(created) == 1
    with app.uow() as uow:
        assert len(uow.runs.list(SCOPE)) == 1


def test_create_run_refuses_second_active_run(app: App) -> None:
    """The partial unique index, not the caller, refuses a second queued run for a scope."""
    assert service.create_run(app, SCOPE) is not None
    assert service.create_run(app, SCOPE) is None
    assert service.create_run(app, Scope("agent-1", "u1")) is not None  # another scope is free


def test_failing_phase_does_not_stop_the_next(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """R6: consolidation raises; the other phases still run; steps show 1 failed, 3 succeeded."""
    from worker import phases

    real = phases.phase_registry()

    def boom(ctx: object, step_id: str) -> PhaseReport:
        raise RuntimeError("planted failure")

    def ok(name: str):  # type: ignore[no-untyped-def]
        return lambda ctx, step_id: PhaseReport(phase=name, status=StepStatus.SUCCEEDED.value)

    fake = {**real, "consolidate": boom, "contradictions": ok("contradictions"),
            "prune": ok("prune"), "archive": ok("archive")}
    monkeypatch.setattr(phases, "phase_registry", lambda: fake)
    add_notes(app, {"content": "a note"})
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id
    assert service.execute_run(app, run_id) == RunStatus.PARTIAL.value
    steps = run_tree(app, run_id)["steps"]
    assert [(s["phase"], s["status"]) for s in steps] == [
        ("consolidate", "failed"), ("contradictions", "succeeded"),
        ("prune", "succeeded"), ("archive", "succeeded"),
    ]
    assert "RuntimeError" in steps[0]["error"]


def test_executing_a_finished_run_again_changes_nothing(app: App) -> None:
    """R4 (lifecycle part): a second execution of a finished run is a no-op."""
    add_notes(app, {"content": "a note"})
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id
    first = service.execute_run(app, run_id)
    steps_before = len(run_tree(app, run_id)["steps"])
    assert service.execute_run(app, run_id) == first
    assert len(run_tree(app, run_id)["steps"]) == steps_before == 4


def test_gate_check_skips_scope_without_enough_sessions(app: App) -> None:
    """A scope with 4 sessions is not due; with 5 it is."""
    add_sessions(app, 4, agent_id="a-4")
    add_sessions(app, 5, agent_id="a-5")
    result = service.gate_check(app, now=NOW)
    assert len(result.created) == 1
    assert "4 of 5 sessions" in result.skipped[Scope("a-4").key]

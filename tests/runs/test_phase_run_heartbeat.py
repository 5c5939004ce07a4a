"""The lease heartbeat against a phase's finish, on SQLite and PostgreSQL: a beat can land after
the finish committed and before the heartbeat stops (on SQLite it waits on the held write's
lock for the whole held window, then runs right after the finish); it must not overwrite what
the finish recorded on the parent step (its counters, what finalize decides from)."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.phases.kit import Change, ChangeKind, Member, WriteTarget, open_write
from worker.runs import engine, lease, service
from worker.runs.context import PhaseContext
from worker.runs.outcome import PhaseOutcome
from worker.runs.steps import ChildStep

SCOPE = Scope("agent-1")


def _flagging(name: str) -> Any:
    def run(ctx: PhaseContext, step_id: str) -> PhaseReport:
        with ctx.uow() as uow:
            notes = [(n.id, n.version) for n in uow.notes.load_scope(ctx.scope).notes]
        with open_write(WriteTarget.of(ctx, name, step_id)) as w:
            w.apply([Change(kind=ChangeKind.ANNOTATE, name=f"flag {i}", members=(Member(i, v),),
                            flags=(name,), reason="test") for i, v in notes])
            w.step(ChildStep(name=f"{name} child", status=StepStatus.SUCCEEDED.value))
        return PhaseReport(phase=name, status=StepStatus.SUCCEEDED.value,
                           counters={"flagged": len(notes)})
    return run


class _LateBeat(lease.LeaseHeartbeat):
    """A heartbeat whose last beat lands after the phase finished, before the heartbeat stops
    (the interleaving a beat waiting on SQLite's write lock through the held write gets)."""

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None and self.epoch is not None:
            self.renew()
        super().__exit__(exc_type, exc, tb)


def test_a_beat_after_the_finish_keeps_the_phase_counters(app: App,
                                                           monkeypatch: Any) -> None:
    """The beat records usage on a running step only: each phase's finished step keeps its
    counters (an unguarded beat left ``{"usage": ...}`` alone on a succeeded step)."""
    add_notes(app, {"content": "a note"}, {"content": "another note"})
    monkeypatch.setattr("worker.runs.phase_run.LeaseHeartbeat", _LateBeat)
    snap = service.create_claimed_run(app, SCOPE, force=True)
    assert snap is not None
    registry = {p: _flagging(p) for p in PHASES}
    assert engine.execute_run(app, snap, registry) == RunStatus.SUCCEEDED.value
    with app.uow() as uow:
        parents = {s.phase: s for s in uow.runs.steps(snap.run_id) if s.parent_id is None}
    assert {p: s.status for p, s in parents.items()} == {
        p: StepStatus.SUCCEEDED.value for p in PHASES}
    assert {p: (s.output or {}).get("flagged") for p, s in parents.items()} == {
        p: 2 for p in PHASES}


def test_r27_a_beat_after_the_finish_does_not_hide_deferred_work_from_finalize(
        app: App, monkeypatch: Any) -> None:
    """Under Celery finalize decides from the steps it reads: the late beat must leave the
    phase's budget-deferred work on its step, so the run is blocked, not succeeded."""
    add_notes(app, {"content": "a note"})
    monkeypatch.setattr("worker.runs.phase_run.LeaseHeartbeat", _LateBeat)
    flag = _flagging("consolidate")

    def deferring(ctx: PhaseContext, step_id: str) -> PhaseReport:
        report = flag(ctx, step_id)
        return PhaseReport(phase=report.phase, status=report.status,
                           counters={**report.counters, "clusters_deferred": 1},
                           reason="budget exhausted: 3 of 3 model calls")

    registry = {**{p: _flagging(p) for p in PHASES}, "consolidate": deferring}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id
    for phase in PHASES:  # what Celery does: one task per phase, the last one finalizing
        service.execute_phase(app, run_id, phase, registry)
    assert service.finalize_run(app, run_id) == RunStatus.BLOCKED.value


def test_a_beat_after_a_waiting_finish_keeps_the_step_waiting_and_resumable(
        app: App, monkeypatch: Any) -> None:
    """A phase left waiting on a provider batch keeps its step running: a beat landing after
    that finish must leave what it recorded (``waiting``, ``retry_after``, its counters), only
    its usage brought up to date, so the re-scheduled Celery task resumes the step (before: the
    beat replaced the output with its usage, the step no longer read as waiting, and the next
    task found its own step id taken: busy, the run stuck until its lease lapsed)."""
    add_notes(app, {"content": "a note"})
    monkeypatch.setattr("worker.runs.phase_run.LeaseHeartbeat", _LateBeat)
    answers = iter([PhaseOutcome.WAITING.value, StepStatus.SUCCEEDED.value])

    def batched(ctx: PhaseContext, step_id: str) -> PhaseReport:
        return PhaseReport(phase="consolidate", status=next(answers),
                           counters={"retry_after": 42, "clusters_found": 3},
                           reason="waiting on batch b-1")

    registry = {**{p: _flagging(p) for p in PHASES}, "consolidate": batched}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id
    assert service.execute_phase(app, run_id, "consolidate", registry).outcome \
        is PhaseOutcome.WAITING
    with app.uow() as uow:
        (step,) = [s for s in uow.runs.steps(run_id) if s.parent_id is None]
    assert step.status == StepStatus.RUNNING.value and step.output is not None
    assert {k: step.output.get(k) for k in ("waiting", "retry_after", "clusters_found")} == {
        "waiting": "waiting on batch b-1", "retry_after": 42, "clusters_found": 3}
    assert step.output["usage"] == {"calls": 0, "tokens": 0, "tokens_in": 0, "tokens_out": 0}
    assert service.execute_phase(app, run_id, "consolidate", registry).outcome \
        is PhaseOutcome.SUCCEEDED
    for phase in PHASES[1:]:
        service.execute_phase(app, run_id, phase, registry)
    assert service.finalize_run(app, run_id) == RunStatus.SUCCEEDED.value


def test_r15_a_beat_on_a_waiting_step_counts_the_earlier_phase_once(
        app: App, monkeypatch: Any) -> None:
    """Under Celery, a beat landing on the second phase's step after it was left waiting on a
    provider batch records that phase's own usage (the batch's one call), not the run's: the
    re-scheduled task's budget starts at 3 calls / 200 tokens (before: the beat wrote the run's
    3 calls / 200 tokens on the step, the first phase was counted again, 5 / 400)."""
    add_notes(app, {"content": "a note"})
    monkeypatch.setattr("worker.runs.phase_run.LeaseHeartbeat", _LateBeat)

    def asking(ctx: PhaseContext, step_id: str) -> PhaseReport:
        for _ in range(2):
            assert ctx.budget.try_reserve_call()
            ctx.budget.charge(100)
        return PhaseReport(phase="consolidate", status=StepStatus.SUCCEEDED.value,
                           tokens_in=200)

    seen: list[tuple[int, int]] = []

    def batched(ctx: PhaseContext, step_id: str) -> PhaseReport:
        seen.append(ctx.budget.spent_by_direction()[:2])
        if len(seen) == 1:
            assert ctx.budget.try_reserve_call()  # the batch's one request, submitted
            return PhaseReport(phase="contradictions", status=PhaseOutcome.WAITING.value,
                               counters={"retry_after": 1}, reason="waiting on batch b-1")
        ctx.budget.charge(50)
        return PhaseReport(phase="contradictions", status=StepStatus.SUCCEEDED.value,
                           tokens_in=50)

    registry = {**{p: _flagging(p) for p in PHASES}, "consolidate": asking,
                "contradictions": batched}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id
    assert service.execute_phase(app, run_id, "consolidate", registry).outcome \
        is PhaseOutcome.SUCCEEDED
    assert service.execute_phase(app, run_id, "contradictions", registry).outcome \
        is PhaseOutcome.WAITING
    assert service.execute_phase(app, run_id, "contradictions", registry).outcome \
        is PhaseOutcome.SUCCEEDED
    assert seen == [(2, 200), (3, 200)]

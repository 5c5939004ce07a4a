"""A phase's finish goes in with the phase's own write (its children and its parent step in
one fenced statement, one commit), on SQLite and PostgreSQL: the statements and commits a run
costs, a finish under a lost lease, a phase failing after its write, a phase writing again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.factories import add_notes
from tests.support.sql import recorded_commits, recorded_statements
from worker.app import App
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.phases.kit import Change, ChangeKind, Member, WriteTarget, open_write
from worker.runs import engine, service
from worker.runs.context import Budget, PhaseContext, Registry
from worker.runs.outcome import PhaseOutcome
from worker.runs.phase_run import Execution, run_phase
from worker.runs.steps import ChildStep

SCOPE = Scope("agent-1")
Phase = Callable[[PhaseContext, str], PhaseReport]


def _writing(name: str, before: Callable[[PhaseContext], None] | None = None,
             after: Callable[[PhaseContext], None] | None = None) -> Phase:
    """A phase whose one write flags every active note and records one child step; ``before``
    runs ahead of the write, ``after`` between the write and the report."""
    def run(ctx: PhaseContext, step_id: str) -> PhaseReport:
        if before is not None:
            before(ctx)
        with ctx.uow() as uow:
            notes = [(n.id, n.version) for n in uow.notes.load_scope(ctx.scope).notes]
        with open_write(WriteTarget.of(ctx, name, step_id)) as w:
            w.apply([Change(kind=ChangeKind.ANNOTATE, name=f"flag {i}", members=(Member(i, v),),
                            flags=(name,), reason="test") for i, v in notes])
            w.step(ChildStep(name=f"{name} child", status=StepStatus.SUCCEEDED.value))
        if after is not None:
            after(ctx)
        return PhaseReport(phase=name, status=StepStatus.SUCCEEDED.value,
                           counters={"flagged": len(notes)})
    return run


WRITING: Registry = {p: _writing(p) for p in PHASES}


def _counting(app: App, work: Callable[[], Any]) -> tuple[Any, list[str], int]:
    """What ``work`` returns, every statement it executed (whitespace folded), its commits of
    transactions that wrote (on PostgreSQL a read-only unit also ends with COMMIT); this
    thread's only (a lease beat of the process is not the work's)."""
    with recorded_statements(app) as statements, recorded_commits(app) as commits:
        result = work()
    return result, statements, sum(commits)


def _engine_part(statements: list[str]) -> list[str]:
    """The statements that are the engine's: on the run row, on steps, the scope's counts."""
    return [s for s in statements if " dream_runs " in s.split(" WHERE ")[0]
            or s.startswith(("INSERT INTO run_steps", "UPDATE run_steps"))
            or "count(*)" in s]


def _steps(app: App, run_id: str) -> list[Any]:
    with app.uow() as uow:
        return uow.runs.steps(run_id)


def _flags(app: App) -> list[list[str]]:
    with app.uow() as uow:
        return sorted(list(n.flags or []) for n in uow.notes.load_scope(SCOPE).notes)


def test_a_phase_that_writes_costs_the_engine_no_statement_and_no_commit(app: App) -> None:
    """In-process, a phase's one write is its only commit, and its child steps go in with its
    parent step's finish (one fenced INSERT … ON CONFLICT, the write's last statement): the
    engine adds no statement and no commit per phase; around the phases, the run's insert
    (counting the notes before) with its parent steps (2 statements, 1 commit) and the final
    update (counting the notes after; 1 statement, 1 commit). Every parent step ends succeeded
    with its counters and its duration, every child step is there, under its parent."""
    add_notes(app, {"content": "a note"}, {"content": "another note"})
    snap, created, created_commits = _counting(
        app, lambda: service.create_claimed_run(app, SCOPE, force=True))
    assert snap is not None and (len(created), created_commits) == (2, 1), created
    status, statements, commits = _counting(app, lambda: engine.execute_run(app, snap, WRITING))
    assert status == RunStatus.SUCCEEDED.value
    assert commits == len(PHASES) + 1
    ours = _engine_part(statements)
    finishes, rest = ours[:len(PHASES)], ours[len(PHASES):]
    assert all(s.startswith("INSERT INTO run_steps") and "ON CONFLICT" in s
               for s in finishes), finishes
    assert [s.split(" ")[0] for s in rest] == ["UPDATE"], rest  # counting the notes after
    steps = _steps(app, snap.run_id)
    parents = {s.phase: s for s in steps if s.parent_id is None}
    assert {p: (s.status, (s.output or {}).get("flagged")) for p, s in parents.items()} == {
        p: (StepStatus.SUCCEEDED.value, 2) for p in PHASES}
    assert all(s.finished_at is not None and s.duration_ms is not None
               for s in parents.values())
    children = [(s.phase, s.name, s.parent_id) for s in steps if s.parent_id is not None]
    assert sorted(children) == sorted((p, f"{p} child", parents[p].id) for p in PHASES)
    assert _flags(app) == [sorted(PHASES)] * 2


def test_a_finish_under_a_lost_lease_writes_nothing_of_the_phase(app: App) -> None:
    """The run is cancelled while its first phase plans: the phase's write runs but its fence
    (the steps and the finish, one statement) finds the lease gone, so the notes are not
    flagged, no child step is inserted, the parent step stays as the cancel left it (not the
    phase's finish), and the run stops there (no later phase starts)."""
    add_notes(app, {"content": "a note"})
    snap = service.create_claimed_run(app, SCOPE, force=True)
    assert snap is not None

    left: list[tuple[str, Any]] = []

    def cancel(ctx: PhaseContext) -> None:
        service.cancel_run(app, ctx.run_id)
        left.extend((s.status, s.output) for s in _steps(app, ctx.run_id)
                    if s.phase == "consolidate")

    ran: list[str] = []

    def contradictions(ctx: PhaseContext, step_id: str) -> PhaseReport:
        ran.append("contradictions")
        return PhaseReport("contradictions", StepStatus.NO_ITEMS.value)

    registry = {**WRITING, "consolidate": _writing("consolidate", before=cancel),
                "contradictions": contradictions}
    assert engine.execute_run(app, snap, registry) == RunStatus.CANCELLED.value
    assert ran == []
    assert _flags(app) == [[]]
    steps = _steps(app, snap.run_id)
    assert [s for s in steps if s.parent_id is not None] == []
    assert [(s.status, s.output) for s in steps if s.phase == "consolidate"] == left
    assert "flagged" not in (left[0][1] or {})


def test_a_phase_failing_after_its_write_keeps_the_write_and_records_the_failure(
    app: App,
) -> None:
    """R6: a phase that raises once its write is done has that write committed (as when the
    write committed on its own) with its parent step failed, and the next phase runs."""
    add_notes(app, {"content": "a note"})
    snap = service.create_claimed_run(app, SCOPE, force=True)
    assert snap is not None

    def boom(ctx: PhaseContext) -> None:
        raise RuntimeError("report failed")

    registry = {**WRITING, "consolidate": _writing("consolidate", after=boom)}
    assert engine.execute_run(app, snap, registry) == RunStatus.PARTIAL.value
    parents = {s.phase: s for s in _steps(app, snap.run_id) if s.parent_id is None}
    assert parents["consolidate"].status == StepStatus.FAILED.value
    assert "RuntimeError" in (parents["consolidate"].error or "")
    assert parents["contradictions"].status == StepStatus.SUCCEEDED.value
    assert _flags(app) == [sorted(PHASES)]


def test_a_transaction_after_the_write_commits_the_write_first(app: App) -> None:
    """A phase that opens another transaction after its write (proposals do; here any unit of
    work of the thread) finds the write committed (on SQLite it would otherwise wait on the
    held write lock, elsewhere miss it): that phase's finish is then a statement of its own,
    and the run is what it would be anyway."""
    add_notes(app, {"content": "a note"})
    snap = service.create_claimed_run(app, SCOPE, force=True)
    assert snap is not None
    seen: list[list[str]] = []

    def read_back(ctx: PhaseContext) -> None:
        with app.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            seen.append([s.name for s in uow.runs.steps(ctx.run_id) if s.parent_id is not None])

    registry = {**WRITING, "prune": _writing("prune", after=read_back)}
    run = Execution(snap, Budget(), registry)
    outcomes = [run_phase(app, run, p) for p in PHASES]
    assert outcomes == [PhaseOutcome.SUCCEEDED] * len(PHASES)
    assert seen == [["consolidate child", "contradictions child", "prune child"]]
    parents = [s.status for s in _steps(app, snap.run_id) if s.parent_id is None]
    assert parents == [StepStatus.SUCCEEDED.value] * len(PHASES)


def test_the_lease_fence_reads_the_run_at_most_once_per_interval(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before each model call the budget asks whether the run still holds its lease (an erasure
    moves it on). The phase's start counts as the first answer, and the read is made at most
    once per FENCE_SECONDS: a fast model's fan-out adds no statement to the phase, a slow one
    a read a second; once the lease moved on, the next read says so."""
    import worker.runs.lease as lease

    add_notes(app, {"id": "n1", "content": "A fact"})
    run = service.create_claimed_run(app, SCOPE, trigger="test", force=True)
    assert run is not None and run.epoch is not None
    clock = [1000.0]
    monkeypatch.setattr("worker.runs.lease.time.monotonic", lambda: clock[0])
    fence = lease.lease_fence(app, run.run_id, run.epoch)
    with recorded_statements(app) as statements:
        assert all(fence() for _ in range(50))  # a fast fan-out, within the first second
    assert statements == []
    clock[0] += lease.FENCE_SECONDS
    with recorded_statements(app) as statements:
        assert fence() and fence()
    assert len(statements) == 1
    service.cancel_run(app, run.run_id)
    assert fence()  # the answer stands until the interval has passed …
    clock[0] += lease.FENCE_SECONDS
    assert not fence()  # … then the moved lease is seen

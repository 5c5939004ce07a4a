"""The run engine: a run id in, its phases in order, its final status out.

Two entry points, one path:

- ``execute_run`` (CLI, API thread, tests): claims the run (or reads it, when another executor
  holds it) once, runs every phase from that one snapshot, carrying the scope's loaded notes
  from phase to phase (``RunCarry``), then finalizes from the same snapshot.
- ``execute_phase`` (one Celery task per phase, ``worker/tasks.py``): reads the snapshot once,
  claims the run if nobody has, runs that one phase.

Either way a phase runs through ``phase_run.run_phase`` and ends as a ``PhaseOutcome``; the
registry of phase functions is handed in by the caller (``service`` passes the real one).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from worker import telemetry
from worker.app import App
from worker.domain.types import PHASES, RunStatus
from worker.runs.context import Budget, Registry, RunCarry
from worker.runs.finalize import finalize, finalize_run
from worker.runs.lease import LeaseHeartbeat
from worker.runs.outcome import PhaseOutcome
from worker.runs.phase_run import Execution, run_phase
from worker.runs.snapshot import RunSnapshot, claim, read_snapshot
from worker.safety.crashpoints import crashpoint

UNCLAIMED = (RunStatus.QUEUED.value, RunStatus.INTERRUPTED.value)


@dataclass(frozen=True)
class PhaseResult:
    outcome: PhaseOutcome
    retry_after: float | None = None  # WAITING only: seconds until the phase is looked at again


def execute_run(app: App, run_id: str, registry: Registry,
                on_phase: Callable[[str, PhaseOutcome], None] | None = None) -> str:
    """The whole run in this process: every phase in order, then finalize; the final status.

    ``on_phase`` is told each phase's outcome as it ends (the benchmark times phases with it)."""
    with telemetry.run_span(run_id) as span:
        crashpoint("run.before_claim")  # R30: a creator killed here leaves a queued run behind
        snap = claim(app, run_id) or read_snapshot(app, run_id)
        if snap.epoch is None:  # finished, cancelled, or never claimable: nothing to do
            span.set(dream__run__status=snap.status)
            return snap.status
        run = Execution(snap, Budget.for_run(app.settings.budget, snap.usage.calls,
                                             snap.usage.tokens), registry, carry=RunCarry())
        stopped = False
        for phase in PHASES:
            outcome = _run_until_settled(app, run, phase)
            if on_phase is not None:
                on_phase(phase, outcome)
            if outcome.stops_run:
                stopped = True  # another executor holds this run (or it was cancelled)
                break
        # After a stop the snapshot is stale: decide on a fresh read.
        status = finalize_run(app, run_id) if stopped else finalize(app, snap)
        span.set(dream__run__status=status)
        return status


def _run_until_settled(app: App, run: Execution, phase: str) -> PhaseOutcome:
    """The phase, again and again while it is WAITING on a provider batch (in-process runs
    poll; the lease is kept alive while they wait)."""
    outcome = run_phase(app, run, phase)
    while outcome is PhaseOutcome.WAITING:
        with LeaseHeartbeat(app, run.snap.run_id, run.snap.epoch):
            time.sleep(run.retry_after)
        outcome = run_phase(app, run, phase)
    return outcome


def execute_phase(app: App, run_id: str, phase: str, registry: Registry) -> PhaseResult:
    """One phase of a run (a Celery task): one snapshot read, a claim if the run is unclaimed;
    its failure is recorded as a failed step and this returns normally (R6)."""
    snap = _snapshot_for_phase(app, run_id)
    if snap is None:
        return PhaseResult(PhaseOutcome.NOT_CLAIMED)
    run = Execution(snap, Budget.for_run(app.settings.budget, snap.usage.calls,
                                         snap.usage.tokens), registry)
    outcome = run_phase(app, run, phase)
    return PhaseResult(outcome, run.retry_after if outcome is PhaseOutcome.WAITING else None)


def _snapshot_for_phase(app: App, run_id: str) -> RunSnapshot | None:
    snap = read_snapshot(app, run_id)
    if snap.status in UNCLAIMED:
        return claim(app, run_id)
    return snap

"""The run engine: a run id in, its phases in order, its final status out.

Two entry points, one path:

- ``execute_run`` (CLI, API thread, tests): claims the run, opening every phase's parent step
  (or is handed the snapshot of a run created claimed, or reads it when another executor holds
  it) once, runs every phase from that one snapshot, carrying the scope's loaded notes from
  phase to phase (``RunCarry``), then finalizes from the same snapshot and the steps it wrote.
- ``execute_phase`` (one Celery task per phase, ``worker/tasks.py``): reads the snapshot once,
  claims the run if nobody has, runs that one phase; the last phase's task finalizes.

A Celery run task (``DREAM_CELERY_TASKS=run``) calls ``execute_run_once`` with ``poll=False``: the same path, except that a phase WAITING on a provider batch ends the call
(``RunResult.retry_after``) so the task re-schedules itself instead of holding the worker; the
next call resumes the run at that phase.

Either way a phase runs through ``phase_run.run_phase`` and ends as a ``PhaseOutcome``; the
registry of phase functions is handed in by the caller (``service`` passes the real one).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from sqlalchemy.exc import SQLAlchemyError

from worker import telemetry
from worker.app import App
from worker.domain.types import PHASES, RunStatus
from worker.runs.context import Budget, Registry, RunCarry
from worker.runs.finalize import finalize, finalize_run
from worker.runs.interruption import interrupted_by_database
from worker.runs.lease import LeaseHeartbeat, executing, give_back
from worker.runs.outcome import TAKEN_OVER, PhaseOutcome
from worker.runs.phase_run import Execution, run_phase
from worker.runs.snapshot import RunSnapshot, claim, read_snapshot
from worker.runs.stops import deliver_held_stops, signal_of, stops_held
from worker.safety.crashpoints import crashpoint

log = structlog.get_logger(__name__)

UNCLAIMED = (RunStatus.QUEUED.value, RunStatus.INTERRUPTED.value)


@dataclass(frozen=True)
class RunResult:
    status: str  # the run's status when the call returned
    retry_after: float | None = None  # a phase is WAITING (``poll=False``): look again then
    hand_off: bool = False  # ``hand_off_after`` passed: the rest of the run goes on elsewhere
    # This executor lost the run to another one (a claim after its lease lapsed, an executor
    # holding its phase): ``status`` is what that executor made of it, not this one's result.
    taken_over: bool = False


# The statuses of a run another executor holds or finished (not cancelled, interrupted or
# queued again by the gate check: those say themselves why this executor stopped).
_ELSEWHERE = frozenset({RunStatus.RUNNING.value, RunStatus.SUCCEEDED.value,
                        RunStatus.PARTIAL.value, RunStatus.FAILED.value,
                        RunStatus.BLOCKED.value})


@dataclass(frozen=True)
class PhaseResult:
    outcome: PhaseOutcome
    retry_after: float | None = None  # WAITING only: seconds until the phase is looked at again
    status: str | None = None  # the last phase's task: the run's status after it finalized


def execute_run(app: App, run: str | RunSnapshot, registry: Registry,
                on_phase: Callable[[str, PhaseOutcome], None] | None = None) -> str:
    """The whole run in this process: every phase in order, then finalize; the final status.

    ``run`` is a run id (claimed here), or the snapshot of a run created already claimed
    (``create_claimed_run``). ``on_phase`` is told each phase's outcome as it ends (the
    benchmark times phases with it). A phase WAITING on a provider batch is polled.
    ``TAKEN_OVER`` when this executor lost the run to another one before it ended: the run's
    status, whatever it is, is that executor's to report."""
    result = execute_run_once(app, run, registry, on_phase)
    return TAKEN_OVER if result.taken_over else result.status


def execute_run_once(app: App, run: str | RunSnapshot, registry: Registry,
                     on_phase: Callable[[str, PhaseOutcome], None] | None = None, *,
                     poll: bool = True, hand_off_after: float | None = None) -> RunResult:
    """``execute_run``; with ``poll=False`` a WAITING phase ends the call unfinalized (the run
    stays running under this lease, its waiting step open) and says when to call again. With
    ``hand_off_after`` seconds, a phase is not started once the call has run one phase and
    that long has passed (``RunResult.hand_off``): a Celery run task goes on in a new task
    rather than let its time limit cut a phase."""
    run_id = run if isinstance(run, str) else run.run_id
    # Held from the claim (or from the caller's creation of the run) until the give-back
    # below covers the run: a stop in between would leave it running (worker.runs.stops).
    with telemetry.run_span(run_id) as span, stops_held():
        if isinstance(run, str):
            crashpoint("run.before_claim")  # R30: a creator killed here leaves a queued run
            # Not polled (a Celery run task), the claim opens the first phase's step only and
            # each finish the next one's, for a phase this call runs at once: a resumed call
            # cannot tell steps left open before from a duplicate executor's (R4).
            snap = claim(app, run_id, opening=True, first_only=not poll) \
                or read_snapshot(app, run_id)
        else:
            # R30: a creator killed here leaves a running run whose lease lapses (recovered).
            crashpoint("run.after_create")
            snap = run
        if snap.epoch is None:  # finished, cancelled, or never claimable: nothing to do
            span.set(dream__run__status=snap.status)
            return RunResult(snap.status)
        deadline = None if hand_off_after is None else time.monotonic() + hand_off_after
        epoch = snap.epoch
        try:
            deliver_held_stops()
            with executing(run_id, lambda why: give_back(app, run_id, epoch, why)):
                result = _execute_all(app, snap, registry, on_phase, poll, deadline)
        except RunStopped:
            raise
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM under a `dream` command
            name = signal_of(stop)
            given = give_back(app, run_id, epoch, f"stopped by {name}; the run is "
                              "resumed by `dream run --due` or the next gate check")
            raise RunStopped(run_id, name, given) from stop
        except SQLAlchemyError as exc:  # busy or lost: interrupted, not failed
            if (lost := interrupted_by_database(app, run_id, epoch, snap.attempts, exc)) is None:
                raise
            raise lost from exc
        span.set(dream__run__status=result.status)
        return result


class RunStopped(KeyboardInterrupt):
    """An in-process run stopped by a signal: ``given_back`` when it is interrupted now
    (resumable at once), False when it had moved on (cancelled, taken over)."""

    def __init__(self, run_id: str, signal_name: str, given_back: bool) -> None:
        super().__init__(run_id, signal_name)
        self.run_id, self.signal_name, self.given_back = run_id, signal_name, given_back


def _execute_all(app: App, snap: RunSnapshot, registry: Registry,
                 on_phase: Callable[[str, PhaseOutcome], None] | None,
                 poll: bool, deadline: float | None = None) -> RunResult:
    # A run with no step before this attempt: every step it gets is written here, so finalize
    # can decide from what this process wrote (no read of the steps).
    fresh = snap.attempts == 1 and not snap.done and not snap.waiting
    run = Execution(snap, Budget.for_run(app.settings.budget, snap.usage.calls,
                                         snap.usage.tokens), registry, carry=RunCarry(fresh=fresh),
                    written=list(snap.opened.values()) if fresh else None,
                    open_ahead=not poll, deadline=deadline)
    ran = False
    for phase in PHASES:
        if ran and deadline is not None and phase not in snap.done and (
                phase not in snap.opened and time.monotonic() > deadline):
            log.info("run.handed_off", run_id=snap.run_id, next_phase=phase)
            return RunResult(snap.status, hand_off=True)
        outcome = _run_until_settled(app, run, phase, poll)
        ran = ran or outcome is not PhaseOutcome.ALREADY_DONE
        if on_phase is not None:
            on_phase(phase, outcome)
        if outcome is PhaseOutcome.WAITING:  # not polled: the caller comes back later
            return RunResult(snap.status, run.retry_after)
        if outcome.stops_run:  # another executor holds this run (or it was cancelled):
            status = finalize_run(app, snap.run_id)  # stale snapshot: decide on a read
            return RunResult(status, taken_over=status in _ELSEWHERE)
    return RunResult(finalize(app, snap, run.written))


def _run_until_settled(app: App, run: Execution, phase: str, poll: bool) -> PhaseOutcome:
    """The phase, again and again while it is WAITING on a provider batch (``poll``: in-process
    runs poll; the lease is kept alive while they wait)."""
    outcome = run_phase(app, run, phase)
    while poll and outcome is PhaseOutcome.WAITING:
        with LeaseHeartbeat(app, run.snap.run_id, run.snap.epoch):
            time.sleep(run.retry_after)
        outcome = run_phase(app, run, phase)
    return outcome


def execute_phase(app: App, run_id: str, phase: str, registry: Registry) -> PhaseResult:
    """One phase of a run (a Celery task): one snapshot read, a claim if the run is unclaimed;
    its failure is recorded as a failed step and this returns normally (R6). The last phase's
    task then finalizes the run (no task of its own: from this snapshot and one read of the
    steps, or from a fresh read when this executor did not hold the run)."""
    last = phase == PHASES[-1]
    snap = _snapshot_for_phase(app, run_id, first=phase == PHASES[0])
    if snap is None:
        return PhaseResult(PhaseOutcome.NOT_CLAIMED,
                           status=finalize_run(app, run_id) if last else None)
    run = Execution(snap, Budget.for_run(app.settings.budget, snap.usage.calls,
                                         snap.usage.tokens), registry)
    try:
        outcome = run_phase(app, run, phase)
    except SQLAlchemyError as exc:  # busy or lost: interrupted, not failed (the task retries)
        lost = None if snap.epoch is None else interrupted_by_database(
            app, run_id, snap.epoch, snap.attempts, exc)
        if lost is None:
            raise
        raise lost from exc
    if outcome is PhaseOutcome.WAITING:
        return PhaseResult(outcome, run.retry_after)
    if not last:
        return PhaseResult(outcome)
    return PhaseResult(outcome, status=finalize_run(app, run_id) if outcome.stops_run
                       else finalize(app, snap))


def _snapshot_for_phase(app: App, run_id: str, *, first: bool) -> RunSnapshot | None:
    """The run to execute a phase of: claimed here if nobody has (the first phase's task finds
    its run queued: the claim alone, one transaction instead of a read and then the claim)."""
    if first:
        claimed = claim(app, run_id)
        if claimed is not None:
            return claimed
    snap = read_snapshot(app, run_id)
    if snap.status in UNCLAIMED:
        return claim(app, run_id)
    return snap

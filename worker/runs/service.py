"""Run requests shared by the CLI, Celery tasks and the API: create, cancel, look up.

The database is the source of truth: a run row is created only through the unique partial
index (R1), claimed with a fencing epoch, and each phase is recorded as a parent step so that
re-executing a finished phase is a no-op (R4). Executing a run: ``worker.runs.engine`` (this
module hands it the phase registry); the gate check: ``worker.runs.scheduling``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from worker.app import App
from worker.clock import utcnow
from worker.config import Settings
from worker.config_checks import phase_seconds
from worker.domain.limits import REASON_MAX, line_problem, stored_ident_problem, visible_problem
from worker.domain.types import RunStatus, Scope
from worker.errors import BrokerUnavailable, InvalidRun, RunError, RunNotFound, UnknownScope
from worker.runs import engine
from worker.runs.batches import RunBatchRelease, release_run_batches
from worker.runs.context import Registry
from worker.runs.create import busy_message, create_claimed_run, create_run, create_runs
from worker.runs.decide import decide_scopes
from worker.runs.finalize import finalize_run
from worker.runs.outcome import PhaseOutcome
from worker.runs.scheduling import (
    GateResult,
    explain_scopes,
    gate_check,
    hand_overs_before_failing,
    recover_runs,
    scope_gate,
)
from worker.runs.snapshot import RunSnapshot, claim
from worker.store.models import DreamRunRow
from worker.store.uow import UnitOfWork

log = structlog.get_logger(__name__)


def phase_registry() -> Registry:
    """The real phases (looked up at call time, so a test may replace ``phase_registry``)."""
    from worker import phases

    return phases.phase_registry()


def execute_run(app: App, run: str | RunSnapshot, registry: Registry | None = None) -> str:
    """The whole run in this process (``engine.execute_run`` with the real phases): a run id,
    or the snapshot ``create_claimed_run`` returned."""
    return engine.execute_run(app, run, registry or phase_registry())


def execute_run_task(app: App, run_id: str,
                     registry: Registry | None = None) -> engine.RunResult:
    """The whole run as one Celery task runs it (``DREAM_CELERY_TASKS=run``): every phase in
    order and finalize, except that a phase waiting on a provider batch returns at once
    (``RunResult.retry_after``) for the task to re-schedule itself, and that no phase starts
    after ``run_task_hand_off`` seconds (``RunResult.hand_off``: the task goes on in a new one)."""
    return engine.execute_run_once(app, run_id, registry or phase_registry(), poll=False,
                                   hand_off_after=run_task_hand_off(app.settings))


def run_task_hand_off(settings: Settings) -> float:
    """Seconds after which a run task starts no further phase: its soft time limit less the
    longest a judging phase takes (``config_checks.phase_seconds``: its model time, the call
    in flight when that ends, a minute for the writes); 0 (every phase after the first in a
    task of its own) when the limit leaves no more. With a model, settings whose phase does not
    fit in the soft limit at all are refused as they load."""
    return max(0.0, settings.task_soft_time_limit - phase_seconds(settings))


def execute_phase(app: App, run_id: str, phase: str,
                  registry: Registry | None = None) -> engine.PhaseResult:
    """One phase of a run, as a Celery task runs it (``engine.execute_phase``)."""
    return engine.execute_phase(app, run_id, phase, registry or phase_registry())


def claim_run(app: App, run_id: str) -> int | None:
    """Take the run's lease (queued/interrupted → running): its epoch, or None if someone else
    runs it."""
    snap = claim(app, run_id)
    return snap.epoch if snap is not None else None


def unclaimed_runs(app: App) -> list[str]:
    """Every queued or interrupted run, oldest first (what `dream run --due` executes here)."""
    with app.uow() as uow:
        return [r.id for r in uow.runs.unclaimed()]


@dataclass(frozen=True)
class Cancelled:
    """A cancel's answer: the status the run had, and what became of its provider batches."""

    was: str
    batches: list[RunBatchRelease] = field(default_factory=list)


def cancel_run(app: App, run_id: str, reason: str = "cancelled by the operator") -> Cancelled:
    """Cancel a queued, interrupted or running run and free its scope; then release its
    provider batches (``release_run_batches``: a batch it waits on is cancelled at the provider
    and its files deleted; a failure there is reported, never undoes the cancel). A run already
    cancelled or failed whose batch release left something behind: the release is tried again.

    A running executor notices at its next fenced write and stops; what it applied before
    stays recorded in the operation log, so `dream undo` can still revert it."""
    if problem := stored_ident_problem(run_id):  # a surrogate was the driver's traceback
        raise InvalidRun(f"run id {problem}")
    if problem := visible_problem(reason):  # the run's reason on every dashboard
        raise InvalidRun(f"reason {problem}; say why, or leave --reason out")
    if problem := line_problem(reason):
        raise InvalidRun(f"reason {problem}")
    if len(reason) > REASON_MAX:  # and on each of its steps: one line, as a decline's
        raise InvalidRun(f"--reason has {len(reason)} characters; at most {REASON_MAX}: say "
                         "why in a line")
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        before = run.status
        if before not in STOPPED:
            if not _stop(uow, run, reason):
                raise RunError(f"run {run_id} changed while cancelling it; look again with "
                               f"`dream runs show {run_id}`")
            uow.commit()
            log.info("run.cancelled", run_id=run_id, was=before)
    # A stopped run's batches are released again while its release left something behind.
    released = release_run_batches(app, [run_id])
    if before in STOPPED and not released:
        raise _not_cancellable(run_id, before)
    return Cancelled(before, released)


def _stop(uow: UnitOfWork, run: DreamRunRow, reason: str) -> bool:
    """The run cancelled and its steps stopped (not committed); False if it moved meanwhile."""
    now = utcnow()
    if run.status == RunStatus.RUNNING.value:
        done = uow.runs.cancel_running(run, now, reason)
    elif run.status in (RunStatus.QUEUED.value, RunStatus.INTERRUPTED.value):
        done = uow.runs.finish_unclaimed(run, RunStatus.CANCELLED.value, now, status_reason=reason)
    else:
        raise _not_cancellable(run.id, run.status)
    if done:
        # As an erasure's cancel records them: never "skipped", which says a phase was not
        # asked for (and counts it done).
        uow.runs.stop_steps([run.id], f"the run was cancelled: {reason}", now)
    return done


def _not_cancellable(run_id: str, status: str) -> RunError:
    return RunError(f"run {run_id} is {status}; only queued, interrupted or running runs can be "
                    "cancelled")


# Stopped for good: a provider batch of such a run is never read.
STOPPED = (RunStatus.CANCELLED.value, RunStatus.FAILED.value)


def ensure_scope_known(app: App, scope: Scope) -> None:
    """Raise UnknownScope (one line naming the scope) unless ``scope_known``."""
    if not scope_known(app, scope):
        raise UnknownScope(f"unknown scope {scope.key}: it has no notes, sessions or runs; check "
                           "agent/user/company (null is a value, not a wildcard)")


def scope_known(app: App, scope: Scope) -> bool:
    """True if the scope has any note, session or run (a run on an unknown scope is a typo, R22)."""
    with app.uow() as uow:
        return uow.sessions.scope_known(scope)


def abandon_run(app: App, run_id: str, reason: str) -> bool:
    """A queued run that never reached the broker: mark it failed at once, so the user who asked
    for it sees why and the scope is free (rather than waiting for the gate check's timeout).
    Whether it was failed: a run in any other status (an interrupted one the gate check hands
    out again, one claimed meanwhile) is left as it is, and the caller must not say it failed."""
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        failed = (run is not None and run.status == RunStatus.QUEUED.value
                  and uow.runs.finish_unclaimed(run, RunStatus.FAILED.value, utcnow(),
                                                error=reason))
        if failed:
            uow.runs.record_usage([run_id])
        uow.commit()
    # Not a warning: the BrokerUnavailable raised next names the run (the CLI's one error
    # line, the gate check task's failure); a second line on a terminal would repeat it.
    log.info("run.abandoned" if failed else "run.unsent", run_id=run_id, reason=reason)
    return failed

__all__ = [
    "BrokerUnavailable", "GateResult", "PhaseOutcome", "RunError", "UnknownScope",
    "Cancelled", "abandon_run", "busy_message", "cancel_run", "claim_run", "create_claimed_run",
    "create_run", "create_runs",
    "decide_scopes", "explain_scopes",
    "ensure_scope_known", "execute_phase", "execute_run", "execute_run_task", "finalize_run", "gate_check",
    "hand_overs_before_failing", "recover_runs", "scope_gate", "scope_known", "unclaimed_runs",
]

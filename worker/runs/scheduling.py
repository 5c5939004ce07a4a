"""The gate check: which scopes are due, one queued run for each, and recovery of runs whose
executor was lost (R5, R30). Reads in a few bulk queries; every transition is compare-and-set."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

import structlog

from worker.app import App
from worker.clock import utcnow
from worker.config import Settings
from worker.domain.types import RunStatus, Scope
from worker.runs.batches import (
    look_up_ended_submissions,
    release_run_batches,
    retry_incomplete_releases,
)
from worker.runs.create import create_gated_runs
from worker.runs.decide import decide_scopes
from worker.runs.gate import GateDecision, GateRule
from worker.store.models import DreamRunRow
from worker.store.repositories.run_history import counts_in_streak
from worker.store.uow import UnitOfWork
from worker.text.plural import counted

log = structlog.get_logger(__name__)


@dataclass
class GateResult:
    created: list[str]
    skipped: dict[str, str]
    retried: list[str]  # expired leases, now interrupted: to be executed again
    failed: list[str]
    # Every scope checked, due or not, with the rule that decided and why (`dream gate --explain`).
    decisions: dict[str, GateDecision] = field(default_factory=dict)
    # Queued/interrupted runs nobody claimed within DREAM_QUEUED_TIMEOUT_SECONDS (a lost broker
    # message, a creator killed before its claim, no broker at all): to be enqueued again.
    requeued: list[str] = field(default_factory=list)
    backlog: int | None = None  # messages the broker's queue held at the check (None: unknown)
    # A check that creates no run (``create=False``): the due scopes it found, in scope order.
    due: list[Scope] = field(default_factory=list)


class Fate(StrEnum):
    """What a gate check does with a run whose executor was lost (R5, R30)."""

    RETRY = "retry"  # its lease lapsed: interrupted, executed again
    REQUEUE = "requeue"  # nobody claimed it in time: handed out again
    GIVE_UP = "give_up"  # either, too often: failed, which frees its scope


@dataclass(frozen=True)
class Recovery:
    """One lost run and what the gate check does with it."""

    run: DreamRunRow
    fate: Fate
    lapsed: bool  # its lease lapsed while running (else: nobody claimed it)


def hand_overs_before_failing(settings: Settings) -> int:
    """How many times a run nobody claims is handed to an executor before the gate check fails
    it: once when created, then again by each check after a timeout, ``max_attempts`` times."""
    return settings.max_attempts + 1


def plan_recovery(uow: UnitOfWork, settings: Settings, now: datetime,
                  backlog: int | None = None) -> list[Recovery]:
    """The lost runs a gate check at ``now`` recovers, and how; reads only (``recover_runs``
    applies it, `dream gate --explain` reports it). The two sets are apart: a run the check
    interrupts is handed to an executor at ``now``, never before the unclaimed cut-off."""
    patience = settings.backlog_patience_seconds if backlog else 0
    lapsed_before = now - timedelta(seconds=patience)
    stale_before = now - timedelta(seconds=max(settings.queued_timeout_seconds, patience))
    return [
        *(Recovery(run, Fate.GIVE_UP if run.attempts >= settings.max_attempts else Fate.RETRY,
                   lapsed=True) for run in uow.runs.expired_running(lapsed_before)),
        *(Recovery(run, Fate.GIVE_UP if run.requeues >= settings.max_attempts else Fate.REQUEUE,
                   lapsed=False) for run in uow.runs.unclaimed(enqueued_before=stale_before)),
    ]


def recover_runs(app: App, now: datetime, result: GateResult, backlog: int | None = None) -> None:
    """R5 + R30: runs whose lease expired become interrupted (failed after max_attempts);
    queued/interrupted runs nobody claimed in time are handed out again (failed after
    ``hand_overs_before_failing`` hand-overs), as ``plan_recovery`` finds them. Every
    transition is compare-and-set: a live executor wins. The provider batches of the runs
    failed here are released (``release_run_batches``), releases left incomplete before are
    tried again (``retry_incomplete_releases``), and the submissions ended runs left open are
    looked up (``look_up_ended_submissions``).

    ``backlog``: messages waiting in the broker's queue (None: unknown, or no broker). While
    some wait, a run's message may be one of them, behind the rest: a queued run, or a running
    one whose next phase task is queued (its lease lapses between two tasks of a chain), is
    given ``backlog_patience_seconds`` before it counts as lost. Otherwise a fleet whose queue
    takes hours to drain would have its waiting runs sent again (more messages behind the same
    backlog) and failed after ``max_attempts`` timeouts."""
    with app.uow() as uow:
        before = len(result.failed)
        for recovery in plan_recovery(uow, app.settings, now, backlog):
            _recover(uow, recovery, now, app.settings, result)
        # The runs given up store what every attempt of theirs spent, as a finalized run's
        # totals do: all of them at once (two reads per chunk of ids, one executemany).
        uow.runs.record_usage(result.failed[before:])
        uow.commit()
    # Releases left incomplete earlier (a provider error, a file it kept, a batch still
    # cancelling, whose output file appears when it is done) are tried again: before this
    # check's own, which would otherwise be tried twice in a row.
    retry_incomplete_releases(app, now)
    # A submission whose look failed mid-run, its run ended since: looked up once more, and a
    # batch found is released (no attempt of its run would ever look again).
    look_up_ended_submissions(app, now)
    # A run given up may have left a provider batch working (and billing) for answers no one
    # will read: cancelled and its files deleted, once the failure is committed.
    release_run_batches(app, result.failed, shown=False)


def _recover(uow: UnitOfWork, recovery: Recovery, now: datetime, settings: Settings,
             result: GateResult) -> None:
    run, fate = recovery.run, recovery.fate
    if recovery.lapsed and fate is Fate.GIVE_UP:
        if uow.runs.expire(
            run, now, RunStatus.FAILED.value, finished_at=now, lease_expires_at=None,
            error=f"gave up after {counted(run.attempts, 'attempt')} (lease expired each time)",
        ):
            result.failed.append(run.id)
            uow.runs.interrupt_steps([run.id], "the run gave up", now, resumed=False)
    elif recovery.lapsed:
        if uow.runs.expire(run, now, RunStatus.INTERRUPTED.value, enqueued_at=now):
            result.retried.append(run.id)
            uow.runs.interrupt_steps([run.id], "its lease expired; the run is retried", now)
    elif fate is Fate.GIVE_UP:
        if uow.runs.finish_unclaimed(
            run, RunStatus.FAILED.value, now,
            error=f"never claimed after {counted(run.requeues + 1, 'hand-over')} of "
                  f"{settings.queued_timeout_seconds} s each (no worker consumes the "
                  "queue, or its messages were lost)",
        ):
            result.failed.append(run.id)
    elif uow.runs.requeue(run, now):
        result.requeued.append(run.id)


def gate_check(app: App, now: datetime | None = None, backlog: int | None = None, *,
               create: bool = True) -> GateResult:
    """Create a run for every due scope; recover lost or stuck runs first (R5, R30).
    ``backlog``: messages waiting in the broker's queue, if known (see ``recover_runs``).
    ``create=False`` (`dream run --due`, which creates each run claimed as it comes to it):
    the due scopes are listed in ``GateResult.due`` instead. A ``now`` given (`--now`) is also
    the clock of the runs it creates (their archive rules), as a forced run's is."""
    clock = now  # None (beat): each run reads the time as it executes
    now = now or utcnow()
    result = GateResult([], {}, [], [], backlog=backlog)
    recover_runs(app, now, result, backlog)
    decisions = decide_scopes(app, clock, writing=True)
    due = [scope for scope, d in decisions.items() if d.due]
    # Every due scope's run in one transaction (R1 still refuses a scope that has one), the
    # gate asked again there: a run of a scope may have ended since ``decide_scopes`` read.
    made = create_gated_runs(app, due, trigger="beat", clock=clock, gated=True) if create \
        else None
    for scope, decision in decisions.items():
        decision = made.closed.get(scope, decision) if made else decision
        result.decisions[scope.key] = decision
        if not decision.due:
            result.skipped[scope.key] = decision.reason
            continue
        if not create:
            result.due.append(scope)
            continue
        run_id = made.runs[scope] if made else None
        if run_id is None:
            result.skipped[scope.key] = HELD
            result.decisions[scope.key] = held(decision)
        else:
            result.created.append(run_id)
    rules: dict[str, int] = {}
    for decision in result.decisions.values():
        rules[decision.rule.value] = rules.get(decision.rule.value, 0) + 1
    if backing_off := rules.get(GateRule.BACKING_OFF.value, 0):
        # Scopes whose runs keep failing (a store refusing writes, a phase crashing on them):
        # counts only, the reasons are in `dream gate --explain`.
        log.warning("gate.backing_off", scopes=backing_off,
                    most_failures=max(d.failures or 0 for d in result.decisions.values()))
    log.info("gate.checked", created=len(result.created), due=len(result.due),
             skipped=len(result.skipped),
             retried=len(result.retried), requeued=len(result.requeued),
             failed=len(result.failed), backlog=backlog, rules=rules)
    return result


HELD = "a run is already queued or running"


def held(decision: GateDecision) -> GateDecision:
    """A due scope's decision once its own unfinished run is found holding it (R1)."""
    return GateDecision(False, f"{decision.reason}; {HELD}", GateRule.ALREADY_ACTIVE)


def explain_scopes(app: App, now: datetime | None = None,
                   scopes: list[Scope] | None = None) -> dict[Scope, GateDecision]:
    """``decide_scopes`` as a gate check at ``now`` would end them (`dream gate --explain`,
    MCP ``dream_status``), changing nothing: first its recovery of lost runs (``plan_recovery``;
    the broker's backlog unknown, so without its patience): a run it gives up frees its scope
    and counts in the scope's failed runs; then a due scope still held by a queued, running
    or interrupted run is ``already_active``, not "due"."""
    clock, now = now, now or utcnow()
    with app.uow() as uow:
        plan = {r.run.scope_key: r for r in plan_recovery(uow, app.settings, now)}
    given_up = {key for key, r in plan.items() if r.fate is Fate.GIVE_UP}
    decisions = decide_scopes(app, clock, scopes, failing={
        key for key in given_up if counts_in_streak(plan[key].run)})
    due = [scope.key for scope, d in decisions.items() if d.due]
    with app.uow() as uow:
        busy = uow.run_history.held_scopes(due) - given_up
    return {scope: _explained(held(d) if scope.key in busy else d, plan.get(scope.key))
            for scope, d in decisions.items()}


def _explained(decision: GateDecision, recovery: Recovery | None) -> GateDecision:
    """``decision`` with what the check first does with the scope's lost run, if any."""
    if recovery is None:
        return decision
    lost = "its lease lapsed" if recovery.lapsed else "nobody claimed it"
    does = {Fate.GIVE_UP: "gives it up", Fate.RETRY: "retries it",
            Fate.REQUEUE: "hands it out again"}[recovery.fate]
    return replace(decision, reason=f"{decision.reason} (run {recovery.run.id}: {lost}; the "
                                    f"gate check {does} first)")


def scope_gate(app: App, scope: Scope, now: datetime | None = None, *,
               writing: bool = False) -> GateDecision:
    """The gate decision for one scope (the CLI asks before an unforced run; ``writing``: one
    that writes, see ``decide_scopes``)."""
    return decide_scopes(app, now, [scope], writing=writing)[scope]

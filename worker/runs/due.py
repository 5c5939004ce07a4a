"""`dream run --due` in this process: every waiting run and every due scope, each executed by
the one invocation that claims it, so two invocations at once never run or report each other's
runs. (Sent to the broker instead, the gate check's runs are created queued: ``tasks``.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import structlog

from worker.app import App
from worker.domain.types import RunStatus, Scope
from worker.runs import service
from worker.runs.decide import GateClosed
from worker.runs.gate import GateRule
from worker.runs.scheduling import GateResult
from worker.runs.snapshot import RunSnapshot, claim
from worker.runs.stops import stops_held
from worker.safety.crashpoints import crashpoint
from worker.text.plural import counted

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class DueWork:
    check: GateResult  # the gate check: recovered runs, each scope's decision
    waiting: list[str]  # queued or interrupted runs to resume, the check's recovered ones first

    @property
    def empty(self) -> bool:
        return not self.waiting and not self.check.due


def find_due(app: App, clock: datetime | None) -> DueWork:
    """The gate check without creating a run (a queued run would wait its turn here, where a
    concurrent invocation's sweep of waiting runs could take it), and every waiting run."""
    check = service.gate_check(app, now=clock, create=False)
    waiting = check.retried + check.requeued
    waiting += [r for r in service.unclaimed_runs(app) if r not in waiting]
    return DueWork(check, waiting)


def execute_due(app: App, work: DueWork, clock: datetime | None) -> Iterator[tuple[str, str]]:
    """Each run this invocation claims, executed to its end: (run id, final status). A waiting
    run is claimed before it runs; a due scope's run is created claimed just before it runs,
    after its gate is asked again (a run of another executor may have dreamed it meanwhile).
    A due scope held by a queued or interrupted run (a concurrent `dream gate` without a broker
    created it after the sweep) is that run's, claimed here as a waiting run is (``_held``).
    What another executor claimed is its own to run and report: skipped here."""
    # A stop between a claim (or a creation) and the engine's give-back is held until the
    # engine covers the run (worker.runs.stops): never a run left running by it.
    for run_id in work.waiting:
        with stops_held():
            snap = claim(app, run_id, opening=True)
            status = None if snap is None else service.execute_run(app, snap)
        if status is None:  # taken by another executor since the sweep, or cancelled
            log.info("run.due_taken", run_id=run_id)
            continue
        yield run_id, status
        crashpoint("run.due_reported")  # a run reported, the next not claimed yet
    for scope in work.check.due:
        if not service.scope_gate(app, scope, now=clock, writing=True).due:
            log.info("run.due_no_longer", scope=scope.key)
            continue
        with stops_held():
            try:  # the gate asked again once the insert holds the scope (``create.regate``)
                created = service.create_claimed_run(app, scope, trigger="beat", clock=clock,
                                                     gated=True)
            except GateClosed:
                log.info("run.due_no_longer", scope=scope.key)
                continue
            snap = created if created is not None else _held(app, scope)
            status = None if snap is None else service.execute_run(app, snap)
        if snap is None or status is None:  # another executor's run holds the scope (R1)
            log.info("run.due_taken", scope=scope.key)
            continue
        yield snap.run_id, status
        crashpoint("run.due_reported")


def _held(app: App, scope: Scope) -> RunSnapshot | None:
    """The queued or interrupted run holding ``scope``, claimed (compare-and-set: a Celery
    worker or another `--due` that claims it first keeps it); None when a running run holds it
    or the claim lost. Before, such a run, created by a `dream gate` without a broker after
    this invocation's sweep, was skipped silently, and left for the next `--due`."""
    with app.uow() as uow:
        run = uow.runs.active_for_scope(scope)
    if run is None or run.status == RunStatus.RUNNING.value:
        return None
    return claim(app, run.id, opening=True)


def nothing_sent(result: GateResult) -> str:
    """Why `--due --via-celery` sent nothing: a due scope another executor's run holds (a
    concurrent `--due`, beat's check) is not "no scope is due" (the in-process `--due` says
    another executor took it)."""
    held = sum(d.rule is GateRule.ALREADY_ACTIVE for d in result.decisions.values())
    if not held:
        return f"no scope is due ({len(result.skipped)} checked)"
    return (f"no run sent from here: {counted(held, 'due scope')} already "
            f"{'has' if held == 1 else 'have'} a run queued or running (`dream runs list`); "
            f"{len(result.skipped)} checked")

"""`dream run --due` in this process: every waiting run and every due scope, each executed by
the one invocation that claims it, so two invocations at once never run or report each other's
runs. (Sent to the broker instead, the gate check's runs are created queued: ``tasks``.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import structlog

from worker.app import App
from worker.runs import service
from worker.runs.decide import GateClosed
from worker.runs.scheduling import GateResult
from worker.runs.snapshot import claim
from worker.runs.stops import stops_held
from worker.safety.crashpoints import crashpoint

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
    What another executor claimed or holds is its own to run and report: skipped here."""
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
        if not service.scope_gate(app, scope, now=clock).due:
            log.info("run.due_no_longer", scope=scope.key)
            continue
        with stops_held():
            try:  # the gate asked again once the insert holds the scope (``create.regate``)
                created = service.create_claimed_run(app, scope, trigger="beat", clock=clock,
                                                     gated=True)
            except GateClosed:
                log.info("run.due_no_longer", scope=scope.key)
                continue
            status = None if created is None else service.execute_run(app, created)
        if created is None or status is None:  # another executor's run holds the scope (R1)
            log.info("run.due_taken", scope=scope.key)
            continue
        yield created.run_id, status
        crashpoint("run.due_reported")

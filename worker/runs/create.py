"""Creating a run: one queued run per scope, refused by the database when one is active (R1)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import structlog

from worker.app import App
from worker.clock import utcnow
from worker.domain.types import PHASES, RunStatus, Scope
from worker.errors import InvalidRun
from worker.runs.decide import GateClosed, decide_in
from worker.runs.gate import GateDecision
from worker.runs.snapshot import RunSnapshot, open_phases, snapshot_of
from worker.store.uow import UnitOfWork

log = structlog.get_logger(__name__)


def create_run(
    app: App, scope: Scope, *, trigger: str = "cli", force: bool = False, dry_run: bool = False,
    phases: list[str] | None = None, clock: datetime | None = None,
    allow_retire: int | None = None, gated: bool = False,
) -> str | None:
    """A queued run for the scope, or None if one is already queued/running/interrupted (R1).

    ``force`` skips the gate only; ``allow_retire`` is how many retirements the run may make
    past the blast-radius guard's share (R20). ``gated``: the gate is asked again once the
    insert holds the scope (``regate``); GateClosed if no longer due."""
    phases = _checked(phases, allow_retire)
    with app.uow() as uow:
        run_id = uow.runs.create(
            scope, now=utcnow(), trigger=trigger, phases=phases, force=force,
            dry_run=dry_run, clock=clock, allow_retire=allow_retire,
        )
        if run_id is not None and gated:
            regate(uow, app, scope, clock, writing=not dry_run)
        uow.commit()
    if run_id:
        log.info("run.created", run_id=run_id, scope=scope.key, trigger=trigger)
    return run_id


def create_runs(
    app: App, scopes: Iterable[Scope], *, trigger: str, force: bool = False,
    clock: datetime | None = None, allow_retire: int | None = None,
    phases: list[str] | None = None,
) -> dict[Scope, str | None]:
    """``create_run`` for many scopes in one transaction (the gate check's due scopes, the
    bench's): each scope's queued run id, or None where a run is already queued, running or
    interrupted (R1), which leaves the other scopes' runs created. A scope given twice gets
    one run. A few statements however many scopes (``RunRepository.create_many``)."""
    return create_gated_runs(app, scopes, trigger=trigger, force=force, clock=clock,
                             allow_retire=allow_retire, phases=phases).runs


@dataclass(frozen=True)
class GatedRuns:
    runs: dict[Scope, str | None]  # each scope's queued run, None where one holds it (R1)
    closed: dict[Scope, GateDecision]  # scopes the gate, asked again, no longer found due


def create_gated_runs(
    app: App, scopes: Iterable[Scope], *, trigger: str, force: bool = False,
    clock: datetime | None = None, allow_retire: int | None = None,
    phases: list[str] | None = None, gated: bool = False,
) -> GatedRuns:
    """``create_runs``; ``gated`` (the gate check's), the gate is asked again (``regate``) in
    the inserting transaction, once the inserts hold their scopes, and a scope no
    longer due loses its row before the commit (``regate``): no run, its decision in
    ``closed``. Without that, a run of the scope that ended between the check's reading and
    the insert left the scope free, and a second run dreamed it at once."""
    phases = _checked(phases, allow_retire)
    scopes = list(scopes)
    if not scopes:
        return GatedRuns({}, {})
    closed: dict[Scope, GateDecision] = {}
    with app.uow() as uow:
        created = uow.runs.create_many(scopes, now=utcnow(), trigger=trigger, phases=phases,
                                       force=force, clock=clock, allow_retire=allow_retire)
        if gated:
            mine = [scope for scope in scopes if scope.key in created]
            closed = {scope: d for scope, d in
                      decide_in(uow, app.settings, clock, mine, writing=True).items()
                      if not d.due}
            uow.runs.drop_created([created.pop(scope.key) for scope in closed])
        uow.commit()
    runs = {scope: created.get(scope.key) for scope in scopes}
    for scope, run_id in runs.items():
        if run_id is not None:
            log.info("run.created", run_id=run_id, scope=scope.key, trigger=trigger)
    return GatedRuns(runs, closed)


def regate(uow: UnitOfWork, app: App, scope: Scope, clock: datetime | None, *,
           writing: bool = True) -> None:
    """GateClosed (the caller's transaction rolled back: nothing written) unless the gate,
    asked in the transaction that just inserted the scope's run, still finds it due: at the
    run's ``clock`` (`--now`), else at this moment.
    The insert holds the scope (R1): no run of it can start or end until the commit, and one
    that ended before the insert is read here (each statement of READ COMMITTED sees every
    commit before it; SQLite's writer the latest). Asked only before the insert, the gate
    missed a run that ended in between, and a second dream followed at once. ``writing``: a
    run that writes (not a dry run), see ``decide_scopes``."""
    decision = decide_in(uow, app.settings, clock, [scope], writing=writing)[scope]
    if not decision.due:
        raise GateClosed(decision)


def create_claimed_run(
    app: App, scope: Scope, *, trigger: str = "cli", force: bool = False, dry_run: bool = False,
    phases: list[str] | None = None, clock: datetime | None = None,
    allow_retire: int | None = None, gated: bool = False,
) -> RunSnapshot | None:
    """``create_run`` for an executor that runs it at once (``dream run``, an API thread, the
    bench): inserted already running under lease epoch 1 with the scope's note counts (the
    guard's baseline, R20) in its totals, counted by the insert, and its phases' parent steps
    opened; two statements and no claim. The run's snapshot, or
    None when the scope has a run already (R1). A creator killed after this leaves a running
    run whose lease lapses; the gate check recovers it like any killed run (R30). ``gated``:
    as ``create_run``'s."""
    phases = _checked(phases, allow_retire)
    now = utcnow()
    with app.uow() as uow:
        values = uow.runs.create_values(
            scope, now=now, trigger=trigger, phases=phases, force=force, dry_run=dry_run,
            clock=clock, allow_retire=allow_retire, count_notes=True,
            claimed_until=now + timedelta(seconds=app.settings.lease_seconds))
        if values is None:
            return None
        if gated:
            regate(uow, app, scope, clock, writing=not dry_run)
        snap = snapshot_of(SimpleNamespace(**{"totals": None, **values}), [])
        open_phases(uow, snap)
        uow.commit()
    log.info("run.created", run_id=snap.run_id, scope=scope.key, trigger=trigger, claimed=True)
    return snap


def create_phaseless_run(app: App, scope: Scope, *, trigger: str,
                         totals: dict[str, Any]) -> RunSnapshot | None:
    """``create_claimed_run`` for a run that asks for no dream phase (a review approval, which
    applies one item through the phase kit itself): ``phases`` ["<trigger>"], so an executor that
    recovers it after a crash runs none of the four phases and only finishes it. Forced (the
    gate does not apply); ``totals`` join the scope's note counts."""
    now = utcnow()
    with app.uow() as uow:
        before = uow.notes.count_by_status(scope)
        values = uow.runs.create_values(
            scope, now=now, trigger=trigger, phases=[trigger], force=True,
            totals={"notes_before": before, **totals},
            claimed_until=now + timedelta(seconds=app.settings.lease_seconds))
        uow.commit()
    if values is None:
        return None
    log.info("run.created", run_id=values["id"], scope=scope.key, trigger=trigger, claimed=True)
    return snapshot_of(SimpleNamespace(**values), [])


def _checked(phases: list[str] | None, allow_retire: int | None) -> list[str]:
    phases = list(phases or PHASES)
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise InvalidRun(f"unknown phase {unknown[0]!r}; choose from {', '.join(PHASES)}")
    if allow_retire is not None and allow_retire < 0:
        raise InvalidRun(f"allow_retire must be 0 or more (got {allow_retire})")
    return phases


def busy_message(app: App, scope: Scope) -> str:
    """Why a run cannot be created for the scope, naming the run that holds it and the way out."""
    with app.uow() as uow:
        run = uow.runs.active_for_scope(scope)
    if run is None:  # it finished between the refusal and this read
        return f"a run was queued or running for {scope.key}; retry"
    hint = ("resume it with `dream run --due` or cancel it"
            if run.status != RunStatus.RUNNING.value else "wait for it or cancel it")
    return (f"run {run.id} is already {run.status} for {scope.key}; {hint} with "
            f"`dream runs cancel {run.id}`")


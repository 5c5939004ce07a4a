"""An approval's run: created under its lease like any run, its change written through the
phase's own write, which is held open and committed together with the item's decision, the
phase step's finish and the run's end: a crash leaves the change and the decision both or
neither (R3), and a decision someone else made first rolls the change back unseen."""

from __future__ import annotations

import time
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from worker.app import App
from worker.clock import utcnow
from worker.domain.types import REVIEW_TRIGGER, RunStatus, Scope, StepStatus
from worker.errors import Conflict
from worker.review.apply import GUARDED, OK, apply_change, at_versions
from worker.review.items import ChangeKind, Decided, ItemStatus, ProposedChange, entity_of
from worker.runs.context import HeldWrite, PhaseContext
from worker.runs.create import create_phaseless_run
from worker.runs.steps import StepRecorder


class ScopeBusy(Conflict):
    """The scope's run slot is taken (a dream, another reviewer's approval): nothing of the
    item was written; a batch leaves it and the items after it open and says so."""


def open_approval(app: App, scope: Scope, row: Any, by: str) -> PhaseContext:
    """A run of its own for the approval, created running under its lease by the runs
    package like any run an executor runs at once, so it cannot write beside a dream of the
    same scope (one active run per scope, R1); the phase kit's write is fenced by it and held
    (``ctx.held``) for ``finish_approval`` to commit."""
    snap = create_phaseless_run(app, scope, trigger=REVIEW_TRIGGER,
                                totals={"review_item": row.id, "approved_by": by})
    if snap is None:
        raise ScopeBusy(f"a run is queued or running for {scope.key}; approve item {row.id} "
                        "after it finishes")
    assert snap.epoch is not None
    return PhaseContext(app=app, run_id=snap.run_id, scope=scope, now=snap.now,
                        epoch=snap.epoch, steps=StepRecorder(app, snap.run_id, scope),
                        force=True, trigger=REVIEW_TRIGGER, notes_before=snap.notes_before,
                        held=HeldWrite())


@dataclass(frozen=True)
class Applied:
    """What the approval's phase step says when it ends: its id, counters and start."""

    parent: str
    counters: dict[str, Any]
    started: float


def apply_approved(ctx: PhaseContext, row: Any, by: str, change: ProposedChange,
           current: dict[str, Any]) -> tuple[str, str | None, Applied]:
    """The item's change written by its phase's own write, held open for ``_finish``."""
    parent = ctx.steps.start_phase(change.phase, {"review_item": row.id, "approved_by": by})
    applied = Applied(parent, phase_counters(change.phase), time.perf_counter())
    notes = at_versions(current, change) if entity_of(row.payload) == "note" else {}
    result, detail = apply_change(ctx, parent, change, notes, applied.counters)
    return result, detail, applied


def phase_counters(phase: str) -> dict[str, Any]:
    if phase == "consolidate":
        from worker.phases.consolidate.service import COUNTERS as CONSOLIDATE

        return dict.fromkeys(CONSOLIDATE, 0)
    if phase == "contradictions":
        from worker.phases.contradictions.service import COUNTERS as CONTRADICTIONS

        return dict.fromkeys(CONTRADICTIONS, 0)
    return {}


class Ending(Enum):
    """How the item's decision went in with the approval's end."""

    RECORDED = "recorded"
    # Someone decided the item first; this approval's change is not in the store (rolled
    # back with the decision, or it wrote none).
    PREEMPTED = "preempted"
    # Someone decided it first, but the change was committed before (a write released early
    # by another unit of work of the thread): the caller takes it back (undoes the run).
    PREEMPTED_WRITTEN = "preempted_written"


def finish_approval(app: App, ctx: PhaseContext, row: Any, by: str, result: str,
                    detail: str | None, applied: Applied) -> tuple[Decided, Ending]:
    """End the approval in one transaction with its held write: the write's steps (fenced),
    the phase step's finish, the item's decision and the run's end. StaleLease: nothing of it
    is kept, the caller ends the run."""
    decided, status, item_status = _answer(ctx, row, result, detail)
    write = ctx.held.take() if ctx.held is not None else None
    with ExitStack() as ending:
        uow = write.uow if write is not None else ending.enter_context(app.uow())
        if write is not None:
            ending.enter_context(write.close)
            write.flush()  # its steps, fenced: a cancel or an erasure meanwhile keeps nothing
        now = utcnow()
        uow.runs.update_step(applied.parent, status=StepStatus.SUCCEEDED.value if result == OK
                             else StepStatus.SKIPPED.value, output=applied.counters,
                             finished_at=now,
                             duration_ms=(time.perf_counter() - applied.started) * 1000)
        recorded = item_status is None or uow.review.decide(
            row.id, item_status, now=now, by=by, outcome=decided.line,
            applied_run_id=ctx.run_id)
        if not recorded and write is not None:
            ending.close()  # rolled back: the change was never seen
            _end_unwritten(app, ctx.run_id, applied.parent, row.id)
            return decided, Ending.PREEMPTED
        run = uow.runs.get(ctx.run_id)
        totals = {**((run.totals or {}) if run else {}),
                  "notes_after": uow.notes.count_by_status(ctx.scope)}
        reason = f"review item {row.id} approved by {by}" if result == OK else decided.line
        uow.runs.set_status(ctx.run_id, status, finished_at=now, totals=totals,
                            lease_expires_at=None, status_reason=reason[:300])
        uow.commit()
    if recorded:
        return decided, Ending.RECORDED
    return decided, Ending.PREEMPTED_WRITTEN if result == OK else Ending.PREEMPTED


def _answer(ctx: PhaseContext, row: Any, result: str,
            detail: str | None) -> tuple[Decided, str, str | None]:
    """(the answer, the run's status, the item's new status or None: it stays open)."""
    if result == OK:
        return (Decided(row.id, ItemStatus.APPROVED.value,
                        f"approved item {row.id}: applied in run {ctx.run_id}", ctx.run_id,
                        detail if row.kind == ChangeKind.MERGE.value else None),
                RunStatus.SUCCEEDED.value, ItemStatus.APPROVED.value)
    if result == GUARDED:
        return (Decided(row.id, "blocked", f"item {row.id} not applied: {detail}", ctx.run_id),
                RunStatus.BLOCKED.value, None)
    what = "an example" if entity_of(row.payload) == "example" else "a note"
    line = (f"item {row.id} is stale: {what} changed while it was being applied; nothing "
            "was written; the next run proposes afresh")
    return (Decided(row.id, ItemStatus.STALE.value, line, ctx.run_id),
            RunStatus.CANCELLED.value, ItemStatus.STALE.value)  # the run wrote nothing


def _end_unwritten(app: App, run_id: str, parent: str, item_id: int) -> None:
    """The approval's run after its write rolled back (the item was decided meanwhile)."""
    now = utcnow()
    with app.uow() as uow:
        uow.runs.update_step(parent, status=StepStatus.SKIPPED.value, finished_at=now)
        uow.runs.set_status(run_id, RunStatus.CANCELLED.value, finished_at=now,
                            lease_expires_at=None,
                            status_reason=f"review item {item_id} was decided meanwhile; "
                                          "nothing was written")
        uow.runs.record_usage([run_id])
        uow.commit()


class ApprovalStopped(KeyboardInterrupt):
    """An approval stopped by a signal. ``cancelled``: before its end committed, so nothing of
    its change was kept, its run is cancelled (an approval is never resumed, see
    ``end_lost_run``) and the item is still open; else its run had ended already (the stop
    came as the approval finished) and the item's own status says what became of it."""

    def __init__(self, item_id: int, run_id: str, signal_name: str,
                 cancelled: bool = True) -> None:
        super().__init__(item_id, run_id, signal_name)
        self.item_id, self.run_id, self.signal_name = item_id, run_id, signal_name
        self.cancelled = cancelled

    @property
    def line(self) -> str:
        if not self.cancelled:
            return (f"approval of item {self.item_id} stopped by {self.signal_name} as its run "
                    f"{self.run_id} ended: `dream review show {self.item_id}` says whether it "
                    "was applied; `dream review list` shows what is open")
        return (f"approval of item {self.item_id} stopped by {self.signal_name}: nothing of it "
                f"was written and its run {self.run_id} is cancelled; the item is still open "
                "(approve it again); items decided before it stay decided (`dream review list` "
                "shows what is open)")


def stop_approval(app: App, ctx: PhaseContext, item_id: int, signal_name: str) -> bool:
    """The approval's run, its held write rolled back, cancelled at once under the epoch it
    holds (compare-and-set): running, it would hold its scope until its lease lapsed. False
    when the run had ended (or moved on) already."""
    assert ctx.held is not None
    ctx.held.discard()
    return cancel_approval_run(
        app, ctx.run_id, ctx.epoch,
        f"the approval of item {item_id} was stopped by {signal_name}; nothing was written")


def cancel_approval_run(app: App, run_id: str, epoch: int | None, why: str) -> bool:
    """The approval's run cancelled if it still runs under ``epoch``; False if it moved on.
    From another thread than the approval's (a server stopping at once), its held write is
    left to that thread: its commit is fenced by the run, which is no longer running."""
    now = utcnow()
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if (run is not None and run.status == RunStatus.RUNNING.value
                and run.lease_epoch == epoch and uow.runs.cancel_running(run, now, why)):
            uow.runs.stop_steps([run_id], why, now)
            uow.commit()
            return True
    return False


def free_interrupted(app: App, ctx: PhaseContext, cause: str) -> None:
    """The approval's run cancelled at once when its database cut it short (busy, or the
    connection lost: ``cause``; its write rolled back whole): left running, it held its scope
    until its lease lapsed, and the "try again" its error says was refused as a busy scope.
    A database that still fails leaves it to the lease, as a crash does."""
    assert ctx.held is not None
    ctx.held.discard()
    with suppress(SQLAlchemyError):
        cancel_approval_run(app, ctx.run_id, ctx.epoch,
                            f"{cause}; nothing was written: approve the item again")

"""All SQL of a dream run's life cycle and its steps (create, claim, lease, steps, finish,
recovery); what finished runs say as history is ``run_history``."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, func, insert, literal, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from worker.domain.types import (
    ACTIVE_RUN_STATUSES,
    UNDONE_FROM,
    RunStatus,
    Scope,
)
from worker.store.chunks import chunked
from worker.store.models import DreamRunRow, RunStepRow
from worker.store.repositories.run_statements import (
    RUNNING_OUTPUT,
    SET_RUNNING_OUTPUT,
    claimed_notes,
    fenced_steps_statement,
    finish_counted_run_statement,
    finish_step_statement,
    insert_counted_run_statement,
    ordered_after,
    run_row,
)
from worker.store.repositories.run_stops import interrupt_steps, record_usage, stop_steps

_RUNS = cast(Table, DreamRunRow.__table__)
_LEASE = select(_RUNS.c.lease_epoch, _RUNS.c.status).where(_RUNS.c.id == bindparam("run_id"))
_STEPS = cast(Table, RunStepRow.__table__)
_INSERT_STEP = insert(_STEPS)
_INSERT_RUN = insert(_RUNS)
# Runs waiting for an executor: never claimed, or interrupted by a lost lease.
_UNCLAIMED = (RunStatus.QUEUED.value, RunStatus.INTERRUPTED.value)
# How lists of runs are ordered, everywhere (`dream runs list`, the API, MCP, the dashboard's
# pages): newest first, and among runs created together (a gate check creates them in one
# statement, with one created_at) by scope key, as ``create_many`` inserts them, then by id,
# so two reads, and consecutive pages, agree on one total order.
NEWEST_FIRST = (DreamRunRow.created_at.desc(), DreamRunRow.scope_key, DreamRunRow.id)
OLDEST_FIRST = (DreamRunRow.created_at, DreamRunRow.scope_key, DreamRunRow.id)
# Rows per INSERT of ``create_many``: 18 columns a row keeps a chunk's parameters (9,000) well
# under SQLite's 32,766 and PostgreSQL's 65,535 bound values per statement.
CREATE_CHUNK = 500


class RunRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def create(
        self, scope: Scope, *, now: datetime, trigger: str, phases: list[str],
        force: bool = False, dry_run: bool = False, clock: datetime | None = None,
        allow_retire: int | None = None, claimed_until: datetime | None = None,
        totals: dict[str, Any] | None = None,
    ) -> str | None:
        """Insert a queued run; None when the scope already has a queued/running/interrupted
        run (R1). One statement, no savepoint: a refusal rolls the transaction back, so call it
        first in a unit of work of its own (``create_run`` does)."""
        values = self.create_values(
            scope, now=now, trigger=trigger, phases=phases, force=force, dry_run=dry_run,
            clock=clock, allow_retire=allow_retire, claimed_until=claimed_until, totals=totals)
        return None if values is None else str(values["id"])

    def create_values(
        self, scope: Scope, *, now: datetime, trigger: str, phases: list[str],
        force: bool = False, dry_run: bool = False, clock: datetime | None = None,
        allow_retire: int | None = None, claimed_until: datetime | None = None,
        totals: dict[str, Any] | None = None, count_notes: bool = False,
    ) -> dict[str, Any] | None:
        """``create``, returning the row's values; with ``claimed_until`` the run is inserted
        already running under lease epoch 1 (an executor that runs it at once: no claim).
        ``count_notes`` (instead of ``totals``): the totals are ``{"notes_before": …}``, the
        scope's note counts taken by the insert itself."""
        values = run_row(
            scope, now=now, trigger=trigger, phases=phases, force=force, dry_run=dry_run,
            clock=clock, allow_retire=allow_retire, claimed_until=claimed_until, totals=totals)
        try:
            if count_notes:
                stmt = insert_counted_run_statement(self.session.get_bind().dialect.name,
                                                    tuple(values))
                values["totals"] = self.session.connection().execute(
                    stmt, {**values, "c_scope": scope.key}).scalar_one()
            else:
                self.session.connection().execute(_INSERT_RUN, [values])
        except IntegrityError:
            self.session.rollback()
            return None
        return values

    def create_many(
        self, scopes: Iterable[Scope], *, now: datetime, trigger: str, phases: list[str],
        force: bool = False, clock: datetime | None = None, allow_retire: int | None = None,
    ) -> dict[str, str]:
        """A queued run (``create``'s row) for each of ``scopes``, a scope given twice once:
        ``CREATE_CHUNK`` rows per ``INSERT ... ON CONFLICT DO NOTHING RETURNING``, in the
        caller's transaction (not committed here). The scope keys that got a run, with its
        id; a scope the partial unique index refuses (an active run holds it, R1) is missing,
        and never stops the other rows: without a conflict target, DO NOTHING skips a row
        that would violate any unique index, partial ones included, on both backends.

        Rows go in scope-key order: two concurrent callers on PostgreSQL then wait for each
        other's uncommitted rows in one order, never in a cycle (a deadlock)."""
        unique = sorted({scope.key: scope for scope in scopes}.items())
        rows = [run_row(scope, now=now, trigger=trigger, phases=phases, force=force,
                        clock=clock, allow_retire=allow_retire) for _, scope in unique]
        dialect_insert = (pg_insert if self.session.get_bind().dialect.name == "postgresql"
                          else sqlite_insert)
        conn = self.session.connection()
        created: dict[str, str] = {}
        for chunk in chunked(rows, CREATE_CHUNK):
            stmt = (dialect_insert(_RUNS).values(chunk)
                    .on_conflict_do_nothing()
                    .returning(_RUNS.c.id, _RUNS.c.scope_key))
            created.update((row.scope_key, row.id) for row in conn.execute(stmt))
        return created

    def drop_created(self, run_ids: list[str]) -> None:
        """Delete runs this transaction inserted and has not committed (no one has seen them)."""
        for chunk in chunked(run_ids):
            self.session.execute(delete(DreamRunRow).where(DreamRunRow.id.in_(chunk)))

    def get(self, run_id: str) -> DreamRunRow | None:
        return self.session.get(DreamRunRow, run_id)

    def active_for_scope(self, scope: Scope) -> DreamRunRow | None:
        return self.session.scalars(
            select(DreamRunRow).where(
                DreamRunRow.scope_key == scope.key, DreamRunRow.status.in_(ACTIVE_RUN_STATUSES)
            )
        ).first()

    def set_status(self, run_id: str, status: str, **values: Any) -> None:
        self.session.execute(
            update(DreamRunRow).where(DreamRunRow.id == run_id).values(status=status, **values)
        )

    def mark_undone(self, run: DreamRunRow, reason: str) -> None:
        """``run`` undone. Its totals keep what it ended as (``UNDONE_FROM``), which stays
        countable: /metrics counts the runs that ended blocked (a counter never goes back), the
        gate an undone dream as the last dream (never an undone failed or cancelled run)."""
        self.set_status(run.id, RunStatus.UNDONE.value, status_reason=reason,
                        totals={**(run.totals or {}), UNDONE_FROM: run.status})

    def claim_returning(self, run_id: str, now: datetime, lease_seconds: int) -> Any | None:
        """queued/interrupted → running in one statement: the epoch bumped, one more attempt;
        the claimed row and its scope's note counts as the claim saw them (``notes_now``), or
        None if not claimable (a concurrent claim or a finished run: the WHERE is re-checked
        under the row lock)."""
        stmt = (
            update(_RUNS)
            .where(_RUNS.c.id == run_id, _RUNS.c.status.in_(_UNCLAIMED))
            .values(status=RunStatus.RUNNING.value, lease_epoch=_RUNS.c.lease_epoch + 1,
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                    attempts=_RUNS.c.attempts + 1, status_reason=None,  # why it stopped: past
                    started_at=func.coalesce(_RUNS.c.started_at,
                                             literal(now, _RUNS.c.started_at.type)))
            .returning(*_RUNS.c, claimed_notes(self.session.get_bind().dialect.name))
        )
        return self.session.connection().execute(stmt).one_or_none()

    def start_step_fenced(self, values: dict[str, Any], epoch: int) -> bool:
        """Insert a parent step only while the run holds ``epoch`` (one prebuilt statement: the
        fence is the insert's own WHERE EXISTS, ``run_statements.lease_held``, FOR SHARE of the
        run row on PostgreSQL, so a claim waits for our commit and then marks the step
        interrupted); False when the lease is lost. A duplicate id raises IntegrityError
        (another executor started this phase under the same epoch, R4)."""
        dialect = self.session.get_bind().dialect.name
        stmt = fenced_steps_statement(dialect, tuple(values))
        params = {**values, "f_run": values["run_id"], "f_epoch": epoch}
        return bool(self.session.connection().execute(stmt, params).rowcount == 1)

    def finish_step_fenced(self, step_id: str, run_id: str, epoch: int, **values: Any) -> bool:
        """Update a parent step only while the run holds ``epoch`` (the check is the UPDATE's
        own WHERE; FOR SHARE of the run row on PostgreSQL, so a claim waits for our commit);
        False when the lease is lost (the step stays as the cancel or the recovery left it)."""
        dialect = self.session.get_bind().dialect.name
        stmt = finish_step_statement(dialect, tuple(sorted(values)))
        params = {f"v_{k}": v for k, v in values.items()}
        result = self.session.connection().execute(
            stmt, {"s_id": step_id, "s_run": run_id, "s_epoch": epoch, **params})
        return bool(result.rowcount == 1)

    def note_interrupted_steps(self, run_id: str, epoch: int, now: datetime) -> None:
        """Parent steps a killed attempt left running stay visible, marked as interrupted."""
        self.interrupt_steps([run_id], f"retried by attempt {epoch}", now)

    def interrupt_steps(self, run_ids: builtins.list[str], why: str, now: datetime, *,
                        resumed: bool = True) -> None:
        """The parent steps the runs' attempts left running end ``interrupted`` (the first of
        a run's), or "not started" (the later ones), in run order; ``resumed``: to be retried,
        else stopped for good (``run_stops.interrupt_steps``)."""
        if run_ids:
            interrupt_steps(self.session.connection(), run_ids, why, now, resumed=resumed)

    def stop_steps(self, run_ids: builtins.list[str], why: str, now: datetime) -> None:
        """Runs stopped for good (cancelled by the operator, or by their user's erasure): the
        parent steps their attempts left running end ``interrupted`` ("interrupted; ``why``",
        ``interrupt_steps``), and each phase a run never reached gets a parent step that says
        so ("not started; ``why``", also ``interrupted``), so a stopped run shows its four
        phases whichever executor had it (in-process opens all four with its claim, Celery's
        tasks one at a time) and a dashboard reads why each did not finish. Their totals take
        the usage of every step they wrote (``run_stops.write_usage``), in the same
        transaction."""
        if run_ids:
            self._loaded(stop_steps(self.session.connection(), run_ids, why, now))

    def record_usage(self, run_ids: builtins.list[str]) -> None:
        """The runs, stopped in this transaction without ``finalize``, store the usage of
        every step they wrote in their totals (``run_stops.record_usage``: a few statements
        for any number of runs)."""
        if run_ids:
            self._loaded(record_usage(self.session.connection(), run_ids))

    def _loaded(self, totals: dict[str, dict[str, Any]]) -> None:
        """A run row this session loaded holds the ``totals`` written past the ORM, as if
        read (never flushed again over them, still readable once the session is closed)."""
        for obj in builtins.list(self.session.identity_map.values()):
            if isinstance(obj, DreamRunRow) and obj.id in totals:
                set_committed_value(obj, "totals", totals[obj.id])

    def finish_fenced(self, run_id: str, epoch: int, status: str, scope: Scope,
                      **values: Any) -> bool:
        """running → a final status, only under ``epoch`` (a cancel or a recovery wins);
        ``values`` include ``totals``, stored with their ``notes_after`` set to the scope's note
        counts as the update runs (one prebuilt statement, no count of its own)."""
        values["status"] = status
        stmt = finish_counted_run_statement(self.session.get_bind().dialect.name,
                                            tuple(sorted(values)))
        params = {"f_run": run_id, "f_epoch": epoch, "c_scope": scope.key,
                  **{f"v_{k}": v for k, v in values.items()}}
        return bool(self.session.connection().execute(stmt, params).rowcount == 1)

    def holds_lease(self, run_id: str, epoch: int) -> bool:
        # Prebuilt Core statement: every apply transaction runs this (fencing), so it skips
        # statement construction, cache-key generation and the ORM session layer.
        row = self.session.connection().execute(_LEASE, {"run_id": run_id}).one_or_none()
        return row is not None and row.lease_epoch == epoch and row.status == RunStatus.RUNNING.value

    def renew_lease(self, run_id: str, epoch: int, until: datetime) -> bool:
        """Extend a held lease (the heartbeat); False when the epoch is no longer ours."""
        result = self.session.execute(
            update(DreamRunRow)
            .where(DreamRunRow.id == run_id, DreamRunRow.lease_epoch == epoch,
                   DreamRunRow.status == RunStatus.RUNNING.value)
            .values(lease_expires_at=until)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def release_stopped(self, run_id: str, epoch: int, now: datetime) -> bool:
        """running → interrupted under the epoch its executor holds, lease or no lease: that
        executor was stopped (a signal) and gives its run back for the next claim at once,
        instead of holding the scope until the lease lapses; False if the run moved on."""
        result = self.session.execute(
            update(DreamRunRow)
            .where(DreamRunRow.id == run_id, DreamRunRow.lease_epoch == epoch,
                   DreamRunRow.status == RunStatus.RUNNING.value)
            .values(status=RunStatus.INTERRUPTED.value, enqueued_at=now)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def expired_running(self, before: datetime) -> builtins.list[DreamRunRow]:
        """Running runs whose lease expired before ``before``."""
        return list(self.session.scalars(
            select(DreamRunRow).where(
                DreamRunRow.status == RunStatus.RUNNING.value,
                DreamRunRow.lease_expires_at < before,
            )
        ))

    def expire(self, run: DreamRunRow, now: datetime, status: str, **values: Any) -> bool:
        """running → ``status`` (interrupted, failed), only if the lease is still expired under
        the epoch read: a heartbeat that renewed it meanwhile wins (compare-and-set)."""
        result = self.session.execute(
            update(DreamRunRow)
            .where(DreamRunRow.id == run.id, DreamRunRow.lease_epoch == run.lease_epoch,
                   DreamRunRow.status == RunStatus.RUNNING.value,
                   DreamRunRow.lease_expires_at < now)
            .values(status=status, **values)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def unclaimed(self, enqueued_before: datetime | None = None,
                  scope: Scope | None = None) -> builtins.list[DreamRunRow]:
        """Queued or interrupted runs, oldest first; with ``enqueued_before``, only those last
        handed to an executor before then (their message was lost or nobody consumes it)."""
        stmt = (select(DreamRunRow).where(DreamRunRow.status.in_(_UNCLAIMED))
                .order_by(*OLDEST_FIRST))
        if enqueued_before is not None:
            enqueued = func.coalesce(DreamRunRow.enqueued_at, DreamRunRow.created_at)
            stmt = stmt.where(enqueued < enqueued_before)
        if scope is not None:
            stmt = stmt.where(DreamRunRow.scope_key == scope.key)
        return list(self.session.scalars(stmt))

    def requeue(self, run: DreamRunRow, now: datetime) -> bool:
        """Record one more hand-over to an executor; False if the run moved on meanwhile."""
        result = self.session.execute(
            update(DreamRunRow)
            .where(DreamRunRow.id == run.id, DreamRunRow.status == run.status,
                   DreamRunRow.lease_epoch == run.lease_epoch,
                   DreamRunRow.requeues == run.requeues)
            .values(enqueued_at=now, requeues=run.requeues + 1)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def finish_unclaimed(self, run: DreamRunRow, status: str, now: datetime, **values: Any) -> bool:
        """queued/interrupted → a final status (failed, cancelled), compare-and-set on the
        status and epoch read, so a claim that happened meanwhile wins."""
        result = self.session.execute(
            update(DreamRunRow)
            .where(DreamRunRow.id == run.id, DreamRunRow.status == run.status,
                   DreamRunRow.lease_epoch == run.lease_epoch)
            .values(status=status, finished_at=now, lease_expires_at=None, **values)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def cancel_running(self, run: DreamRunRow, now: datetime, reason: str) -> bool:
        """running → cancelled and the epoch bumped: the executor's next fenced write raises
        StaleLease and it stops; what it applied before stays recorded (and undoable)."""
        result = self.session.execute(
            update(DreamRunRow)
            .where(DreamRunRow.id == run.id, DreamRunRow.status == RunStatus.RUNNING.value,
                   DreamRunRow.lease_epoch == run.lease_epoch)
            .values(status=RunStatus.CANCELLED.value, lease_epoch=run.lease_epoch + 1,
                    finished_at=now, lease_expires_at=None, status_reason=reason)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def list(
        self, scope: Scope | None = None, status: str | None = None,
        since: datetime | None = None, limit: int = 50, *,
        within: dict[str, str] | None = None, after: DreamRunRow | None = None,
    ) -> builtins.list[DreamRunRow]:
        """``NEWEST_FIRST``: of one ``scope``, or of every scope ``within`` names the columns
        of (``{"agent_id": …, "user_id": …}``: all that agent's runs for that user); with
        ``after``, only the runs that order after that one (the next page: a run created while
        the pages are read shifts no page)."""
        stmt = select(DreamRunRow).order_by(*NEWEST_FIRST).limit(limit)
        if after is not None:
            stmt = stmt.where(ordered_after(after))
        if scope is not None:
            stmt = stmt.where(DreamRunRow.scope_key == scope.key)
        for column, value in (within or {}).items():
            stmt = stmt.where(getattr(DreamRunRow, column) == value)
        if status:
            stmt = stmt.where(DreamRunRow.status == status)
        if since:
            stmt = stmt.where(DreamRunRow.created_at >= since)
        return list(self.session.scalars(stmt))

    # ---- steps -------------------------------------------------------------------------
    def add_step(self, values: dict[str, Any]) -> str:
        step_id: str = values.setdefault("id", str(uuid.uuid4()))
        # Core on the session's connection: no ORM per-statement work (hot: every cluster).
        self.session.connection().execute(_INSERT_STEP, [values])
        return step_id

    def update_step(self, step_id: str, **values: Any) -> None:
        self.session.connection().execute(
            update(RunStepRow).where(RunStepRow.id == step_id).values(**values))

    def record_running_usage(self, step_id: str, usage: dict[str, int]) -> None:
        """A lease beat's ``output.usage`` while the step runs, the rest of its output kept (a
        step left waiting on a batch stays waiting); after the finish it writes nothing."""
        conn = self.session.connection()
        if (row := conn.execute(RUNNING_OUTPUT, {"s_id": step_id}).first()) is not None:
            output = {**(row.output or {}), "usage": usage}
            conn.execute(SET_RUNNING_OUTPUT, {"s_id": step_id, "v_output": output})

    def steps(self, run_id: str) -> builtins.list[RunStepRow]:
        return list(self.session.scalars(
            select(RunStepRow).where(RunStepRow.run_id == run_id)
            .order_by(RunStepRow.started_at, RunStepRow.seq)
        ))

"""Prebuilt run-step statements: the ones every phase of every run executes, built once per
dialect and shape so they skip statement construction and cache-key generation; the values of
a new run row and the keyset condition of a runs page."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    Table,
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from worker.domain.types import RunStatus, Scope, StepStatus
from worker.store.models import DreamRunRow, NoteRow, RunStepRow

_RUNS = cast(Table, DreamRunRow.__table__)
_NOTES = cast(Table, NoteRow.__table__)
_STEPS = cast(Table, RunStepRow.__table__)
_FINISH_STEP: dict[tuple[str, tuple[str, ...]], Any] = {}
_FENCED_STEPS: dict[tuple[str, tuple[str, ...], tuple[str, ...]], Any] = {}
_INSERT_COUNTED: dict[tuple[str, tuple[str, ...]], Any] = {}
_FINISH_COUNTED: dict[tuple[str, tuple[str, ...]], Any] = {}


# A lease beat's usage on a parent step while it runs: its output read (locked on PostgreSQL;
# SQLite's write lock is the beat's from its lease renewal on), then written back with it.
_RUNNING_STEP = (_STEPS.c.id == bindparam("s_id"), _STEPS.c.status == StepStatus.RUNNING.value)
RUNNING_OUTPUT = select(_STEPS.c.output).where(*_RUNNING_STEP).with_for_update()
SET_RUNNING_OUTPUT = update(_STEPS).where(*_RUNNING_STEP).values(output=bindparam("v_output"))


def lease_held(run_param: str, epoch_param: str, *, postgres: bool) -> Any:
    """SELECT 1 while the run (bound as ``run_param``) is running under the epoch bound as
    ``epoch_param``: the fence every step write puts in its own WHERE EXISTS. On PostgreSQL it
    reads the run row FOR SHARE, so a claim or a cancel in flight is waited for and re-checked,
    and one after it waits for our commit."""
    held = select(literal(1)).where(_RUNS.c.id == bindparam(run_param),
                                    _RUNS.c.lease_epoch == bindparam(epoch_param),
                                    _RUNS.c.status == RunStatus.RUNNING.value)
    return held.with_for_update(read=True) if postgres else held


def finish_step_statement(dialect: str, columns: tuple[str, ...]) -> Any:
    """UPDATE of a parent step (id ``s_id``, values ``v_<column>``) while the run ``s_run`` holds
    epoch ``s_epoch`` (``lease_held``)."""
    key = (dialect, columns)
    stmt = _FINISH_STEP.get(key)
    if stmt is None:
        held = lease_held("s_run", "s_epoch", postgres=dialect == "postgresql")
        stmt = (update(_STEPS).where(_STEPS.c.id == bindparam("s_id"), exists(held))
                .values({c: bindparam(f"v_{c}", type_=_STEPS.c[c].type) for c in columns}))
        _FINISH_STEP[key] = stmt
    return stmt


def fenced_steps_statement(dialect: str, names: tuple[str, ...],
                           finishing: tuple[str, ...] = ()) -> Any:
    """INSERT of step rows (columns ``names``, bound by name) while the run ``f_run`` holds
    epoch ``f_epoch`` (``lease_held``), one executemany. With ``finishing``, a row whose id
    exists already (the phase's parent step, opened when the phase started) updates those
    columns instead: the phase's children and its finish in one statement."""
    key = (dialect, names, finishing)
    stmt = _FENCED_STEPS.get(key)
    if stmt is None:
        postgres = dialect == "postgresql"
        held = lease_held("f_run", "f_epoch", postgres=postgres)
        rows = select(*(bindparam(n, type_=_STEPS.c[n].type).label(n) for n in names))
        insert = (pg_insert if postgres else sqlite_insert)(_STEPS).from_select(
            names, rows.where(exists(held)))  # SQLite needs the WHERE before an ON CONFLICT
        if finishing:
            insert = insert.on_conflict_do_update(
                index_elements=[_STEPS.c.id], set_={c: insert.excluded[c] for c in finishing})
        # preserve_rowcount: SQLAlchemy keeps an INSERT's rowcount only when asked (psycopg
        # sums it over an executemany, as sqlite3 does; an upsert's update counts as a row).
        stmt = _FENCED_STEPS[key] = insert.execution_options(preserve_rowcount=True)
    return stmt


def note_counts(dialect: str, scope: Any) -> Any:
    """The notes of the scope keyed by ``scope`` (a parameter, or the run row's column)
    counted by status, as one JSON object (``{}`` for none): what
    ``NoteRepository.count_by_status`` returns, computed inside the statement that stores it
    (same GROUP BY, so the same order of statuses on SQLite)."""
    counts = (select(_NOTES.c.status, func.count().label("n"))
              .where(_NOTES.c.scope_key == scope)
              .group_by(_NOTES.c.status).subquery())
    if dialect == "postgresql":
        agg = select(func.jsonb_object_agg(counts.c.status, counts.c.n)).scalar_subquery()
        return func.coalesce(agg, literal_column("'{}'::jsonb"))
    # json(): a subquery's value loses its JSON subtype; json() gives it back, so json_object
    # and json_set nest the object rather than quote it as a string.
    return func.json(select(func.json_group_object(counts.c.status, counts.c.n))
                     .scalar_subquery())


def insert_counted_run_statement(dialect: str, names: tuple[str, ...]) -> Any:
    """INSERT of a run row (columns ``names``, bound by name) whose ``totals`` are
    ``{"notes_before": <the scope's counts>}``, counted by the insert itself (scope bound as
    ``c_scope``), RETURNING the totals."""
    key = (dialect, names)
    stmt = _INSERT_COUNTED.get(key)
    if stmt is None:
        build = func.jsonb_build_object if dialect == "postgresql" else func.json_object
        totals = build("notes_before", note_counts(dialect, bindparam("c_scope")))
        row = select(*(bindparam(n, type_=_RUNS.c[n].type).label(n) for n in names),
                     totals.label("totals"))
        stmt = _INSERT_COUNTED[key] = (insert(_RUNS).from_select([*names, "totals"], row)
                                       .returning(_RUNS.c.totals))
    return stmt


def finish_counted_run_statement(dialect: str, columns: tuple[str, ...]) -> Any:
    """running → a final status under the epoch (``f_run``, ``f_epoch``): ``columns`` bound as
    ``v_<column>``; ``v_totals`` stored with its ``notes_after`` set to the scope's counts
    (``c_scope``) as the update runs."""
    key = (dialect, columns)
    stmt = _FINISH_COUNTED.get(key)
    if stmt is None:
        values: dict[str, Any] = {c: bindparam(f"v_{c}", type_=_RUNS.c[c].type) for c in columns}
        after = note_counts(dialect, bindparam("c_scope"))
        if dialect == "postgresql":
            values["totals"] = func.jsonb_set(values["totals"],
                                              literal_column("'{notes_after}'::text[]"), after)
        else:
            values["totals"] = func.json_set(values["totals"], "$.notes_after", after)
        stmt = _FINISH_COUNTED[key] = (
            update(_RUNS).where(_RUNS.c.id == bindparam("f_run"),
                                _RUNS.c.lease_epoch == bindparam("f_epoch"),
                                _RUNS.c.status == RunStatus.RUNNING.value)
            .values(values))
    return stmt


def claimed_notes(dialect: str) -> Any:
    """The claimed run's scope's note counts, for the claim's RETURNING (``notes_now``)."""
    # Spelled out: SQLite's RETURNING names columns without their table, so the run's
    # scope_key would read as the notes' own.
    own: Any = literal_column("dream_runs.scope_key")
    return type_coerce(note_counts(dialect, own), _RUNS.c.totals.type).label("notes_now")


def ordered_after(run: DreamRunRow) -> Any:
    """The runs ``NEWEST_FIRST`` puts after ``run``: created earlier, or at the same time and
    after it by scope key, then id (the order's own tie-breaks, so no run is on two pages)."""
    same_time = DreamRunRow.created_at == run.created_at
    return or_(DreamRunRow.created_at < run.created_at,
               and_(same_time, DreamRunRow.scope_key > run.scope_key),
               and_(same_time, DreamRunRow.scope_key == run.scope_key, DreamRunRow.id > run.id))


def run_row(
    scope: Scope, *, now: datetime, trigger: str, phases: list[str], force: bool = False,
    dry_run: bool = False, clock: datetime | None = None, allow_retire: int | None = None,
    claimed_until: datetime | None = None, totals: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A new run row's values: queued, or with ``claimed_until`` already running under lease
    epoch 1 (an executor that runs it at once: no claim)."""
    values: dict[str, Any] = {
        "id": str(uuid.uuid4()), "scope_key": scope.key, **scope.as_dict(),
        "status": RunStatus.QUEUED.value, "trigger": trigger, "force": force,
        "dry_run": dry_run, "phases": phases, "clock": clock, "created_at": now,
        "enqueued_at": now, "allow_retire": allow_retire, "attempts": 0, "lease_epoch": 0,
        "started_at": None, "lease_expires_at": None}
    if totals is not None:  # (a None would be stored as JSON null, not SQL NULL)
        values["totals"] = totals
    if claimed_until is not None:
        values.update(status=RunStatus.RUNNING.value, lease_epoch=1, attempts=1,
                      started_at=now, lease_expires_at=claimed_until)
    return values

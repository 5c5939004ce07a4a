"""Prebuilt run-step statements: the ones every phase of every run executes, built once per
dialect and shape so they skip statement construction and cache-key generation."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, bindparam, exists, literal, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from worker.domain.types import RunStatus
from worker.store.models import DreamRunRow, RunStepRow

_RUNS = cast(Table, DreamRunRow.__table__)
_STEPS = cast(Table, RunStepRow.__table__)
_FINISH_STEP: dict[tuple[str, tuple[str, ...]], Any] = {}
_FENCED_STEPS: dict[tuple[str, tuple[str, ...], tuple[str, ...]], Any] = {}


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

"""Prebuilt run-step statements: the ones every phase of every run executes, built once per
dialect and shape so they skip statement construction and cache-key generation."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, bindparam, exists, literal, select, update

from worker.domain.types import RunStatus
from worker.store.models import DreamRunRow, RunStepRow

_RUNS = cast(Table, DreamRunRow.__table__)
_STEPS = cast(Table, RunStepRow.__table__)
_FINISH_STEP: dict[tuple[str, tuple[str, ...]], Any] = {}


def finish_step_statement(dialect: str, columns: tuple[str, ...]) -> Any:
    """UPDATE of a parent step (id ``s_id``, values ``v_<column>``) while the run ``s_run`` holds
    epoch ``s_epoch``; FOR SHARE of the run row on PostgreSQL, so a claim waits for our commit."""
    key = (dialect, columns)
    stmt = _FINISH_STEP.get(key)
    if stmt is None:
        held = select(literal(1)).where(_RUNS.c.id == bindparam("s_run"),
                                        _RUNS.c.lease_epoch == bindparam("s_epoch"),
                                        _RUNS.c.status == RunStatus.RUNNING.value)
        if dialect == "postgresql":
            held = held.with_for_update(read=True)
        stmt = (update(_STEPS).where(_STEPS.c.id == bindparam("s_id"), exists(held))
                .values({c: bindparam(f"v_{c}", type_=_STEPS.c[c].type) for c in columns}))
        _FINISH_STEP[key] = stmt
    return stmt

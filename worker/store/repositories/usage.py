"""Model usage of phase steps over many runs, for /metrics and the dashboard: each parent step's
views of its calls read in one statement (its children aggregated in SQL) and decided by
``domain.usage.step_usage``, the rule the run's budget and totals use, so a call is counted
once whether a child step names it, only the parent records it (a batch submission, a phase
that failed), or both do."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import Session, aliased

from worker.domain.usage import BILLED_LATE as LATE
from worker.domain.usage import StepUsage, StepViews, step_usage
from worker.store.models import RunStepRow


@dataclass(frozen=True)
class PhaseStepUsage:
    run_id: str
    phase: str
    usage: StepUsage


def phase_step_usage(session: Session, *, scope_key: str | None = None,
                     run_ids: Sequence[str] | None = None) -> list[PhaseStepUsage]:
    """Every parent step's usage (every attempt's step: each is its own spending), of one scope
    or of ``run_ids`` when given."""
    kid = aliased(RunStepRow)
    kid_filter = _filters(kid, scope_key, run_ids)
    kids = (select(kid.parent_id.label("parent_id"),
                   func.sum(case((kid.model.is_not(None), 1), else_=0)).label("calls"),
                   func.sum(func.coalesce(kid.tokens_in, 0)).label("tokens_in"),
                   func.sum(func.coalesce(kid.tokens_out, 0)).label("tokens_out"),
                   # What the provider billed for a batch after its phase's views were written.
                   func.sum(func.coalesce(kid.output[(LATE, "tokens_in")].as_integer(), 0))
                   .label("late_in"),
                   func.sum(func.coalesce(kid.output[(LATE, "tokens_out")].as_integer(), 0))
                   .label("late_out"))
            .where(kid.parent_id.is_not(None), *kid_filter)
            .group_by(kid.parent_id).subquery())
    out = RunStepRow.output
    rows = session.execute(
        select(RunStepRow.run_id, RunStepRow.phase, RunStepRow.tokens_in, RunStepRow.tokens_out,
               out["model_calls_started"].as_integer(), out[("usage", "calls")].as_integer(),
               out[("usage", "tokens")].as_integer(), out[("usage", "tokens_in")].as_integer(),
               out[("usage", "tokens_out")].as_integer(),
               out["model_calls_taken_over"].as_integer(), kids.c.calls, kids.c.tokens_in,
               kids.c.tokens_out, kids.c.late_in, kids.c.late_out)
        .outerjoin(kids, kids.c.parent_id == RunStepRow.id)
        .where(RunStepRow.parent_id.is_(None), *_filters(RunStepRow, scope_key, run_ids))
    ).all()
    return [PhaseStepUsage(run_id, phase, step_usage(StepViews(
        int(kc or 0), int(kin or 0), int(kout or 0), tin or 0, tout or 0, started or 0,
        calls or 0, tokens or 0, uin or 0, uout or 0, taken or 0, int(lin or 0),
        int(lout or 0))))
        for run_id, phase, tin, tout, started, calls, tokens, uin, uout, taken, kc, kin, kout,
        lin, lout in rows]


def _filters(table: Any, scope_key: str | None,
             run_ids: Sequence[str] | None) -> list[ColumnElement[bool]]:
    where = []
    if scope_key is not None:
        where.append(table.scope_key == scope_key)
    if run_ids is not None:
        where.append(table.run_id.in_(run_ids))
    return where

"""The dashboard's reads: pages of runs and scopes, per-scope health and per-run trend figures.

Each method is one or two statements over a page or a bounded window of runs, aggregated in SQL
(JSON counters read with the dialect's JSON operators), never a query per run or per scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, and_, case, func, null, or_, select, union_all
from sqlalchemy.orm import Session

from worker.domain.types import (
    DREAMED_RUN_STATUSES,
    ERASED_USER,
    REVIEW_TRIGGER,
    NoteStatus,
    RunStatus,
    Scope,
    StepStatus,
)
from worker.domain.usage import StepUsage
from worker.store.models import DreamRunRow, NoteRow, RunStepRow
from worker.store.repositories.runs import NEWEST_FIRST, OLDEST_FIRST
from worker.store.repositories.usage import phase_step_usage

# A successful dream: what resolves the problems of the runs before it and what scope health
# shows as the last one. Never a review approval's run: approving one item lifts no guard,
# brings no model back and runs no failed phase (as for the gate, ``gate_dreams``).
_SUCCESSFUL_DREAM = (DreamRunRow.status == RunStatus.SUCCEEDED.value,
                     DreamRunRow.dry_run.is_(False), DreamRunRow.trigger != REVIEW_TRIGGER)
# Runs an operator must look at, listed first until a later dream of the scope succeeds.
ATTENTION_STATUSES = (RunStatus.BLOCKED.value, RunStatus.PARTIAL.value, RunStatus.FAILED.value)
# Phase counters the trends and the health view add up (parent steps' output keys).
COUNTER_KEYS = ("notes_revoked", "conflicts_resolved", "equivalents_merged", "notes_archived",
                "notes_expired", "notes_stale", "notes_retired", "clusters_deferred",
                "topics_deferred", "notes_deferred")
DEFERRAL_KEYS = ("clusters_deferred", "topics_deferred", "notes_deferred")
_FINAL_STEPS = (StepStatus.SUCCEEDED.value, StepStatus.FAILED.value, StepStatus.SKIPPED.value,
                StepStatus.NO_ITEMS.value)
NOTE_STATUSES = tuple(s.value for s in NoteStatus)
_S = TypeVar("_S", bound=Select[*tuple[Any, ...]])


@dataclass(frozen=True)
class ScopeFilter:
    """Which runs a page shows: one exact scope, every scope of one agent, or everything."""

    scope: Scope | None = None
    agent_id: str | None = None

    def clause(self, key: Any, agent: Any) -> ColumnElement[bool] | None:
        if self.scope is not None:
            return key == self.scope.key  # type: ignore[no-any-return]
        if self.agent_id is not None:
            return agent == self.agent_id  # type: ignore[no-any-return]
        return None


def _filtered(stmt: _S, f: ScopeFilter, key: Any, agent: Any) -> _S:
    clause = f.clause(key, agent)
    return stmt if clause is None else stmt.where(clause)


def _counter(key: str) -> ColumnElement[int]:
    return func.coalesce(RunStepRow.output[key].as_integer(), 0)


class DashboardQueries:
    def __init__(self, session: Session) -> None:
        self.session = session

    def runs_page(self, f: ScopeFilter, offset: int,
                  limit: int) -> tuple[list[tuple[DreamRunRow, bool]], int]:
        """A page of runs, unresolved problems first (blocked, partial or failed with no later
        success in the scope, not kept of an erased user), then newest first; and how many
        runs match."""
        last_ok = _filtered(
            select(DreamRunRow.scope_key, func.max(DreamRunRow.created_at).label("at"))
            .where(*_SUCCESSFUL_DREAM),
            f, DreamRunRow.scope_key, DreamRunRow.agent_id,
        ).group_by(DreamRunRow.scope_key).subquery()
        unresolved = or_(last_ok.c.at.is_(None), DreamRunRow.created_at > last_ok.c.at)
        # A run kept of an erased user is history: its scope is empty and never runs again.
        attention = case((and_(DreamRunRow.status.in_(ATTENTION_STATUSES), unresolved,
                               DreamRunRow.user_id.is_distinct_from(ERASED_USER)), 1), else_=0)
        stmt = _filtered(select(DreamRunRow, attention.label("attention"))
                         .outerjoin(last_ok, last_ok.c.scope_key == DreamRunRow.scope_key), f,
                         DreamRunRow.scope_key, DreamRunRow.agent_id)
        rows = self.session.execute(
            stmt.order_by(attention.desc(), *NEWEST_FIRST)
            .offset(offset).limit(limit)).all()
        total = self.session.scalar(_filtered(select(func.count()).select_from(DreamRunRow), f,
                                              DreamRunRow.scope_key, DreamRunRow.agent_id))
        return [(run, bool(flag)) for run, flag in rows], int(total or 0)

    def scopes_page(self, f: ScopeFilter, offset: int, limit: int) -> tuple[list[str], int]:
        """Scope keys with notes or runs, the most recently dreamt first; and how many match."""
        keys = union_all(
            _filtered(select(DreamRunRow.scope_key.label("key"),
                             func.max(DreamRunRow.created_at).label("at")), f,
                      DreamRunRow.scope_key, DreamRunRow.agent_id)
            .group_by(DreamRunRow.scope_key),
            _filtered(select(NoteRow.scope_key.label("key"),
                             null().cast(DreamRunRow.created_at.type).label("at")), f,
                      NoteRow.scope_key, NoteRow.agent_id).group_by(NoteRow.scope_key),
        ).subquery()
        last = func.max(keys.c.at)
        rows = self.session.execute(
            select(keys.c.key).group_by(keys.c.key)
            .order_by(last.is_(None), last.desc(), keys.c.key).offset(offset).limit(limit)
        ).scalars().all()
        total = self.session.scalar(select(func.count(func.distinct(keys.c.key))))
        return list(rows), int(total or 0)

    def notes_by_status(self, keys: list[str]) -> dict[str, dict[str, int]]:
        rows = self.session.execute(
            select(NoteRow.scope_key, NoteRow.status, func.count())
            .where(NoteRow.scope_key.in_(keys)).group_by(NoteRow.scope_key, NoteRow.status)).all()
        out: dict[str, dict[str, int]] = {}
        for key, status, n in rows:
            out.setdefault(key, {})[status] = int(n)
        return out

    def last_succeeded(self, keys: list[str]) -> dict[str, datetime]:
        rows = self.session.execute(
            select(DreamRunRow.scope_key, func.max(DreamRunRow.finished_at))
            .where(DreamRunRow.scope_key.in_(keys), *_SUCCESSFUL_DREAM)
            .group_by(DreamRunRow.scope_key)).all()
        return {k: v for k, v in rows if v is not None}

    def recent_runs(self, keys: list[str], depth: int) -> list[dict[str, Any]]:
        """The last ``depth`` runs of each scope (any status), newest first per scope, with the
        open candidates the run counted and the deferrals its phases recorded."""
        rank = func.row_number().over(partition_by=DreamRunRow.scope_key,
                                      order_by=(DreamRunRow.created_at.desc(), DreamRunRow.id))
        ranked = (select(DreamRunRow.id, DreamRunRow.scope_key, DreamRunRow.status,
                         DreamRunRow.status_reason, DreamRunRow.error, DreamRunRow.created_at,
                         DreamRunRow.dry_run, DreamRunRow.finished_at,
                         DreamRunRow.totals["open_candidates"].as_integer().label("open"),
                         rank.label("rank"))
                  .where(DreamRunRow.scope_key.in_(keys)).subquery())
        wanted = select(ranked.c.id).where(ranked.c.rank <= depth)
        deferred = (select(RunStepRow.run_id, func.sum(sum_keys(DEFERRAL_KEYS)).label("n"))
                    .where(RunStepRow.parent_id.is_(None), RunStepRow.run_id.in_(wanted))
                    .group_by(RunStepRow.run_id).subquery())
        rows = self.session.execute(
            select(ranked, deferred.c.n).outerjoin(deferred, deferred.c.run_id == ranked.c.id)
            .where(ranked.c.rank <= depth).order_by(ranked.c.scope_key, ranked.c.rank)).all()
        return [dict(r._mapping) for r in rows]

    def trend_runs(self, f: ScopeFilter, n: int) -> list[dict[str, Any]]:
        """The last ``n`` finished non-dry runs, oldest first, with their notes-after counts
        (the JSON is read for those ``n`` rows only, after the newest are picked)."""
        last = _filtered(
            select(DreamRunRow.id)
            .where(DreamRunRow.finished_at.is_not(None), DreamRunRow.dry_run.is_(False),
                   DreamRunRow.status.in_(DREAMED_RUN_STATUSES)),
            f, DreamRunRow.scope_key, DreamRunRow.agent_id,
        ).order_by(*NEWEST_FIRST).limit(n).subquery()
        rows = self.session.execute(
            _with_notes_after(select(DreamRunRow.id, DreamRunRow.scope_key, DreamRunRow.status,
                                     DreamRunRow.created_at), "after_")
            .join(last, last.c.id == DreamRunRow.id)
            .order_by(*OLDEST_FIRST)).all()
        return [dict(r._mapping) for r in rows]

    def baseline_notes(self, keys: list[str], before: datetime) -> dict[str, dict[str, int]]:
        """Each scope's notes by status after its last finished non-dry run before ``before``
        (where a multi-scope trend starts from)."""
        # Whether a run counts goes into the partition, not the WHERE: the scope's own index
        # then serves the read (a status filter would have SQLite walk the status index).
        counts = case((and_(DreamRunRow.finished_at.is_not(None), DreamRunRow.dry_run.is_(False),
                            DreamRunRow.status.in_(DREAMED_RUN_STATUSES)), 1), else_=0)
        rank = func.row_number().over(partition_by=(DreamRunRow.scope_key, counts),
                                      order_by=(DreamRunRow.created_at.desc(), DreamRunRow.id))
        ranked = (select(DreamRunRow.id, rank.label("rank"), counts.label("counts"))
                  .where(DreamRunRow.scope_key.in_(keys), DreamRunRow.created_at < before)
                  .subquery())
        rows = self.session.execute(
            _with_notes_after(select(DreamRunRow.scope_key), "")
            .join(ranked, ranked.c.id == DreamRunRow.id)
            .where(ranked.c.rank == 1, ranked.c.counts == 1)).all()
        return {r.scope_key: {s: int(getattr(r, s) or 0) for s in NOTE_STATUSES} for r in rows}

    def phase_figures(self, run_ids: list[str]) -> list[dict[str, Any]]:
        """Per run and phase: the summed counters over the phases' final attempts, and the
        model calls and tokens of every attempt, each call once (``usage.phase_step_usage``)."""
        final_parent = and_(RunStepRow.parent_id.is_(None), RunStepRow.status.in_(_FINAL_STEPS))
        columns = [func.sum(case((final_parent, _counter(k)), else_=0)).label(k)
                   for k in COUNTER_KEYS]
        rows = self.session.execute(
            select(RunStepRow.run_id, RunStepRow.phase, *columns)
            .where(RunStepRow.run_id.in_(run_ids))
            .group_by(RunStepRow.run_id, RunStepRow.phase)).all()
        usage: dict[tuple[str, str], StepUsage] = {}
        for step in phase_step_usage(self.session, run_ids=run_ids):
            key = (step.run_id, step.phase)
            usage[key] = usage.get(key, StepUsage()) + step.usage
        figures = []
        for r in rows:
            row = {k: (v if k in ("run_id", "phase") else int(v or 0))
                   for k, v in r._mapping.items()}
            u = usage.get((r.run_id, r.phase), StepUsage())
            figures.append({**row, "tokens_in": u.tokens_in, "tokens_out": u.tokens_out,
                            "calls": u.calls})
        return figures


def _with_notes_after(stmt: _S, prefix: str) -> _S:
    after = DreamRunRow.totals["notes_after"]
    return stmt.add_columns(  # type: ignore[return-value]
        *(after[s].as_integer().label(f"{prefix}{s}") for s in NOTE_STATUSES))


def sum_keys(keys: tuple[str, ...]) -> ColumnElement[int]:
    total: ColumnElement[int] = _counter(keys[0])
    for key in keys[1:]:
        total = total + _counter(key)
    return total

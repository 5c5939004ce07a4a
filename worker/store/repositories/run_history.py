"""Runs as history: what the finished runs of a scope say (the gate's last success and the
activity since, its failed runs in a row, the open-candidate counts the growth check and the
gauge read, run counts by status and phase usage for /metrics). The run's own life cycle is
``runs``."""

from __future__ import annotations

import builtins
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    String,
    Subquery,
    and_,
    case,
    cast,
    func,
    or_,
    select,
    true,
)
from sqlalchemy.orm import InstrumentedAttribute, Session

from worker.domain.types import (
    ACTIVE_RUN_STATUSES,
    DREAMED_RUN_STATUSES,
    ERASED_USER,
    JUDGING_PHASES,
    PHASES,
    REVIEW_TRIGGER,
    UNDONE_FROM,
    RunStatus,
    Scope,
)
from worker.store.chunks import chunked
from worker.store.models import DreamRunRow, NoteRow, OperationLogRow, RunStepRow
from worker.store.repositories.runs import NEWEST_FIRST
from worker.store.repositories.usage import phase_step_usage

# How many of a scope's latest dreams `latest_finished` looks through for one that judged.
_LATEST_WINDOW = 50


def ended_as(*statuses: str) -> ColumnElement[bool]:
    """Runs that ended with one of ``statuses``, whether undone since or not: an undo keeps
    what the run ended as (``UNDONE_FROM``). An undone dream still counts as the gate's last
    dream (counted as none, the next beat, minutes later, redid the changes just undone), but
    an undone failed or cancelled run dreamed nothing: counted, it held the scope back for the
    gate's hours and sessions, and ended a failure streak it was part of."""
    undone_from = DreamRunRow.totals[UNDONE_FROM].as_string()
    return or_(DreamRunRow.status.in_(statuses),
               and_(DreamRunRow.status == RunStatus.UNDONE.value, undone_from.in_(statuses)))


def gate_dreams(scope_keys: list[str], at: InstrumentedAttribute[datetime | None],
                now: datetime | None = None) -> Subquery:
    """(``scope_key``, ``at``): the latest ``at`` of each scope's runs the gate counts as its last
    dream, the one cut-off of its hours, sessions and changed notes. A non-dry run that dreamed
    (blocked too: retried every day without new activity it would trip the same guard again;
    undone since too: ``ended_as``), never a review approval's run: it applies one item a
    person approved and dreams nothing, so approving an item neither restarts the 24 h nor
    spends the sessions the next dream is for. Nor a run asked for some phases only
    (`dream run --phase prune`): it left the others for the dream, which it made wait another
    24 h and five sessions while its status said `succeeded`. With ``now`` (a `--now` given:
    the store as of then), only a dream finished by then: `dream gate --explain --now` of a past
    time counted the dreams after it, and found the scope too soon or short of sessions then
    (one still running then was no dream yet either).
    Without (the present), every dream: one a worker whose clock runs a little ahead stamped
    after this process's present still counts."""
    return (
        select(DreamRunRow.scope_key, func.max(at).label("at"))
        .where(DreamRunRow.scope_key.in_(scope_keys), dreamed(now))
        .group_by(DreamRunRow.scope_key)
        .subquery()
    )


def dreamed(now: datetime | None = None) -> ColumnElement[bool]:
    """The run is one the gate counts as a dream (``gate_dreams``), finished by ``now`` if
    given."""
    return and_(ended_as(*DREAMED_RUN_STATUSES),
                DreamRunRow.dry_run.is_(False),
                DreamRunRow.trigger != REVIEW_TRIGGER,
                every_phase_asked(),
                true() if now is None else DreamRunRow.finished_at <= now)


# The reason an erasure's cancel gives a run of the erased user's scope (``cancel_user_runs``):
# no operator's "not now", so it holds no scope (``last_cancelled_at``).
USER_ERASED_CANCEL = "cancelled: its user was erased, nothing is left in its scope"


def every_phase_asked() -> ColumnElement[bool]:
    """The run asked for every phase (its ``phases``, a JSON list, names each)."""
    listed = cast(DreamRunRow.phases, String)
    return and_(*(listed.like(f'%"{phase}"%') for phase in PHASES))


def _worker_wrote(at: InstrumentedAttribute[datetime] | None = None) -> ColumnElement[bool]:
    """The note's operation log has a row of the worker's own (an undo's, or one a run wrote:
    a dream, a review approval) stamped ``at`` (the note's ``updated_at``: the note's latest
    change is that write, as both carry the write's one clock reading); with no ``at``, an
    insert (the note is the worker's). A host's write logs under no run (``fuse-…``,
    ``remember-…``, ``erase-…``, an edit) or none at all (an import)."""
    by_run = select(DreamRunRow.id).where(DreamRunRow.id == OperationLogRow.run_id).exists()
    which = OperationLogRow.op == "insert" if at is None else OperationLogRow.created_at == at
    return (select(OperationLogRow.id)
            .where(OperationLogRow.entity == "note", OperationLogRow.entity_id == NoteRow.id,
                   which, or_(OperationLogRow.op == "undo", by_run))
            .exists())


def counts_in_streak(run: DreamRunRow) -> bool:
    """Whether ``run``, failed now, is one more in its scope's ``failure_streaks``: claimed,
    not dry, no review approval, not of an erased user, and not forced (a forced run resets
    the streak whatever it ends as)."""
    return (run.started_at is not None and not run.dry_run and not run.force
            and run.trigger != REVIEW_TRIGGER and run.user_id != ERASED_USER)


class RunHistoryRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def last_success_at(self, scope_keys: list[str], now: datetime | None = None, *,
                        ended: bool = False) -> dict[str, datetime]:
        """Start time (``ended``: end time) of each scope's last dream as the gate counts it
        (``gate_dreams``, finished by ``now`` if given), in one query."""
        if not scope_keys:
            return {}
        at = DreamRunRow.finished_at if ended else DreamRunRow.started_at
        last = gate_dreams(scope_keys, at, now)
        rows = self.session.execute(select(last.c.scope_key, last.c.at)).all()
        return {k: v for k, v in rows if v is not None}

    def last_cancelled_at(self, scope_keys: list[str],
                          now: datetime | None = None) -> dict[str, datetime]:
        """When each scope's latest cancelled run was cancelled (its end), in one query: the
        operator's cancel of a dream holds the scope for the gate's hours. A cancel of what
        would not have been a dream had it ended (``dreamed``: a dry run, a review approval, a
        run of some phases only) holds nothing, nor does an erasure's. ``now`` (a `--now`
        given): only a cancel by then."""
        if not scope_keys:
            return {}
        at = func.coalesce(DreamRunRow.finished_at, DreamRunRow.created_at)
        rows = self.session.execute(
            select(DreamRunRow.scope_key, func.max(at))
            .where(DreamRunRow.scope_key.in_(scope_keys),
                   DreamRunRow.status == RunStatus.CANCELLED.value,
                   DreamRunRow.dry_run.is_(False), DreamRunRow.trigger != REVIEW_TRIGGER,
                   every_phase_asked(),
                   DreamRunRow.status_reason.is_distinct_from(USER_ERASED_CANCEL),
                   true() if now is None else at <= now)
            .group_by(DreamRunRow.scope_key)
        ).all()
        return {k: v for k, v in rows if v is not None}

    def notes_changed_since_last_success(self, scope_keys: list[str], now: datetime,
                                         clock: datetime | None = None) -> dict[str, int]:
        """Notes the host created or changed per scope since its last dream (``gate_dreams``)
        finished (all notes for a scope never dreamed) and by ``now``: the gate's volume
        trigger, aggregated in one query. The cut-off is the run's end, so the dream's own
        changes never count as new activity, and nor does a later write of the worker's own
        (``_worker_wrote``): an undo, a review approval's run, a failed or cancelled run's
        phases. A note the host created since still counts when such a write changed it after.
        A note stamped past ``now`` (an imported ``updated_at``) has not changed yet, and would
        otherwise count after every dream. ``clock``: as ``last_success_at``'s ``now``."""
        if not scope_keys:
            return {}
        last = gate_dreams(scope_keys, DreamRunRow.finished_at, clock)

        def since(stamp: InstrumentedAttribute[datetime]) -> ColumnElement[bool]:
            return and_(stamp <= now, or_(last.c.at.is_(None), stamp > last.c.at))

        changed = and_(since(NoteRow.updated_at), ~_worker_wrote(NoteRow.updated_at))
        created = and_(since(NoteRow.created_at), ~_worker_wrote())
        rows = self.session.execute(
            select(NoteRow.scope_key, func.count())
            .outerjoin(last, last.c.scope_key == NoteRow.scope_key)
            .where(NoteRow.scope_key.in_(scope_keys), or_(changed, created))
            .group_by(NoteRow.scope_key)
        ).all()
        return {k: int(n) for k, n in rows}

    def failure_streaks(self, scope_keys: list[str] | None,
                        now: datetime | None = None) -> dict[str, tuple[int, datetime]]:
        """Per scope with any: its failed runs in a row and when the last of them ended (the
        gate's back-off), in one query. Counted: non-dry runs that were claimed (their phases
        ran) and ended failed (undone since or not: ``ended_as``), created after the scope's
        latest reset, which is its last dream (as the gate counts one) or any forced run (an
        operator's `dream run --force`, whatever it ended as). A run failed unclaimed (a broker
        that was down, no worker consuming the queue) says nothing about the scope and is left
        out, and so are cancelled runs, dry runs and review approvals: none counts, none resets;
        nor do the runs kept of an erased user (no run will end their streak). ``None``: every
        scope (the ``/metrics`` gauge). A run asked for some phases only (`dream run --phase
        prune`) is no dream, and ends no streak unless forced. With ``now`` (a `--now` given),
        only the failures ended by then (one ending later was still running, and its end made
        the scope back off from a time still to come) and resets begun (a forced one: created)
        by then."""
        if scope_keys is not None and not scope_keys:
            return {}
        keyed = DreamRunRow.scope_key.in_(scope_keys) if scope_keys is not None else true()
        by_now = true() if now is None else DreamRunRow.created_at <= now
        reset = (
            select(DreamRunRow.scope_key, func.max(DreamRunRow.created_at).label("at"))
            .where(keyed, DreamRunRow.trigger != REVIEW_TRIGGER,
                   or_(and_(DreamRunRow.force.is_(True), by_now), dreamed(now)))
            .group_by(DreamRunRow.scope_key)
            .subquery()
        )
        ended = func.coalesce(DreamRunRow.finished_at, DreamRunRow.created_at)
        rows = self.session.execute(
            select(DreamRunRow.scope_key, func.count(), func.max(ended))
            .outerjoin(reset, reset.c.scope_key == DreamRunRow.scope_key)
            .where(keyed, ended_as(RunStatus.FAILED.value),
                   DreamRunRow.user_id.is_distinct_from(ERASED_USER),
                   DreamRunRow.started_at.is_not(None), DreamRunRow.dry_run.is_(False),
                   true() if now is None else ended <= now,
                   DreamRunRow.trigger != REVIEW_TRIGGER,
                   or_(reset.c.at.is_(None), DreamRunRow.created_at > reset.c.at))
            .group_by(DreamRunRow.scope_key)
        ).all()
        return {key: (int(n), at) for key, n, at in rows}

    def held_scopes(self, scope_keys: list[str]) -> set[str]:
        """Which of these scopes a queued, running or interrupted run holds (R1), a query per
        ``IN_CHUNK`` scopes."""
        return {key for chunk in chunked(scope_keys) for key in self.session.scalars(
            select(DreamRunRow.scope_key).where(DreamRunRow.scope_key.in_(chunk),
                                                DreamRunRow.status.in_(ACTIVE_RUN_STATUSES)))}

    def latest_finished(self, scope: Scope) -> DreamRunRow | None:
        """The scope's most recently created finished dream whose decisions still stand (what
        open candidates come from): an undone run's open items went with it, a review
        approval's run plans nothing, a cancelled or failed one may have judged nothing, and a
        dry run's open items are of a scope its merges never changed, so none hides the open
        items of the dream before it (the runs the gauge reads)."""
        rows = self.session.scalars(
            select(DreamRunRow)
            .where(DreamRunRow.scope_key == scope.key, DreamRunRow.finished_at.is_not(None),
                   DreamRunRow.dry_run.is_(False),
                   DreamRunRow.status.in_(DREAMED_RUN_STATUSES),
                   DreamRunRow.trigger != REVIEW_TRIGGER)
            .order_by(*NEWEST_FIRST)
            .limit(_LATEST_WINDOW))
        # A run of other phases (``--phases prune``) judged nothing either.
        return next((r for r in rows if JUDGING_PHASES & set(r.phases or PHASES)), None)

    def open_candidates_before(self, scope: Scope, before: datetime,
                               limit: int) -> builtins.list[int]:
        """``totals.open_candidates`` of the scope's last ``limit`` finished non-dry dreams
        created before ``before``, oldest first (runs without the count are left out; a review
        approval's run, which counts none, takes no place among them)."""
        rows = self.session.scalars(
            select(DreamRunRow.totals)
            .where(DreamRunRow.scope_key == scope.key, DreamRunRow.created_at < before,
                   DreamRunRow.finished_at.is_not(None), DreamRunRow.dry_run.is_(False),
                   DreamRunRow.status.in_(DREAMED_RUN_STATUSES),
                   DreamRunRow.trigger != REVIEW_TRIGGER)
            .order_by(*NEWEST_FIRST)
            .limit(limit)
        ).all()
        counts = [t.get("open_candidates") for t in rows if t]
        return [int(c) for c in reversed(counts) if isinstance(c, int)]

    def latest_open_candidates(self, scope: Scope | None = None) -> dict[str, int]:
        """Open candidates per scope as its latest finished dream counted them (the gauge; a
        review approval's run counts none and would drop the scope from it). The runs kept of
        erased users count none: their candidates went with their notes."""
        latest = (
            select(DreamRunRow.scope_key, func.max(DreamRunRow.created_at).label("at"))
            .where(DreamRunRow.finished_at.is_not(None), DreamRunRow.dry_run.is_(False),
                   DreamRunRow.status.in_(DREAMED_RUN_STATUSES),
                   DreamRunRow.trigger != REVIEW_TRIGGER,
                   DreamRunRow.user_id.is_distinct_from(ERASED_USER),
                   # a run that judged nothing records no count (``--phases prune``)
                   DreamRunRow.totals["open_candidates"].as_integer().is_not(None))
            .group_by(DreamRunRow.scope_key)
        )
        if scope is not None:
            latest = latest.where(DreamRunRow.scope_key == scope.key)
        sub = latest.subquery()
        rows = self.session.execute(
            select(DreamRunRow.scope_key, DreamRunRow.totals)
            .join(sub, (sub.c.scope_key == DreamRunRow.scope_key)
                  & (sub.c.at == DreamRunRow.created_at))
        ).all()
        counts = {key: (totals or {}).get("open_candidates") for key, totals in rows}
        return {key: n for key, n in counts.items() if isinstance(n, int)}

    def count_by_status(self, scope: Scope | None = None) -> dict[str, int]:
        stmt = select(DreamRunRow.status, func.count()).group_by(DreamRunRow.status)
        if scope is not None:
            stmt = stmt.where(DreamRunRow.scope_key == scope.key)
        return {status: count for status, count in self.session.execute(stmt).all()}

    def changes_applied(self, run_id: str) -> int:
        """The changes a run applied, every attempt's: its operation-log rows (a note or an
        example it inserted, retired, restored or annotated)."""
        return int(self.session.scalar(
            select(func.count()).select_from(OperationLogRow)
            .where(OperationLogRow.run_id == run_id)) or 0)

    def ended_blocked(self, scope: Scope | None = None) -> int:
        """Runs that ended blocked, those undone since included (``ended_as``): what the
        ``dream_runs_blocked_total`` counter counts, which must never go back."""
        stmt = select(func.count()).select_from(DreamRunRow).where(
            ended_as(RunStatus.BLOCKED.value))
        if scope is not None:
            stmt = stmt.where(DreamRunRow.scope_key == scope.key)
        return int(self.session.scalar(stmt) or 0)

    def step_usage(self, scope: Scope | None = None) -> dict[str, dict[str, float]]:
        """Per phase: model calls and tokens (each call once) and parent-step durations."""
        parent = RunStepRow.parent_id.is_(None)
        stmt = select(
            RunStepRow.phase,
            func.coalesce(func.sum(case((parent, RunStepRow.duration_ms), else_=0.0)), 0.0),
            func.sum(case((parent & RunStepRow.duration_ms.is_not(None), 1), else_=0)),
        ).group_by(RunStepRow.phase)
        if scope is not None:
            stmt = stmt.where(RunStepRow.scope_key == scope.key)
        out = {phase: {"calls": 0.0, "tokens_in": 0.0, "tokens_out": 0.0,
                       "duration_ms_sum": float(d or 0), "duration_count": float(n or 0)}
               for phase, d, n in self.session.execute(stmt).all()}
        for row in phase_step_usage(self.session,
                                    scope_key=scope.key if scope is not None else None):
            figures = out[row.phase]
            figures["calls"] += row.usage.calls
            figures["tokens_in"] += row.usage.tokens_in
            figures["tokens_out"] += row.usage.tokens_out
        return out

"""The parent steps a run's attempt left running, ended when the attempt is lost (killed, its
lease lapsed, an erasure interrupted it, the run given up) or the run is stopped for good, and
the usage a run stopped for good spent written to its totals; ``RunRepository`` delegates
here."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, func, insert, select, update

from worker.domain.run_usage import with_usage
from worker.domain.types import PHASES, StepStatus
from worker.store.chunks import chunked
from worker.store.models import DreamRunRow, RunStepRow

_RUNS = cast(Table, DreamRunRow.__table__)
_STEPS = cast(Table, RunStepRow.__table__)
# What a run's usage is read from (``domain.run_usage.usage_totals``): every step row of it.
USAGE_COLUMNS = (_STEPS.c.id, _STEPS.c.run_id, _STEPS.c.parent_id, _STEPS.c.status,
                 _STEPS.c.model, _STEPS.c.tokens_in, _STEPS.c.tokens_out, _STEPS.c.output)
_SET_TOTALS = (update(_RUNS).where(_RUNS.c.id == bindparam("r_id"))
               .values(totals=bindparam("r_totals", type_=_RUNS.c.totals.type)))
_INSERT_STEP = insert(_STEPS)
_RUNNING = _STEPS.c.status == StepStatus.RUNNING.value
_ORDER = {p: i for i, p in enumerate(PHASES)}


def interrupt_steps(conn: Connection, run_ids: list[str], why: str, now: datetime, *,
                    resumed: bool = True) -> None:
    """The parent steps the runs' attempts left running end ``interrupted``: a terminal state
    for whoever reads the run, never a done phase (``TERMINAL_STEP``), so a retry still runs
    the phase under a step of its own. Phases run in order, so only a run's first running step
    can have started ("interrupted; why"): the later ones an in-process claim opened ahead say
    "not started; why", as the phases a Celery run never reached do.

    A step the claim opened ahead holds the claim's time until its phase finishes (which
    records when it began): an interrupted one begins when the run's last finished phase
    ended, and lasts what its children show (unknown without one: None, never 0), and one not
    started reads right after it, in phase order, so `dream runs show` lists them in run
    order. ``resumed``: the runs are retried (an interrupted waiting step hands its batch's
    calls over); False, stopped for good (it gives them up, ``_no_longer_waiting``)."""
    parents = [s for chunk in chunked(sorted(set(run_ids))) for s in conn.execute(
        select(_STEPS.c.id, _STEPS.c.run_id, _STEPS.c.phase, _STEPS.c.status,
               _STEPS.c.started_at, _STEPS.c.finished_at, _STEPS.c.output).where(
            _STEPS.c.run_id.in_(chunk), _STEPS.c.parent_id.is_(None)))]
    running = [s for s in parents if s.status == StepStatus.RUNNING.value]
    first: dict[str, Any] = {}
    for step in sorted(running, key=lambda s: _ORDER.get(s.phase, len(PHASES))):
        first.setdefault(step.run_id, step)
    ended: dict[str, datetime] = {}  # run → when its last finished phase step ended
    for s in parents:
        if s.status != StepStatus.RUNNING.value and s.finished_at is not None:
            ended[s.run_id] = max(ended.get(s.run_id, s.finished_at), s.finished_at)
    spans = _child_spans(conn, [s.id for s in first.values()])
    began: dict[str, datetime] = {}
    for step in sorted(first.values(), key=lambda s: s.id):  # in id order: row locks keep one
        at = max(step.started_at, ended.get(step.run_id, step.started_at))
        child_start, child_end = spans.get(step.id, (None, None))
        began[step.run_id] = at = min(at, child_start) if child_start is not None else at
        ms = (max(0.0, (child_end - at).total_seconds() * 1000) if child_end is not None
              else None)
        conn.execute(update(_STEPS).where(_STEPS.c.id == step.id, _RUNNING).values(
            status=StepStatus.INTERRUPTED.value, error=f"interrupted; {why}",
            started_at=at, finished_at=max(now, at), duration_ms=ms,
            output=_no_longer_waiting(step.output, resumed)))
    for s in sorted((s for s in running if s.id != first[s.run_id].id), key=lambda s: s.id):
        # Right after the interrupted phase, in phase order: where the run would have gone on.
        at = began[s.run_id] + timedelta(microseconds=_ORDER.get(s.phase, len(PHASES)) + 1)
        conn.execute(update(_STEPS).where(_STEPS.c.id == s.id, _RUNNING).values(
            status=StepStatus.INTERRUPTED.value, error=f"not started; {why}",
            started_at=at, finished_at=at))


def _no_longer_waiting(output: dict[str, Any] | None,
                       resumed: bool = True) -> dict[str, Any] | None:
    """A step's output once it is interrupted: a phase that was waiting on a batch keeps
    ``waiting`` (what it waited on) but not that as its ``reason``, which every view shows
    before the step's error ("interrupted; ..."). The calls it started that still waited in
    that batch (``model_calls_waiting``) are handed over, not failed: the attempt that resumes
    the run reads the batch and counts them there (``model_calls_handed_over``); a run stopped
    for good (not ``resumed``) releases it, and nobody settles them: ``model_calls_given_up``
    (before, they read handed over to an attempt that never came, and before that they stayed
    in ``model_calls_failed`` as if the model had been down)."""
    if not output or "waiting" not in output:
        return output
    out = dict(output)
    if out.get("reason") == out["waiting"]:
        del out["reason"]
    waiting = out.pop("model_calls_waiting", 0)
    if isinstance(waiting, int) and waiting > 0:
        failed = out.get("model_calls_failed")
        handed = min(waiting, failed) if isinstance(failed, int) else 0
        out["model_calls_failed"] = (failed or 0) - handed
        out["model_calls_handed_over" if resumed else "model_calls_given_up"] = handed
    return out


def _child_spans(conn: Connection, parent_ids: list[str]) -> dict[str, tuple[Any, Any]]:
    """Parent step id → (its children's first start, last finish), for those with children."""
    return {r.parent_id: (r.first, r.last) for chunk in chunked(sorted(parent_ids))
            for r in conn.execute(
                select(_STEPS.c.parent_id, func.min(_STEPS.c.started_at).label("first"),
                       func.max(_STEPS.c.finished_at).label("last"))
                .where(_STEPS.c.parent_id.in_(chunk)).group_by(_STEPS.c.parent_id))}


def stop_steps(conn: Connection, run_ids: list[str], why: str,
               now: datetime) -> dict[str, dict[str, Any]]:
    """``RunRepository.stop_steps``: the runs' running steps interrupted (their batch calls
    given up), a "not started" step for each phase a run never reached, and the runs' totals
    with the usage of every step they wrote (``write_usage``), from one read of their rows and
    steps per chunk of ids. The totals written, by run id."""
    interrupt_steps(conn, run_ids, why, now, resumed=False)
    runs: list[Any] = []
    steps: list[Any] = []
    for chunk in chunked(sorted(set(run_ids))):  # one statement per chunk of ids
        runs += conn.execute(select(_RUNS.c.id, _RUNS.c.scope_key, _RUNS.c.totals)
                             .where(_RUNS.c.id.in_(chunk))).all()
        steps += conn.execute(select(*USAGE_COLUMNS, _STEPS.c.phase, _STEPS.c.seq)
                              .where(_STEPS.c.run_id.in_(chunk))).all()
    written = write_usage(conn, runs, steps)
    reached = {(s.run_id, s.phase) for s in steps if s.parent_id is None}
    last = {s.run_id: s.seq for s in sorted(steps, key=lambda s: s.seq)}
    rows = []
    for run in sorted(runs, key=lambda r: r.id):
        missing = [p for p in PHASES if (run.id, p) not in reached]
        for i, phase in enumerate(missing, start=1):  # after its steps, in phase order
            at = now + timedelta(microseconds=i)
            rows.append({"id": str(uuid.uuid4()), "run_id": run.id, "parent_id": None,
                         "scope_key": run.scope_key, "phase": phase, "name": phase,
                         "seq": last.get(run.id, 0) + i, "status": StepStatus.INTERRUPTED.value,
                         "input": {}, "error": f"not started; {why}", "started_at": at,
                         "finished_at": at})
    if rows:
        conn.execute(_INSERT_STEP, rows)
    return written


def record_usage(conn: Connection, run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The runs' totals take the usage of every step they wrote so far (``write_usage``): two
    reads per chunk of ids, one executemany for all of them. The totals written, by run id."""
    runs: list[Any] = []
    steps: list[Any] = []
    for chunk in chunked(sorted(set(run_ids))):
        runs += conn.execute(select(_RUNS.c.id, _RUNS.c.totals).where(_RUNS.c.id.in_(chunk)))
        steps += conn.execute(select(*USAGE_COLUMNS).where(_STEPS.c.run_id.in_(chunk)))
    return write_usage(conn, runs, steps)


def write_usage(conn: Connection, runs: Iterable[Any],
                steps: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Each of ``runs`` (rows with ``id`` and ``totals``) stores its totals with the usage its
    ``steps`` (rows with ``USAGE_COLUMNS``, every step of those runs) record
    (``domain.run_usage.with_usage``, as ``finalize`` counts it; its other keys kept), in one
    executemany: a run stopped without ``finalize`` (cancelled, given up, its user erased)
    reported no usage at all, its spend invisible to `dream runs show`, the API and the cost
    reports that read the runs' totals. The totals written, by run id."""
    of: dict[str, list[Any]] = defaultdict(list)
    for step in steps:
        of[step.run_id].append(step)
    written = {run.id: with_usage(run.totals, of[run.id]) for run in runs}
    if written:  # in id order: row locks taken in one order
        conn.execute(_SET_TOTALS, [{"r_id": i, "r_totals": t} for i, t in sorted(written.items())])
    return written

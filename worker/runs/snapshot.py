"""One read of a run: its row, its phases' steps, its model usage and the lease epoch held.

In-process ``execute_run`` reads (or claims) it once and keeps it from phase to phase; a Celery
phase task reads it once per phase (another process may have run the phase before)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from worker.app import App
from worker.clock import utcnow
from worker.domain.run_usage import step_usages
from worker.domain.types import PHASES, RunStatus, Scope, StepStatus
from worker.domain.usage import StepUsage
from worker.errors import RunNotFound
from worker.store.models import RunStepRow

# A phase with a parent step in one of these is done for the run. ``interrupted`` is not: the
# attempt that opened that step lost the run before it finished the phase.
TERMINAL_STEP = frozenset({StepStatus.SUCCEEDED.value, StepStatus.FAILED.value,
                           StepStatus.SKIPPED.value, StepStatus.NO_ITEMS.value})


@dataclass
class Usage:
    """Model calls and tokens the run has spent, every attempt included (R15)."""

    calls: int = 0
    tokens: int = 0


@dataclass(frozen=True)
class StepRecord:
    """What the earlier executions of a phase step left waiting on a batch recorded on it: the
    next execution's finish adds its own to these, so the step's totals are the sum over its
    executions, not the last one's (R15; ``phase_run``)."""

    tokens_in: int = 0
    tokens_out: int = 0
    calls_started: int = 0
    calls_failed: int = 0
    replies_malformed: int = 0
    calls_taken_over: int = 0
    replies_rejected: int = 0
    replies_refused: int = 0
    calls_waiting: int = 0  # of calls_started, those still in a provider batch

    @classmethod
    def of(cls, tokens_in: int | None, tokens_out: int | None,
           output: dict[str, Any] | None) -> StepRecord:
        output = output or {}
        return cls(tokens_in or 0, tokens_out or 0,
                   int(output.get("model_calls_started") or 0),
                   int(output.get("model_calls_failed") or 0),
                   int(output.get("model_replies_malformed") or 0),
                   int(output.get("model_calls_taken_over") or 0),
                   int(output.get("model_replies_rejected") or 0),
                   int(output.get("model_replies_refused") or 0),
                   int(output.get("model_calls_waiting") or 0))


@dataclass
class RunSnapshot:
    run_id: str
    scope: Scope
    status: str
    epoch: int | None  # the lease epoch this executor works under; None unless running
    attempts: int
    requested: tuple[str, ...]  # the phases the run asked for (the others are skipped)
    now: datetime  # the run's clock
    dry_run: bool
    force: bool
    allow_retire: int | None
    created_at: datetime
    started_at: datetime | None
    totals: dict[str, Any] | None
    done: set[str] = field(default_factory=set)  # phases with a terminal parent step
    waiting: dict[str, str] = field(default_factory=dict)  # phase → its waiting parent step
    usage: Usage = field(default_factory=Usage)
    # Each parent step's own share of ``usage`` (step id → StepUsage, with its tokens by
    # direction): what a resumed waiting step had spent, which its heartbeat goes on from (R15).
    step_usage: dict[str, StepUsage] = field(default_factory=dict)
    # Each waiting parent step's record so far (step id → StepRecord), which its resumed
    # execution's finish adds to (kept current by an in-process executor that resumes it).
    recorded: dict[str, StepRecord] = field(default_factory=dict)
    # The scope's note counts by status before the run's first phase: the run's totals (if its
    # creator recorded them), else what its first phase step recorded (``input.notes_before``),
    # else counted by this claim and, ``unrecorded``, carried by the next phase step it starts.
    # The blast-radius guard's baseline (R20).
    notes_before: dict[str, int] | None = None
    unrecorded: bool = False
    trigger: str = "cli"
    # In-process: the parent steps this executor inserted, running, with its claim (one per
    # phase still to run; ``open_phases``): phase → the row. Such a phase starts with no
    # statement of its own; a second executor of the same epoch still fails to insert it (R4).
    opened: dict[str, dict[str, Any]] = field(default_factory=dict)


def phase_step_id(run_id: str, phase: str, epoch: int | None) -> str:
    """Deterministic per lease epoch: a duplicate executor of the same phase (a re-delivered
    message, a second ``execute_run``) fails to insert it and backs off (R4)."""
    return f"{run_id}:{phase}:{epoch}"


def parent_step_row(snap: RunSnapshot, phase: str, at: datetime) -> dict[str, Any]:
    """A phase's parent step as it starts (running); the first one of the run's first attempt
    records the scope's note counts before the run when the run row does not."""
    row: dict[str, Any] = {
        "id": phase_step_id(snap.run_id, phase, snap.epoch), "run_id": snap.run_id,
        "parent_id": None, "scope_key": snap.scope.key, "phase": phase, "name": phase,
        "seq": 0, "status": StepStatus.RUNNING.value,
        "input": {"dry_run": snap.dry_run, "now": snap.now.isoformat(),
                  **({"notes_before": snap.notes_before} if snap.unrecorded else {})},
        "started_at": at, "tokens_in": 0, "tokens_out": 0,
    }
    snap.unrecorded = False  # recorded once, on the first phase step
    return row


def next_phase_row(snap: RunSnapshot, step_id: str, at: datetime) -> dict[str, Any] | None:
    """The parent step of the phase after ``step_id``'s, as it starts; None when that was the
    last phase or the next one is done, open or waiting already."""
    after = {phase_step_id(snap.run_id, p, snap.epoch): n
             for p, n in zip(PHASES[:-1], PHASES[1:], strict=True)}
    phase = after.get(step_id)
    if phase is None or phase in snap.done or phase in snap.opened or phase in snap.waiting:
        return None
    return parent_step_row(snap, phase, at)


def finished_parent_row(snap: RunSnapshot, step_id: str, values: dict[str, Any],
                        like: dict[str, Any]) -> dict[str, Any]:
    """A parent step's finish as a row shaped like the children's it is inserted with: its
    id exists, so only the finish's own columns (``values``) are updated from it."""
    phase = like["phase"]  # the children's
    row = dict.fromkeys(like)
    row.update({"id": step_id, "run_id": snap.run_id, "parent_id": None,
                "scope_key": snap.scope.key, "phase": phase, "name": phase, "seq": 0,
                "started_at": utcnow(), **values})
    return row


def open_phases(uow: Any, snap: RunSnapshot, *, first_only: bool = False) -> None:
    """Insert a running parent step for every phase not done yet (``first_only``: for the
    first of them, a Celery run task's), in the claim's transaction (one executemany): an
    in-process executor's phases then start without a statement. Their start times are a
    microsecond apart (the steps are read back in that order); each phase's finish records
    when it really started."""
    now = utcnow()
    phases = [p for p in PHASES if p not in snap.done]
    rows = [parent_step_row(snap, p, now + timedelta(microseconds=i))
            for i, p in enumerate(phases[:1] if first_only else phases)]
    uow.writes.add_steps(rows)
    snap.opened = {r["phase"]: r for r in rows}


def read_snapshot(app: App, run_id: str) -> RunSnapshot:
    """The run as it is now (two statements); RunNotFound for an unknown id."""
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        steps = uow.runs.steps(run_id) if run.attempts else []
        return snapshot_of(run, steps)


def claim(app: App, run_id: str, *, opening: bool = False,
          first_only: bool = False) -> RunSnapshot | None:
    """Take the run's lease (queued/interrupted → running); None if it is not claimable
    (someone else claimed it first, or it finished). One statement for a fresh run: the claim,
    which returns the scope's note counts before any phase touches it too (written with the
    first phase step, see ``notes_before``); a retried run also marks and reads its steps. With
    ``opening``, one more: ``open_phases`` (every phase for an in-process executor, the first
    for a Celery run task: ``first_only``)."""
    with app.uow() as uow:
        row = uow.runs.claim_returning(run_id, utcnow(), app.settings.lease_seconds)
        if row is None:
            return None
        steps: list[RunStepRow] = []
        if row.attempts > 1:
            uow.runs.note_interrupted_steps(run_id, row.lease_epoch, utcnow())
            steps = uow.runs.steps(run_id)
        snap = snapshot_of(row, steps)
        if snap.notes_before is None:  # counted by the claim itself
            snap.notes_before = dict(row.notes_now)
            snap.unrecorded = True
        if opening:
            open_phases(uow, snap, first_only=first_only)
        uow.commit()
    return snap


def snapshot_of(run: Any, steps: Iterable[RunStepRow]) -> RunSnapshot:
    """The snapshot of a run row (or anything with its attributes) and its steps."""
    steps = list(steps)
    running = run.status == RunStatus.RUNNING.value
    epoch = run.lease_epoch if running else None
    parents = [s for s in steps if s.parent_id is None]
    mine = {phase_step_id(run.id, p, epoch): p for p in PHASES}
    by_step = step_usages(steps)
    waiting = [s for s in parents if s.id in mine and s.status == StepStatus.RUNNING.value
               and (s.output or {}).get("waiting")]
    return RunSnapshot(
        run_id=run.id, scope=Scope(run.agent_id, run.user_id, run.company_id),
        status=run.status, epoch=epoch, attempts=run.attempts,
        requested=tuple(run.phases or PHASES), now=run.clock or utcnow(), dry_run=run.dry_run,
        force=run.force, allow_retire=run.allow_retire, created_at=run.created_at,
        started_at=run.started_at, totals=run.totals,
        done={s.phase for s in parents if s.status in TERMINAL_STEP},
        waiting={mine[s.id]: s.id for s in waiting},
        usage=_summed(Usage(u.calls, u.tokens) for u in by_step.values()), step_usage=by_step,
        recorded={s.id: StepRecord.of(s.tokens_in, s.tokens_out, s.output) for s in waiting},
        notes_before=_notes_before(run.totals, parents),
        trigger=run.trigger,
    )


def _notes_before(totals: dict[str, Any] | None, parents: list[RunStepRow]) -> Any:
    if totals and "notes_before" in totals:
        return totals["notes_before"]
    for step in parents:  # oldest first
        recorded = step.input or {}
        if "notes_before" in recorded:
            return recorded["notes_before"]
    return None


def usage_of(steps: Iterable[RunStepRow]) -> Usage:
    """What the run spent, every phase's own usage summed (``usage_by_step``)."""
    return _summed(usage_by_step(steps).values())


def usage_by_step(steps: Iterable[RunStepRow]) -> dict[str, Usage]:
    """Each parent step's own usage, every execution of it included, so a retried run's budget
    starts from what the earlier attempts spent (R15).

    What a step records of its calls are views of the same calls, so the most of them is taken,
    never their sum (``domain.usage.step_usage``): ``output.usage`` (written by every lease beat
    and every finish, waiting, failed or done: the step's calls and tokens since it started,
    counted from a base that leaves a resumed step's earlier executions in),
    ``model_calls_started`` and the parent's tokens (each finish adds the step's earlier
    executions' to its own), and its committed children's model calls and tokens (a subset of
    the step's calls; more than its last beat only when an attempt was killed after a child
    committed, before the next beat). Separate executions of one step are added where they are
    recorded (``phase_run``); separate steps (a killed attempt's and its retry's) are added by
    ``usage_of``."""
    return {i: Usage(u.calls, u.tokens) for i, u in step_usages(steps).items()}


def _summed(usages: Iterable[Usage]) -> Usage:
    total = Usage()
    for u in usages:
        total.calls += u.calls
        total.tokens += u.tokens
    return total

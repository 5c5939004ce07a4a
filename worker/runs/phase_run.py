"""One phase of one run, for an executor holding the run's snapshot: order checks, the parent
step (opened with an in-process claim, else inserted fenced), the phase itself (heartbeat,
telemetry span, failures recorded, R6), the fenced finish: with the phase's children as the
last statement of the phase's own write, which the engine commits (``HeldWrite``), else alone.

``run_phase`` returns a PhaseOutcome and never re-reads the run: the snapshot it is handed is
kept current (``done``, ``waiting``) for the next phase of an in-process run."""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from worker import telemetry
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import PHASES, PhaseReport
from worker.llm.batch import BatchPending
from worker.runs.context import Budget, HeldWrite, PhaseContext, Registry, RunCarry
from worker.runs.lease import LeaseHeartbeat, keep_lease_while_waiting, lease_fence
from worker.runs.outcome import RECORDED, PhaseOutcome
from worker.runs.snapshot import (
    RunSnapshot,
    StepRecord,
    finished_parent_row,
    next_phase_row,
    parent_step_row,
    phase_step_id,
)
from worker.runs.steps import StepRecorder
from worker.safety.scrub import safe_error_message
from worker.safety.scrub import stack as error_stack
from worker.store.errors import interruption
from worker.store.uow import StaleLease, UnitOfWork

log = structlog.get_logger(__name__)

DEFAULT_RETRY_AFTER = 30.0  # seconds a WAITING phase is looked at again, unless it says


@dataclass
class Execution:
    """What one executor holds for one run: the snapshot, the run's budget in this process,
    and (in-process only) what the phases hand each other."""

    snap: RunSnapshot
    budget: Budget
    registry: Registry
    carry: RunCarry | None = None
    retry_after: float = DEFAULT_RETRY_AFTER  # set when a phase ends WAITING
    outcomes: dict[str, PhaseOutcome] = field(default_factory=dict)
    # Every step row this executor committed for the run (parents and children), when that is
    # all the run's steps (a fresh in-process run): finalize decides from it. None: read them.
    written: list[dict[str, Any]] | None = None
    begun: dict[str, datetime] = field(default_factory=dict)  # opened steps: when they began
    # Per phase step: the (calls, tokens, tokens in, tokens out) of the budget that are not the
    # step's own, taken when this executor first runs it; its heartbeat records the rest
    # (``_usage_recorder``).
    bases: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    # A Celery run task: each phase's finish also opens the next phase's step (one transaction
    # less per phase), unless the task's hand-off time (``deadline``, monotonic) has passed:
    # a phase opened so is run by this call, never handed off (``engine._execute_all``).
    open_ahead: bool = False
    deadline: float | None = None

    def wrote(self, row: dict[str, Any]) -> None:
        if self.written is not None:
            self.written.append(row)

    def finished(self, step_id: str, values: dict[str, Any]) -> None:
        for row in self.written or ():
            if row["id"] == step_id:
                row.update(values)


def run_phase(app: App, run: Execution, phase: str) -> PhaseOutcome:
    """Run ``phase`` once under the snapshot's epoch; the outcome says what happened."""
    snap = run.snap
    if snap.epoch is None:
        return PhaseOutcome.NOT_RUNNING
    if phase in snap.done:
        return PhaseOutcome.ALREADY_DONE
    if any(p not in snap.done for p in PHASES[: PHASES.index(phase)]):
        return PhaseOutcome.EARLIER_PENDING  # running elsewhere, or lost (the lease recovers it)
    step_id = phase_step_id(snap.run_id, phase, snap.epoch)
    resumed = snap.waiting.get(phase) == step_id  # a WAITING phase resumes its own step
    if snap.opened.pop(phase, None) is not None:  # inserted with the claim: started now
        run.begun[step_id] = utcnow()
    elif not resumed:
        started = _start_step(app, run, phase, step_id)
        if started is not None:
            return started
    ctx = PhaseContext(
        app=app, run_id=snap.run_id, scope=snap.scope, now=snap.now, epoch=snap.epoch,
        steps=StepRecorder(app, snap.run_id, snap.scope), dry_run=snap.dry_run,
        force=snap.force, budget=run.budget, allow_retire=snap.allow_retire, carry=run.carry,
        notes_before=snap.notes_before, trigger=snap.trigger, requested=snap.requested,
        held=HeldWrite(), step_spent=run.snap.recorded.get(step_id),
    )
    run.budget.lost = False  # asked again under this claim's epoch
    run.budget.fence = None if snap.epoch is None else lease_fence(app, snap.run_id, snap.epoch)
    base = run.bases.setdefault(step_id, _usage_base(run, step_id))
    try:
        with LeaseHeartbeat(app, snap.run_id, snap.epoch, _usage_recorder(ctx, step_id, base)):
            outcome = _execute(app, run, ctx, phase, step_id)
    except StaleLease:
        run.written = None
        # Someone else owns the run now (the gate check recovered it, or it was cancelled):
        # stop without a traceback; the parent step stays "running" until the next claim.
        log.warning("phase.lease_lost", run_id=snap.run_id, phase=phase)
        return PhaseOutcome.LEASE_LOST
    finally:
        assert ctx.held is not None
        ctx.held.discard()  # a write left unfinished (the phase stopped): nothing of it is kept
    if ctx.steps.untracked:  # a child step written outside the phase kit: finalize reads
        run.written = None
    elif run.written is not None:
        run.written.extend(ctx.steps.committed)
    if outcome in RECORDED:
        snap.done.add(phase)
        snap.waiting.pop(phase, None)
    elif outcome is PhaseOutcome.WAITING:
        snap.waiting[phase] = step_id
        keep_lease_while_waiting(app, snap.run_id, snap.epoch)
    run.outcomes[phase] = outcome
    return outcome


def _start_step(app: App, run: Execution, phase: str, step_id: str) -> PhaseOutcome | None:
    """The phase's parent step, inserted only under the held epoch (one statement); None when
    it started, else why not."""
    snap = run.snap
    assert snap.epoch is not None
    unrecorded = snap.unrecorded
    values = parent_step_row(snap, phase, utcnow())
    try:
        with app.uow() as uow:
            started = uow.runs.start_step_fenced(values, snap.epoch)
            uow.commit()
    except IntegrityError:
        snap.unrecorded = unrecorded
        log.info("phase.busy", run_id=snap.run_id, phase=phase)
        return PhaseOutcome.BUSY
    if not started:
        snap.unrecorded = unrecorded
        return PhaseOutcome.LEASE_LOST
    run.wrote(values)
    return None


def _usage_base(run: Execution, step_id: str) -> tuple[int, int, int, int]:
    """What the run's budget holds that is not the step's own: the budget started from the
    run's usage (earlier phases, earlier attempts; its tokens by direction from this process's
    charges only) and has the earlier phases of this executor on it; a resumed waiting step's
    own usage so far stays the step's."""
    spent = run.budget.spent_by_direction()
    own = run.snap.step_usage.get(step_id)
    if own is None:
        return spent
    calls, tokens, tokens_in, tokens_out = spent
    return (calls - own.calls, tokens - own.tokens, tokens_in - own.tokens_in,
            tokens_out - own.tokens_out)


def _usage_recorder(ctx: PhaseContext, step_id: str, base: tuple[int, int, int, int]) -> Any:
    """What each heartbeat writes on the open phase step: the phase's own model usage so far
    (R15), as its finish would count it (not the run's running total: the snapshot adds every
    step's usage, so earlier phases would be counted again by the next snapshot), beside what
    the step recorded (a step waiting on a batch, resumed or just left waiting, keeps its
    ``waiting``, so a re-delivered or re-scheduled task resumes it)."""
    def record(uow: UnitOfWork) -> None:
        uow.runs.record_running_usage(step_id, _own_usage(ctx.budget, base))

    return record


def _own_usage(budget: Budget, base: tuple[int, int, int, int]) -> dict[str, int]:
    """The step's model calls and tokens (their sum and by direction) since it started, its
    earlier executions included (``base`` leaves them in): what its beats and every finish
    record as ``output.usage``, so a killed attempt's step says how its tokens split."""
    spent = budget.spent_by_direction()
    return {k: now - then for k, now, then in
            zip(("calls", "tokens", "tokens_in", "tokens_out"), spent, base, strict=True)}


def _execute(app: App, run: Execution, ctx: PhaseContext, phase: str,
             step_id: str) -> PhaseOutcome:
    started = time.perf_counter()
    held = ctx.held or HeldWrite()
    if phase not in run.snap.requested:
        _finish(app, run, held, step_id, PhaseOutcome.SKIPPED, {"reason": "phase not requested"},
                started)
        return PhaseOutcome.SKIPPED
    b = ctx.budget
    before = (b.started, b.answered, b.tokens_in, b.tokens_out, b.malformed, b.taken_over,
              b.rejected, b.refused, b.estimated, b.cooling)
    bound = log.bind(run_id=ctx.run_id, scope=ctx.scope.key, phase=phase)
    try:
        with telemetry.phase_span(ctx.run_id, phase, ctx.scope.key) as span:
            report = _report(run, ctx, phase, step_id)
            span.phase_result(report.status, report.counters)
    except StaleLease:
        raise
    except Exception as exc:  # a failing phase must not stop the next one (R6)
        if interruption(exc) is not None:  # the database's, not the phase's: the engine
            raise  # gives the run back (``worker.runs.interruption``)
        return _failed(app, run, held, ctx, phase, (started, before), exc)  # with its write
    # A resumed waiting step: its finish adds this execution to what the earlier ones recorded.
    prior = run.snap.recorded.get(step_id, StepRecord())
    output = _output(report, ctx.budget, before, prior)
    _record_usage(output, _own_usage(ctx.budget, run.bases[step_id]))
    outcome = PhaseOutcome.of_report(report.status, left_for_later(output))
    if outcome is PhaseOutcome.WAITING:
        run.retry_after = float(report.counters.get("retry_after") or DEFAULT_RETRY_AFTER)
        output["waiting"] = report.reason or "waiting on a provider batch"
    wrote = held.holding
    # The step's tokens by direction as the budget charged them (``domain.usage``: what the
    # run's totals, /metrics and the dashboard count), never as the phase's report says.
    try:
        _finish(app, run, held, step_id, outcome, output, started,
                tokens=_step_tokens(prior, b, before),
                model=getattr(app.llm, "model", None)
                if report.calls or b.started > before[0] else None)
    except SQLAlchemyError as exc:
        if not wrote or interruption(exc) is not None:
            raise
        # The phase's write failed to commit (with its finish): nothing of it was kept, so the
        # run's carried scope and the steps it holds are not what the database has.
        run.written = None
        if run.carry is not None:
            run.carry.scope_notes = None
        return _failed(app, run, held, ctx, phase, (started, before), exc)
    bound.info("phase.finished", status=outcome.value,
               **{k: v for k, v in report.counters.items() if isinstance(v, int | float)})
    return outcome


def _failed(app: App, run: Execution, held: HeldWrite, ctx: PhaseContext, phase: str,
            at: tuple[float, tuple[int, ...]], exc: Exception) -> PhaseOutcome:
    """Record the phase as failed: its parent step's finish, in the phase's write if one is
    held (what it wrote before failing stays, as it would have committed). ``at``: when the
    execution started, and the budget's (started, answered, tokens in, tokens out, malformed)
    then."""
    started, before = at
    # R21: the message is scrubbed of the scope's note text; the traceback goes to the log
    # as frames only (format_exc_info would print the raw message).
    message = safe_error_message(app, ctx.scope, exc)
    log.error("phase.failed", run_id=ctx.run_id, scope=ctx.scope.key, phase=phase,
              error_type=type(exc).__name__, error=message, frames=error_stack(exc))
    step_id = phase_step_id(ctx.run_id, phase, ctx.epoch)
    # The calls it made before failing stay counted (R15): the next phase task's budget, or a
    # retry's, starts from what the steps record.
    prior = run.snap.recorded.get(step_id, StepRecord())
    # Its tokens too, by direction, as the budget charged them (it has no report to say).
    b = ctx.budget
    output = _taken_over({}, b, before, prior)
    _finish(app, run, held, step_id, PhaseOutcome.FAILED,
            _record_usage(output, _own_usage(b, run.bases[step_id])), started,
            error=f"{type(exc).__name__}: {message}", tokens=_step_tokens(prior, b, before))
    return PhaseOutcome.FAILED


def _report(run: Execution, ctx: PhaseContext, phase: str, step_id: str) -> PhaseReport:
    """The phase's report; WAITING when its questions are with a provider batch (nothing was
    written, the span says waiting rather than error)."""
    try:
        return run.registry[phase](ctx, step_id)
    except BatchPending as pending:
        # ``model_calls_waiting``: counted failed until answered, but handed over, not failed,
        # if this attempt is interrupted while it waits (``run_stops``).
        return PhaseReport(phase, PhaseOutcome.WAITING.value,
                           {"retry_after": pending.retry_after,
                            "model_calls_waiting": pending.calls}, reason=str(pending))


def _step_tokens(prior: StepRecord, budget: Budget, before: tuple[int, ...]) -> tuple[int, int]:
    """The step's token columns (in, out): its earlier executions' plus what the budget charged
    since this one began (``before``: the budget's started, answered, tokens in, out, ...)."""
    return (prior.tokens_in + budget.tokens_in - before[2],
            prior.tokens_out + budget.tokens_out - before[3])


def _record_usage(output: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    """``output`` with the step's usage, if it made model calls (a deterministic phase's output
    stays its counters)."""
    if any(usage.values()):
        output["usage"] = usage
    return output


def _output(report: PhaseReport, budget: Budget, before: tuple[int, ...],
            prior: StepRecord) -> dict[str, Any]:
    output = dict(report.counters)
    if report.reason:
        output.setdefault("reason", report.reason)
    # What finalize reads to tell "the model was down" (all calls, R27) or "partly down" (some),
    # over the step's executions: a batch's calls start in one and are answered in a later one.
    asked = budget.started - before[0]
    if started := prior.calls_started + asked:
        output["model_calls_started"] = started
        output["model_calls_failed"] = max(
            0, prior.calls_failed + asked - (budget.answered - before[1]))
        output["model_replies_malformed"] = prior.replies_malformed + budget.malformed - before[4]
        # Well-formed replies the validators rejected: with the malformed ones, what tells a
        # phase that got replies and could use none (``finalize._unusable``).
        output["model_replies_rejected"] = prior.replies_rejected + budget.rejected - before[6]
        # Refusals: no verdict either (``finalize._unusable``); only said when there were some.
        if refused := prior.replies_refused + budget.refused - before[7]:
            output["model_replies_refused"] = refused
    if cooling := budget.cooling - before[9]:  # refused or unusable lately: not asked again
        output["model_questions_cooling"] = cooling
    return _taken_over(output, budget, before, prior)


def _taken_over(output: dict[str, Any], budget: Budget, before: tuple[int, ...],
                prior: StepRecord) -> dict[str, Any]:
    """``output`` with the calls an interrupted attempt's step handed over that this step
    settled (``model_calls_taken_over``): among its calls started, answered or failed (R27),
    but the interrupted step spent them, so the step's usage leaves them out and the run
    counts each call once (``domain.usage``)."""
    if taken := prior.calls_taken_over + budget.taken_over - before[5]:
        output["model_calls_taken_over"] = taken
    # Tokens charged as estimates (no ``usage`` in a reply, a lost attempt): not counted.
    if estimated := budget.estimated - before[8]:
        output["tokens_estimated"] = estimated
    return output


def _finish(app: App, run: Execution, held: HeldWrite, step_id: str, outcome: PhaseOutcome,
            output: dict[str, Any], started: float, *, error: str | None = None,
            tokens: tuple[int, int] = (0, 0), model: str | None = None) -> None:
    """One statement: the parent step's status, counters, usage and duration, under the epoch
    (StaleLease when the run lost it: nothing is written, the held write neither), the last
    of the phase's held write if there is one, else a transaction of its own."""
    values: dict[str, Any] = {"status": outcome.step_status, "output": output, "error": error,
                              "tokens_in": tokens[0], "tokens_out": tokens[1], "model": model}
    if outcome is not PhaseOutcome.WAITING:
        values.update(finished_at=utcnow(), duration_ms=(time.perf_counter() - started) * 1000)
    if step_id in run.begun:  # opened with the claim: when the phase really began
        values["started_at"] = run.begun[step_id]
    snap = run.snap
    assert snap.epoch is not None
    write = held.take()
    with ExitStack() as ending:
        if write is None:
            uow = ending.enter_context(app.uow())
        else:
            uow = write.uow
            ending.enter_context(write.close)
        ahead = _opened_next(run, step_id, outcome)  # the next phase's start, in this commit
        apart = [] if ahead is None else [ahead]
        if write is not None and write.steps:  # the phase's children and its finish, one statement
            like = write.steps[0]
            rows = [*write.steps, finished_parent_row(snap, step_id, values, like=like)]
            if ahead is not None and ahead.keys() <= like.keys():
                rows, apart = [*rows, {**dict.fromkeys(like), **ahead}], []
            done = uow.writes.add_steps_fenced(rows, snap.run_id, snap.epoch,
                                               finishing=tuple(sorted(values)))
        else:
            # Fenced: a phase whose parent step was opened with the claim has no fenced start,
            # so its finish is where a cancel or a recovery stops the run (no later phase starts).
            done = uow.runs.finish_step_fenced(step_id, snap.run_id, snap.epoch, **values)
        if not done:
            raise StaleLease(f"run {snap.run_id} lost its lease (epoch {snap.epoch})")
        uow.writes.add_steps(apart)  # after the fenced finish
        uow.commit()
    run.begun.pop(step_id, None)
    run.finished(step_id, values)
    if ahead is not None:
        snap.opened[ahead["phase"]] = ahead
        run.wrote(ahead)
    if outcome is PhaseOutcome.WAITING:  # what this executor's resumption adds to
        snap.recorded[step_id] = StepRecord.of(tokens[0], tokens[1], output)
    else:
        snap.recorded.pop(step_id, None)


def _opened_next(run: Execution, step_id: str, outcome: PhaseOutcome) -> dict[str, Any] | None:
    """The next phase's step to open with this finish (``Execution.open_ahead``), or None: not
    a run task, the phase waits or stops the run, or the task hands off before the next one."""
    if not run.open_ahead or outcome is PhaseOutcome.WAITING or outcome.stops_run:
        return None
    if run.deadline is not None and time.monotonic() > run.deadline:
        return None
    return next_phase_row(run.snap, step_id, utcnow())


def left_for_later(output: dict[str, Any]) -> bool:
    """A step that says it deferred work (a cluster, pairs, notes to review)."""
    if output.get("verdict") == "deferred" or output.get("deferred"):
        return True
    if "budget" in str(output.get("reason") or ""):
        return True
    return any(k.endswith("_deferred") and isinstance(v, int) and v > 0 for k, v in output.items())

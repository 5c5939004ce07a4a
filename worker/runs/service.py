"""Run lifecycle services shared by the CLI, Celery tasks and the API.

The database is the source of truth: a run row is created only through the unique partial
index (R1), claimed with a fencing epoch, and each phase is recorded as a parent step so that
re-executing a finished phase is a no-op (R4).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy.exc import IntegrityError

from worker import telemetry
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.embeddings.refresh import ensure_scope_embeddings
from worker.errors import BrokerUnavailable as BrokerUnavailable  # (re-exported for callers)
from worker.errors import InvalidRun, RunNotFound
from worker.errors import RunError as RunError  # (re-exported for callers)
from worker.errors import UnknownScope as UnknownScope  # (re-exported for callers)
from worker.runs.context import Budget, PhaseContext
from worker.runs.gate import GateDecision, GatePolicy, GateRule, ScopeActivity, decide_gate
from worker.runs.lease import LeaseHeartbeat
from worker.runs.outcome import RunFacts, decide_outcome
from worker.runs.steps import StepRecorder
from worker.safety.crashpoints import crashpoint
from worker.safety.guard import GUARD_STEP
from worker.safety.scrub import safe_error_message
from worker.safety.scrub import stack as error_stack
from worker.store.models import RunStepRow
from worker.store.uow import StaleLease

log = structlog.get_logger(__name__)

LEASE_LOST = "lease_lost"
# execute_phase results after which this process stops executing the run.
STOP_RESULTS = ("busy", "waiting", "not_claimed", "run_not_running", LEASE_LOST)

TERMINAL_STEP = (
    StepStatus.SUCCEEDED.value,
    StepStatus.FAILED.value,
    StepStatus.SKIPPED.value,
    StepStatus.NO_ITEMS.value,
)


@dataclass
class GateResult:
    created: list[str]
    skipped: dict[str, str]
    retried: list[str]  # expired leases, now interrupted: to be executed again
    failed: list[str]
    # Every scope checked, due or not, with the rule that decided and why (`dream gate --explain`).
    decisions: dict[str, GateDecision] = field(default_factory=dict)
    # Queued/interrupted runs nobody claimed within DREAM_QUEUED_TIMEOUT_SECONDS (a lost broker
    # message, a creator killed before its claim, no broker at all): to be enqueued again.
    requeued: list[str] = field(default_factory=list)


def create_run(
    app: App, scope: Scope, *, trigger: str = "cli", force: bool = False, dry_run: bool = False,
    phases: list[str] | None = None, clock: datetime | None = None,
    allow_retire: int | None = None,
) -> str | None:
    """A queued run for the scope, or None if one is already queued/running/interrupted (R1).

    ``force`` skips the gate only; ``allow_retire`` is how many retirements the run may make
    past the blast-radius guard's share (R20)."""
    phases = list(phases or PHASES)
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise InvalidRun(f"unknown phase {unknown[0]!r}; choose from {', '.join(PHASES)}")
    if allow_retire is not None and allow_retire < 0:
        raise InvalidRun(f"allow_retire must be 0 or more (got {allow_retire})")
    with app.uow() as uow:
        run_id = uow.runs.create(
            scope, now=utcnow(), trigger=trigger, phases=phases, force=force,
            dry_run=dry_run, clock=clock, allow_retire=allow_retire,
        )
        uow.commit()
    if run_id:
        log.info("run.created", run_id=run_id, scope=scope.key, trigger=trigger)
    return run_id


def busy_message(app: App, scope: Scope) -> str:
    """Why a run cannot be created for the scope, naming the run that holds it and the way out."""
    with app.uow() as uow:
        run = uow.runs.active_for_scope(scope)
    if run is None:  # it finished between the refusal and this read
        return f"a run was queued or running for {scope.key}; retry"
    hint = ("resume it with `dream run --due` or cancel it"
            if run.status != RunStatus.RUNNING.value else "wait for it or cancel it")
    return (f"run {run.id} is already {run.status} for {scope.key}; {hint} with "
            f"`dream runs cancel {run.id}`")


def recover_runs(app: App, now: datetime, result: GateResult) -> None:
    """R5 + R30: runs whose lease expired become interrupted (failed after max_attempts);
    queued/interrupted runs nobody claimed in time are handed out again (failed after
    max_attempts hand-overs). Every transition is compare-and-set: a live executor wins."""
    settings = app.settings
    stale_before = now - timedelta(seconds=settings.queued_timeout_seconds)
    with app.uow() as uow:
        for run in uow.runs.expired_running(now):
            if run.attempts >= settings.max_attempts:
                if uow.runs.expire(
                    run, now, RunStatus.FAILED.value, finished_at=now, lease_expires_at=None,
                    error=f"gave up after {run.attempts} attempts (lease expired each time)",
                ):
                    result.failed.append(run.id)
            elif uow.runs.expire(run, now, RunStatus.INTERRUPTED.value, enqueued_at=now):
                result.retried.append(run.id)
        for run in uow.runs.unclaimed(enqueued_before=stale_before):
            if run.requeues >= settings.max_attempts:
                if uow.runs.finish_unclaimed(
                    run, RunStatus.FAILED.value, now,
                    error=f"never claimed after {run.requeues + 1} hand-overs of "
                          f"{settings.queued_timeout_seconds} s each (no worker consumes the "
                          "queue, or its messages were lost)",
                ):
                    result.failed.append(run.id)
            elif uow.runs.requeue(run, now):
                result.requeued.append(run.id)
        uow.commit()


def unclaimed_runs(app: App) -> list[str]:
    """Every queued or interrupted run, oldest first (what `dream run --due` executes here)."""
    with app.uow() as uow:
        return [r.id for r in uow.runs.unclaimed()]


def cancel_run(app: App, run_id: str, reason: str = "cancelled by the operator") -> str:
    """Cancel a queued, interrupted or running run and free its scope; the status it had.

    A running executor notices at its next fenced write and stops; what it applied before
    stays recorded in the operation log, so `dream undo` can still revert it."""
    now = utcnow()
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        before = run.status
        if before == RunStatus.RUNNING.value:
            done = uow.runs.cancel_running(run, now, reason)
        elif before in (RunStatus.QUEUED.value, RunStatus.INTERRUPTED.value):
            done = uow.runs.finish_unclaimed(run, RunStatus.CANCELLED.value, now,
                                             status_reason=reason)
        else:
            raise RunError(f"run {run_id} is {before}; only queued, interrupted or running runs "
                           "can be cancelled")
        if not done:
            raise RunError(f"run {run_id} changed while cancelling it; look again with "
                           f"`dream runs show {run_id}`")
        for step in uow.runs.steps(run_id):
            if step.parent_id is None and step.status == StepStatus.RUNNING.value:
                uow.runs.update_step(step.id, status=StepStatus.SKIPPED.value,
                                     error="run cancelled", finished_at=now)
        uow.commit()
    log.info("run.cancelled", run_id=run_id, was=before)
    return before


def gate_check(app: App, now: datetime | None = None) -> GateResult:
    """Create a run for every due scope; recover lost or stuck runs first (R5, R30)."""
    now = now or utcnow()
    result = GateResult([], {}, [], [])
    recover_runs(app, now, result)
    for scope, decision in decide_scopes(app, now).items():
        result.decisions[scope.key] = decision
        if not decision.due:
            result.skipped[scope.key] = decision.reason
            continue
        run_id = create_run(app, scope, trigger="beat")
        if run_id is None:
            result.skipped[scope.key] = "a run is already queued or running"
            result.decisions[scope.key] = GateDecision(
                False, f"{decision.reason}; a run is already queued or running",
                GateRule.ALREADY_ACTIVE)
        else:
            result.created.append(run_id)
    rules: dict[str, int] = {}
    for decision in result.decisions.values():
        rules[decision.rule.value] = rules.get(decision.rule.value, 0) + 1
    log.info("gate.checked", created=len(result.created), skipped=len(result.skipped),
             retried=len(result.retried), requeued=len(result.requeued),
             failed=len(result.failed), rules=rules)
    return result


def scope_gate(app: App, scope: Scope, now: datetime | None = None) -> GateDecision:
    """The gate decision for one scope (the CLI asks before an unforced run)."""
    return decide_scopes(app, now or utcnow(), [scope])[scope]


def decide_scopes(
    app: App, now: datetime, scopes: list[Scope] | None = None
) -> dict[Scope, GateDecision]:
    """The gate decision of every known scope (or of ``scopes``), read in a few bulk queries;
    creates nothing."""
    s = app.settings
    default = GatePolicy(hours=s.gate_hours, sessions=s.gate_sessions, notes=s.gate_notes,
                         idle_minutes=s.gate_idle_minutes, max_stale_hours=s.gate_max_stale_hours)
    with app.uow() as uow:
        if scopes is None:
            scopes = sorted(set(uow.sessions.scopes()) | set(uow.notes.scopes()))
        keys = [sc.key for sc in scopes]
        last = uow.runs.last_success_at(keys)
        sessions = uow.sessions.activity_since_last_success(keys)
        agents = uow.entities.fetch("agent", {sc.agent_id for sc in scopes})
        policies = {sc: default.overridden(_agent_gate(agents.get(sc.agent_id)))
                    for sc in scopes}
        # The volume count is one aggregate over notes: only paid for when some scope uses it.
        changed = (uow.runs.notes_changed_since_last_success(keys)
                   if any(p.notes is not None for p in policies.values()) else {})
    decisions: dict[Scope, GateDecision] = {}
    for scope in scopes:
        count, latest, earliest = sessions.get(scope.key, (0, None, None))
        activity = ScopeActivity(
            last_success_at=last.get(scope.key), sessions_since=count,
            notes_changed_since=changed.get(scope.key, 0), last_session_at=latest,
            pending_since=earliest,
        )
        decisions[scope] = decide_gate(now=now, policy=policies[scope], activity=activity)
    return decisions


def _agent_gate(agent: Any) -> dict[str, Any]:
    if agent is None:
        return {}
    return {"hours": agent.gate_hours, "sessions": agent.gate_sessions, "notes": agent.gate_notes,
            "idle_minutes": agent.gate_idle_minutes,
            "max_stale_hours": agent.gate_max_stale_hours}


def ensure_scope_known(app: App, scope: Scope) -> None:
    """Raise UnknownScope (one line naming the scope) unless ``scope_known``."""
    if not scope_known(app, scope):
        raise UnknownScope(f"unknown scope {scope.key}: it has no notes, sessions or runs; check "
                           "agent/user/company (None is a value, not a wildcard)")


def scope_known(app: App, scope: Scope) -> bool:
    """True if the scope has any note, session or run (a run on an unknown scope is a typo, R22)."""
    with app.uow() as uow:
        return bool(uow.notes.count_by_status(scope)) or bool(
            uow.sessions.counts_since({scope.key: None}).get(scope.key, 0)
        ) or bool(uow.runs.list(scope, limit=1))


def claim_run(app: App, run_id: str) -> int | None:
    """Take the run's lease (queued/interrupted → running). None if someone else runs it."""
    with app.uow() as uow:
        epoch = uow.runs.claim(run_id, utcnow(), app.settings.lease_seconds)
        if epoch is not None:
            # Parent steps a killed attempt left "running" stay visible, marked as interrupted.
            for step in uow.runs.steps(run_id):
                if step.parent_id is None and step.status == StepStatus.RUNNING.value:
                    uow.runs.update_step(step.id, error=f"interrupted; retried by attempt {epoch}")
        uow.commit()
    return epoch


def _done_phases(app: App, run_id: str) -> set[str]:
    with app.uow() as uow:
        return {
            s.phase for s in uow.runs.steps(run_id)
            if s.parent_id is None and s.status in TERMINAL_STEP
        }


def _phase_step_id(run_id: str, phase: str, epoch: int | None) -> str:
    # Deterministic per lease epoch: a duplicate executor of the same phase (a re-delivered
    # message, a second `execute_run`) fails to insert it and backs off (R4).
    return f"{run_id}:{phase}:{epoch}"


def _make_context(app: App, run_id: str) -> PhaseContext:
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        scope = Scope(run.agent_id, run.user_id, run.company_id)
        epoch = run.lease_epoch if run.status == RunStatus.RUNNING.value else None
        ctx = PhaseContext(
            app=app, run_id=run_id, scope=scope, now=run.clock or utcnow(), epoch=epoch,
            steps=StepRecorder(app, run_id, scope), dry_run=run.dry_run, force=run.force,
            budget=_budget_for(app, run_id), allow_retire=run.allow_retire,
        )
    return ctx


def _budget_for(app: App, run_id: str) -> Budget:
    """One Budget per run in this process. A process that did not run the earlier phases (a
    Celery chain spreads them over workers) starts from the usage those phases recorded, so the
    limit holds for the run, not per process."""
    b = app.settings.budget
    budgets = app.budgets
    if run_id not in budgets:
        calls = [c for c in (b.max_calls_per_run, b.max_calls_per_scope) if c is not None]
        tokens = [t for t in (b.max_tokens_per_run, b.max_tokens_per_scope) if t is not None]
        budget = Budget(max_calls=min(calls) if calls else None,
                        max_tokens=min(tokens) if tokens else None)
        if calls or tokens:
            with app.uow() as uow:
                budget.calls, budget.tokens = uow.runs.run_usage(run_id)
        budgets[run_id] = budget
    return budgets[run_id]


@dataclass
class _RunState:
    """What an in-process ``execute_run`` learned about its run at its first phase, so later
    phases need not re-read the run row and its steps. Valid only while the lease epoch it was
    read under is still held (checked with one cheap query per phase)."""

    scope: Scope
    now: datetime
    epoch: int
    dry_run: bool
    force: bool
    allow_retire: int | None
    phases: list[str]
    done: set[str]
    embedded: bool = False  # ensure_scope_embeddings ran for this run in this process

    def context(self, app: App, run_id: str) -> PhaseContext:
        return PhaseContext(
            app=app, run_id=run_id, scope=self.scope, now=self.now, epoch=self.epoch,
            steps=StepRecorder(app, run_id, self.scope), dry_run=self.dry_run, force=self.force,
            budget=_budget_for(app, run_id), allow_retire=self.allow_retire,
        )


def execute_phase(app: App, run_id: str, phase: str,
                  _cache: dict[str, _RunState] | None = None) -> str:
    """Run one phase of a run; record its failure as a failed step and return normally (R6).

    ``_cache`` (``execute_run`` only) carries the run's state from phase to phase in this
    process; any doubt (lease lost, a duplicate start) falls back to re-reading everything.
    """
    state = _cache.get("state") if _cache is not None else None
    if state is not None:
        with app.uow() as uow:
            holds = uow.runs.holds_lease(run_id, state.epoch)
        if not holds:
            assert _cache is not None
            _cache.pop("state", None)
            state = None
    if state is None:
        with app.uow() as uow:
            run = uow.runs.get(run_id)
            if run is None:
                raise RunNotFound(run_id)
            status = run.status
            phases = list(run.phases or PHASES)
        if status in (RunStatus.QUEUED.value, RunStatus.INTERRUPTED.value):
            if claim_run(app, run_id) is None:
                return "not_claimed"
        elif status != RunStatus.RUNNING.value:
            return "run_not_running"
        done = _done_phases(app, run_id)
        ctx = _make_context(app, run_id)
        if _cache is not None and ctx.epoch is not None:
            state = _RunState(ctx.scope, ctx.now, ctx.epoch, ctx.dry_run, ctx.force,
                              ctx.allow_retire, phases, done)
            _cache["state"] = state
    else:
        done, phases = state.done, state.phases
        ctx = state.context(app, run_id)
    wanted = phase in phases
    if phase in done:
        return "already_done"
    if any(p not in done for p in PHASES[: PHASES.index(phase)]):
        return "waiting"  # an earlier phase is still running elsewhere or was lost
    bound = log.bind(run_id=run_id, scope=ctx.scope.key, phase=phase)
    try:
        step_id = ctx.steps.start_phase(
            phase, {"dry_run": ctx.dry_run, "now": ctx.now.isoformat()},
            step_id=_phase_step_id(run_id, phase, ctx.epoch),
        )
    except IntegrityError:
        if _cache is not None and _cache.pop("state", None) is not None:
            # Someone else started this phase under our epoch: decide on fresh reads.
            return execute_phase(app, run_id, phase)
        bound.info("phase.busy")
        return "busy"
    try:
        with LeaseHeartbeat(app, run_id, ctx.epoch):
            result = _run_phase(app, ctx, phase, step_id, wanted, state, bound)
    except StaleLease:
        # Someone else owns the run now (the gate check recovered it, or it was cancelled):
        # stop here without a traceback; the parent step stays "running" until the next claim.
        if _cache is not None:
            _cache.pop("state", None)
        return LEASE_LOST
    if state is not None:
        state.done.add(phase)
    return result


def _run_phase(app: App, ctx: PhaseContext, phase: str, step_id: str, wanted: bool,
               state: _RunState | None, bound: Any) -> str:
    if not wanted:
        ctx.steps.finish_phase(step_id, status=StepStatus.SKIPPED.value,
                               output={"reason": "phase not requested"}, started=time.perf_counter())
        return StepStatus.SKIPPED.value
    started = time.perf_counter()
    calls_before = (ctx.budget.started, ctx.budget.answered)
    try:
        if phase in ("consolidate", "contradictions"):
            # In-process, the second ensure is skipped: contradictions re-embeds lazily when
            # its load finds a note without a vector (one the host added in between).
            if state is None or not state.embedded:
                ensure_scope_embeddings(app, ctx.scope)
            if state is not None:
                state.embedded = True
        with telemetry.phase_span(ctx.run_id, phase, ctx.scope.key) as span:
            report: PhaseReport = _registry()[phase](ctx, step_id)
            span.phase_result(report.status, report.counters)
    except StaleLease:
        bound.warning("phase.lease_lost")
        raise
    except Exception as exc:  # a failing phase must not stop the next one (R6)
        # R21: the message is scrubbed of the scope's note text; the traceback goes to the log
        # as frames only (format_exc_info would print the raw message).
        message = _safe_message(app, ctx.scope, exc)
        bound.error("phase.failed", error_type=type(exc).__name__, error=message,
                    frames=error_stack(exc))
        ctx.steps.finish_phase(
            step_id, status=StepStatus.FAILED.value, output={}, started=started,
            error=f"{type(exc).__name__}: {message}",
        )
        return StepStatus.FAILED.value
    output = dict(report.counters)
    if report.reason:
        output.setdefault("reason", report.reason)
    # What finalize reads to tell "the model was down all run" from a quiet run (R27).
    asked = ctx.budget.started - calls_before[0]
    if asked:
        output["model_calls_started"] = asked
        output["model_calls_failed"] = asked - (ctx.budget.answered - calls_before[1])
    ctx.steps.finish_phase(
        step_id, status=report.status, output=output, started=started,
        tokens_in=report.tokens_in, tokens_out=report.tokens_out,
        model=getattr(app.llm, "model", None) if report.calls else None,
    )
    bound.info("phase.finished", status=report.status, **{k: v for k, v in report.counters.items()
                                                          if isinstance(v, int | float)})
    return report.status


def _safe_message(app: App, scope: Scope, exc: Exception) -> str:
    # Exception messages can quote note text (e.g. a database error echoing a row, a model
    # client quoting the prompt): first line only, every word shared with a note of the scope
    # masked, at most 200 characters; the type name always comes first on the step.
    return safe_error_message(app, scope, exc)


def _registry() -> dict[str, Any]:
    from worker.phases import phase_registry

    return phase_registry()


def finalize_run(app: App, run_id: str) -> str:
    """Set the run's final status and totals from its steps, and release the lease."""
    crashpoint("run.before_finalize")
    app.budgets.pop(run_id, None)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        if run.status != RunStatus.RUNNING.value:
            return run.status
        steps = uow.runs.steps(run_id)
        parents = [s for s in steps if s.parent_id is None]
        if not {s.phase for s in parents if s.status in TERMINAL_STEP} >= set(PHASES):
            return run.status  # a phase is still running elsewhere, or was lost (lease recovers it)
        # The latest attempt of each phase decides; an interrupted attempt's step is history.
        parents = [s for s in parents if s.status in TERMINAL_STEP]
        scope = Scope(run.agent_id, run.user_id, run.company_id)
        open_now = sum(1 for s in steps
                       if s.parent_id is not None and (s.output or {}).get("verdict") == "open")
        outcome = decide_outcome(RunFacts(
            phase_statuses={s.phase: s.status for s in parents},
            guard_reasons=[str((s.output or {}).get("reason")) for s in steps
                           if s.parent_id is not None and s.name == GUARD_STEP],
            budget_exhausted=_budget_left_work(app, uow, run_id, steps),
            model_calls=sum(int((s.output or {}).get("model_calls_started") or 0)
                            for s in parents),
            model_calls_failed=sum(int((s.output or {}).get("model_calls_failed") or 0)
                                   for s in parents),
            model_failure=_model_failure(steps),
            open_candidates=open_now,
            open_history=uow.runs.open_candidates_before(
                scope, run.created_at, app.settings.open_growth_runs - 1),
            growth_runs=app.settings.open_growth_runs, dry_run=run.dry_run,
        ))
        status = outcome.status
        totals = {
            "notes_after": uow.notes.count_by_status(scope),
            "tokens_in": sum(s.tokens_in for s in steps),
            "tokens_out": sum(s.tokens_out for s in steps),
            "phase_ms": {s.phase: round(s.duration_ms or 0.0, 1) for s in parents},
            "phases": {s.phase: s.status for s in parents},
            # Wall time of the run (first claim → finalize), including time between phases.
            "duration_ms": round((utcnow() - run.started_at).total_seconds() * 1000, 1)
            if run.started_at else None,
            # What the gauges and the growth check read (R27).
            "open_candidates": open_now,
            "flags": outcome.flags,
        }
        if run.totals:
            totals = {**run.totals, **totals}
        uow.runs.set_status(run_id, status, finished_at=utcnow(), totals=totals,
                            lease_expires_at=None, status_reason=outcome.reason)
        uow.commit()
    log.info("run.finished", run_id=run_id, status=status, flags=outcome.flags)
    return status


def _budget_left_work(app: App, uow: Any, run_id: str, steps: list[RunStepRow]) -> str | None:
    """What ran out, when the run left work for lack of model budget: the run's own limit ("N
    of M model calls"; usage from the steps, so it holds for a run spread over Celery
    processes), else a phase's own limit (its parent step says so)."""
    b = app.settings.budget
    calls_limits = [c for c in (b.max_calls_per_run, b.max_calls_per_scope) if c is not None]
    token_limits = [t for t in (b.max_tokens_per_run, b.max_tokens_per_scope) if t is not None]
    if calls_limits or token_limits:
        calls, tokens = uow.runs.run_usage(run_id)
        spent = None
        if calls_limits and calls >= min(calls_limits):
            spent = f"{calls} of {min(calls_limits)} model calls"
        elif token_limits and tokens >= min(token_limits):
            spent = f"{tokens} of {min(token_limits)} tokens"
        if spent is not None and any(_left_for_later(s) for s in steps):
            return spent
    for step in steps:
        reason = str((step.output or {}).get("reason") or "")
        if step.parent_id is None and "budget exhausted" in reason:
            return f"the {step.phase} phase's limit, work deferred"
    return None


def _model_failure(steps: list[RunStepRow]) -> str | None:
    """The first endpoint failure a step recorded, as the client worded it ("model endpoint
    failed after 2 attempts (APIConnectionError)"): the client's own words, never note text."""
    for step in steps:
        reason = str((step.output or {}).get("reason") or "")
        at = reason.find("model endpoint ")
        if at >= 0:
            return reason[at:].split(";")[0][:160]
    return None


def _left_for_later(step: RunStepRow) -> bool:
    """A step that says it deferred work (a cluster, pairs, notes to review)."""
    output = step.output or {}
    if output.get("verdict") == "deferred" or output.get("deferred"):
        return True
    if "budget" in str(output.get("reason") or ""):
        return True
    return any(k.endswith("_deferred") and isinstance(v, int) and v > 0 for k, v in output.items())


def record_before(app: App, run_id: str) -> None:
    """Snapshot the scope's note counts by status before the first phase touches it."""
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if run is None or (run.totals and "notes_before" in run.totals):
            return
        scope = Scope(run.agent_id, run.user_id, run.company_id)
        # Only the totals: writing the status read above back could undo a concurrent claim.
        uow.runs.set_totals(run_id, {"notes_before": uow.notes.count_by_status(scope)})
        uow.commit()


def execute_run(app: App, run_id: str) -> str:
    """The whole run in this process: every phase in order, then finalize."""
    with telemetry.run_span(run_id) as span:
        record_before(app, run_id)
        crashpoint("run.before_claim")  # R30: a creator killed here leaves a queued run behind
        cache: dict[str, _RunState] = {}
        for phase in PHASES:
            if execute_phase(app, run_id, phase, cache) in STOP_RESULTS:
                break  # another executor holds this run (or it was cancelled); it finalizes
        status = finalize_run(app, run_id)
        span.set(dream__run__status=status)
        return status


def abandon_run(app: App, run_id: str, reason: str) -> None:
    """A queued run that never reached the broker: mark it failed at once, so the user who asked
    for it sees why and the scope is free (rather than waiting for the gate check's timeout)."""
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if run is not None and run.status == RunStatus.QUEUED.value:
            uow.runs.set_status(run_id, RunStatus.FAILED.value, finished_at=utcnow(), error=reason)
            uow.commit()
    log.warning("run.abandoned", run_id=run_id, reason=reason)

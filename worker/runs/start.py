"""Start a dream for one scope: the one path the CLI, the HTTP API and the MCP server share.

Validate the request, refuse an unknown scope (a typo must not create a run), apply the gate
unless forced, create one queued run (R1), then execute it here, on a thread here, or on Celery.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

import structlog

from worker.app import App
from worker.domain.types import PHASES, RunStatus, Scope
from worker.errors import ConfigError, Conflict, InvalidRun
from worker.runs import service
from worker.runs.decide import GateClosed
from worker.runs.gate import GateDecision
from worker.runs.interruption import RunInterrupted
from worker.runs.snapshot import RunSnapshot
from worker.runs.stops import stops_held
from worker.safety.scrub import stack

log = structlog.get_logger(__name__)

MAX_ALLOW_RETIRE = 10_000_000
# How each shell says "run it anyway" when the gate says not yet.
_FORCE_HINT = {"cli": "use --force to run anyway", "api": "send force=true",
               "mcp": "call start_dream with force=true"}


class Via(StrEnum):
    """Where a started run executes."""

    HERE = "here"  # now, in this call (the CLI's default); returns once the run is done
    THREAD = "in_process"  # a daemon thread of this process (a server without a broker)
    CELERY = "celery"  # the broker's workers


@dataclass(frozen=True)
class RunRequest:
    scope: Scope
    trigger: str  # cli | api | mcp: recorded on the run
    force: bool = False  # skip the gate (never the lease, never the blast-radius guard)
    dry_run: bool = False
    allow_retire: int | None = None
    phases: tuple[str, ...] = field(default=())  # empty: all of them
    clock: datetime | None = None  # the gate's and the archive rules' "now"


@dataclass(frozen=True)
class StartedRun:
    run_id: str
    mode: Via
    status: str  # queued, or for Via.HERE the status the run finished with


class NotDue(Conflict):
    """The gate says not yet; nothing was written. ``decision`` says which rule and why."""

    def __init__(self, message: str, decision: GateDecision) -> None:
        super().__init__(message)
        self.decision = decision


def default_via(app: App) -> Via:
    """A long-running server hands runs to Celery when a broker is configured, else a thread."""
    return Via.CELERY if app.settings.broker_url else Via.THREAD


def start_run(app: App, request: RunRequest, via: Via | None = None) -> StartedRun:
    """One run for ``request.scope``, executed ``via`` (default: ``default_via``).

    Raises InvalidRun (a value no run can use), UnknownScope, NotDue (gate, not forced),
    Conflict (the scope already has a run), ConfigError / BrokerUnavailable (Celery asked for
    but not there). Every refusal comes before anything is written."""
    via = via or default_via(app)
    check_request(request)
    if via is Via.CELERY:
        require_broker(app)
    service.ensure_scope_known(app, request.scope)
    if not request.force:
        _refuse_unless_due(request, service.scope_gate(app, request.scope, now=request.clock,
                                                       writing=not request.dry_run))
    # A run executed here starts claimed (one statement for create and claim); Celery's
    # workers claim theirs. Here, a stop from its creation until the engine's give-back covers
    # it waits for that give-back (worker.runs.stops): never a run left running by a stop.
    create = service.create_run if via is Via.CELERY else service.create_claimed_run
    with stops_held() if via is Via.HERE else nullcontext():
        try:  # the gate asked again once the insert holds the scope (``create.regate``)
            run = create(
                app, request.scope, trigger=request.trigger, force=request.force,
                dry_run=request.dry_run, phases=list(request.phases) or None,
                clock=request.clock, allow_retire=request.allow_retire,
                gated=not request.force)
        except GateClosed as closed:
            _refuse_unless_due(request, closed.decision)
            raise
        if run is None:
            raise Conflict(service.busy_message(app, request.scope))
        run_id = run if isinstance(run, str) else run.run_id
        return StartedRun(run_id, via, dispatch_run(app, run, via))


def _refuse_unless_due(request: RunRequest, decision: GateDecision) -> None:
    """NotDue, naming the gate's reason and how this shell forces a run, unless due."""
    if not decision.due:
        hint = _FORCE_HINT.get(request.trigger, "force it to run anyway")
        raise NotDue(f"not due for {request.scope.key}: {decision.reason}; {hint}", decision)


def check_request(request: RunRequest) -> None:
    unknown = [p for p in request.phases if p not in PHASES]
    if unknown:
        raise InvalidRun(f"unknown phase {unknown[0]!r}; choose from {', '.join(PHASES)}")
    allow = request.allow_retire
    if allow is not None and (isinstance(allow, bool) or not 0 <= allow <= MAX_ALLOW_RETIRE):
        raise InvalidRun(f"allow_retire must be a whole number from 0 to {MAX_ALLOW_RETIRE} "
                         "(the count a blocked run's reason names)")


def require_broker(app: App) -> None:
    """ConfigError without DREAM_BROKER_URL, BrokerUnavailable if it does not answer."""
    if not app.settings.broker_url:
        raise ConfigError("running on Celery needs a broker: set DREAM_BROKER_URL "
                          "(e.g. redis://127.0.0.1:6379/0)")
    from worker.tasks import check_broker

    check_broker(app.settings.broker_url)


def dispatch_run(app: App, run: str | RunSnapshot, via: Via) -> str:
    """Execute a queued run (an id) or one created claimed (its snapshot; not for Celery)
    ``via``; the run's status afterwards (queued unless Via.HERE)."""
    if via is Via.HERE:
        return service.execute_run(app, run)
    run_id = run if isinstance(run, str) else run.run_id
    if via is Via.CELERY:
        from worker.tasks import enqueue_run

        enqueue_run(run_id, app)  # this process's App: no second engine to enqueue
        return RunStatus.QUEUED.value

    def work() -> None:
        try:
            service.execute_run(app, run)
        except RunInterrupted as lost:  # the database's: given back, resumed later (no bug)
            log.warning("run.thread_interrupted", run_id=run_id, error=str(lost))
        except Exception as exc:  # the run row records phase failures; this is a last resort
            # No raw message or traceback text: either can quote note content (R21).
            log.error("run.thread_failed", run_id=run_id, error_type=type(exc).__name__,
                      frames=stack(exc))

    thread = threading.Thread(target=work, name=f"dream-run-{run_id[:8]}", daemon=True)
    app.threads.append(thread)
    thread.start()
    return RunStatus.QUEUED.value

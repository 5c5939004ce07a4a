"""Start a dream for a scope from a long-running shell (HTTP API, MCP server): the gate unless
forced, one queued run, then Celery when a broker is configured, else a thread in this process."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import structlog

from worker.app import App
from worker.domain.types import Scope
from worker.runs import service
from worker.safety.scrub import stack

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class StartedRun:
    run_id: str
    mode: str  # celery | in_process


def start_run(app: App, scope: Scope, *, trigger: str, force: bool = False,
              dry_run: bool = False, allow_retire: int | None = None) -> StartedRun:
    """RunError (one line) when the scope is unknown (UnknownScope: a typo must not create a
    run, as in the CLI), not due and not forced, or already has a run."""
    service.ensure_scope_known(app, scope)
    if not force:
        decision = service.scope_gate(app, scope)
        if not decision.due:
            raise service.RunError(f"not due for {scope.key}: {decision.reason}; send force=true")
    run_id = service.create_run(app, scope, trigger=trigger, force=force, dry_run=dry_run,
                                allow_retire=allow_retire)
    if run_id is None:
        raise service.RunError(service.busy_message(app, scope))
    return StartedRun(run_id, dispatch_run(app, run_id))


def dispatch_run(app: App, run_id: str) -> str:
    """Hand a queued run to Celery, or execute it on a daemon thread here; returns the mode."""
    if app.settings.broker_url:
        from worker.tasks import enqueue_run

        enqueue_run(run_id)
        return "celery"

    def work() -> None:
        try:
            service.execute_run(app, run_id)
        except Exception as exc:  # the run row records phase failures; this is a last resort
            # No raw message or traceback text: either can quote note content (R21).
            log.error("run.thread_failed", run_id=run_id, error_type=type(exc).__name__,
                      frames=stack(exc))

    thread = threading.Thread(target=work, name=f"dream-run-{run_id[:8]}", daemon=True)
    app.extras.setdefault("api_threads", []).append(thread)
    thread.start()
    return "in_process"

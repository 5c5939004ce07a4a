"""Dream runs: list, show, start (worker.runs.start, as the CLI does), cancel, undo."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from worker.api.deps import (
    Caller,
    DreamApp,
    check_undoable_by,
    runs_filter,
    scope_for,
    visible_run,
)
from worker.api.schemas import RunIn, UndoIn
from worker.clock import parse_timestamp
from worker.domain.limits import ID_MAX
from worker.domain.types import RunStatus
from worker.errors import InvalidInput

router = APIRouter(prefix="/api/runs", tags=["runs"])
# A run id is an id like any other (422 past 64 characters, as the CLI's usage error), not a
# run that might exist (404).
RunId = Annotated[str, Path(max_length=ID_MAX, pattern=r"^[^\x00]+$", description="A run id")]


@router.get("")
def list_runs(
    who: Caller, app: DreamApp,
    scope: str | None = Query(None, description='One scope, by key: ["agent",null,null]'),
    agent_id: str | None = Query(None, description="Every scope of this agent."),
    user_id: str | None = Query(None, description="Every scope of this user."),
    company_id: str | None = Query(None, description="Every scope of this company."),
    # An enum, not a string: a status no run can have (a typo, the wrong case) is a 422, never
    # an empty list an alert polling for blocked runs would read as "none".
    status: RunStatus | None = Query(None, description="Only runs in this status."),
    since: str | None = None,
    limit: int = Query(50, ge=1, le=500),
    after: str | None = Query(None, max_length=ID_MAX, pattern=r"^[^\x00]+$",
                              description="The 'next' id of the page before."),
) -> dict[str, Any]:
    """Newest first (runs created together by scope key, then id); a scoped token's own only.
    ``next``: the ``after`` of the following page, null on the last."""
    from worker.reporting import check_filter_known, list_runs_page

    wanted, within = runs_filter(who, scope, agent_id, user_id, company_id)
    when = None
    if since:
        try:
            when = parse_timestamp(since)
        except ValueError as exc:
            raise InvalidInput(f"since: {exc}") from None
    page = list_runs_page(app, scope=wanted, status=status.value if status else None,
                          since=when, limit=limit, within=within, after=after)
    if not page["runs"] and after is None and who.scope is None:
        check_filter_known(app, wanted, within)
    return page


@router.get("/{run_id}")
def show_run(run_id: RunId, who: Caller, app: DreamApp) -> dict[str, Any]:
    return visible_run(app, run_id, who)


@router.post("", status_code=202)
def start_run(body: RunIn, who: Caller, app: DreamApp) -> dict[str, Any]:
    """Create a run; Celery executes it when DREAM_BROKER_URL is set, else a thread here."""
    from worker.runs.start import RunRequest
    from worker.runs.start import start_run as start

    started = start(app, RunRequest(scope_for(who, body.scope), trigger="api", force=body.force,
                                    dry_run=body.dry_run, allow_retire=body.allow_retire))
    return {"run_id": started.run_id, "status": started.status, "mode": started.mode.value}


@router.post("/{run_id}/cancel")
def cancel(run_id: RunId, who: Caller, app: DreamApp) -> dict[str, Any]:
    """Cancel a queued, interrupted or running run and free its scope (409 if finished), then
    release its provider batches (``batches``: what was done, or what is left and why)."""
    from worker.runs.service import cancel_run

    visible_run(app, run_id, who)
    done = cancel_run(app, run_id, f"cancelled through the API by {who.label}")
    status = done.was if done.was == RunStatus.FAILED.value else RunStatus.CANCELLED.value
    return {"run_id": run_id, "status": status, "was": done.was,
            "batches": [{**b.release.as_dict(), "submission": b.submission, "line": b.line()}
                        for b in done.batches]}


@router.post("/{run_id}/undo")
def undo(run_id: RunId, who: Caller, app: DreamApp, body: UndoIn | None = None) -> dict[str, Any]:
    """Revert every change the run made (409, nothing changed, if a note changed since)."""
    from worker.safety.undo import undo_run

    check_undoable_by(app, run_id, who)
    return undo_run(app, run_id, force_cascade=bool(body and body.force_cascade),
                    by=f"api:{who.label}").as_dict()

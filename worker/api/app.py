"""FastAPI app factory: the host API and ops endpoints; the dashboard is worker.api.dashboard.

Routes only translate HTTP into calls to worker.host / worker.runs / worker.reporting.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import structlog
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from sqlalchemy import text

from worker.api import dashboard, metrics, review_page, review_routes
from worker.api.auth import Principal, authenticate, bearer, parse_tokens
from worker.api.guards import BodyLimit, ScrubbedErrors
from worker.api.schemas import CandidatesIn, FuseIn, KeepApartIn, NoteIn, RunIn, ScopeIn, UndoIn
from worker.app import App
from worker.clock import parse_timestamp
from worker.domain.limits import scope_problem
from worker.domain.types import RunStatus, Scope
from worker.errors import DreamError, InvalidInput, NotFound, Unauthorized
from worker.host import fuse, fusion_candidates, keep_apart, remember
from worker.runs.service import ensure_scope_known

log = structlog.get_logger(__name__)


def principal(request: Request) -> Principal:
    """The caller behind the bearer token, or 401."""
    found = authenticate(request.app.state.tokens, bearer(request.headers.get("authorization")))
    if found is None:
        raise Unauthorized("missing or unknown bearer token")
    return found


Caller = Annotated[Principal, Depends(principal)]


def create_api(app: App) -> FastAPI:
    """One FastAPI application over an already-built App (settings, engine, embedder)."""
    tokens = parse_tokens(app.settings.api_tokens)
    api = FastAPI(title="dream-worker host API", version="1",
                  description="Fusion candidates and fuse, write-time dedup, dream runs. Every "
                              "endpoint except /healthz needs `Authorization: Bearer <token>`.")
    api.state.app = app
    api.state.tokens = tokens

    @api.exception_handler(DreamError)
    async def _dream_error(request: Request, exc: DreamError) -> Response:
        # One mapping for every expected error: the class decides the status (worker.errors).
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        return JSONResponse({"error": exc.code, "detail": str(exc)}, status_code=exc.status,
                            headers=headers)

    @api.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI's default echoes the offending input back, which fails to encode for NaN or a
        # lone surrogate (a 500 whose traceback quoted the text); name the field and the rule only.
        return JSONResponse({"error": "invalid", "detail": validation_detail(exc.errors())},
                            status_code=422)

    @api.middleware("http")
    async def _access_log(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        response: Response = await call_next(request)
        # Path only: the query string may carry the dashboard token.
        log.info("api.request", method=request.method, path=request.url.path,
                 status=response.status_code, ms=round((time.perf_counter() - started) * 1000, 1))
        return response

    # Outermost last: the size limit runs before anything reads the body or the token.
    api.add_middleware(ScrubbedErrors)
    api.add_middleware(BodyLimit, max_bytes=app.settings.api_max_body_bytes)

    # ---- fusion ---------------------------------------------------------------------------
    @api.post("/api/forgetting/fusion-candidates", tags=["forgetting"])
    def candidates(body: CandidatesIn, who: Caller) -> dict[str, Any]:
        """Similar active pairs of a scope plus open items the rule-based judge left."""
        scope = _scope_for(who, body.scope)
        ensure_scope_known(app, scope)
        return {"candidates": fusion_candidates(app, scope, body.threshold, body.limit)}

    @api.post("/api/forgetting/fuse", status_code=201, tags=["forgetting"])
    def fuse_notes(body: FuseIn, who: Caller) -> dict[str, Any]:
        """Replace the sources with the host's fused text in one transaction."""
        result = fuse(app, body.source_ids, body.fused_content, body.fused_importance,
                      body.strict, allowed_scope=who.scope, note_type=body.type)
        return {"note": result.note, "superseded": result.superseded, "warnings": result.warnings}

    @api.post("/api/forgetting/keep-apart", tags=["forgetting"])
    def keep_notes_apart(body: KeepApartIn, who: Caller) -> dict[str, Any]:
        """Never offer these notes together again until one of them changes."""
        return keep_apart(app, body.source_ids, allowed_scope=who.scope)

    # ---- notes ----------------------------------------------------------------------------
    @api.post("/api/notes", tags=["notes"])
    def add_note(body: NoteIn, who: Caller, response: Response) -> dict[str, Any]:
        """Write-time dedup: NOOP (already known), UPDATE (supersedes a shorter one) or ADD."""
        result = remember(app, _scope_for(who, body.scope), body.content, body.type,
                          body.importance)
        response.status_code = 200 if result.action == "NOOP" else 201
        return result.as_dict()

    # ---- runs -----------------------------------------------------------------------------
    @api.get("/api/runs", tags=["runs"])
    def list_runs(
        who: Caller, scope: str | None = Query(None, description='Scope key, e.g. ["agent",null,null]'),
        agent_id: str | None = None, user_id: str | None = None, company_id: str | None = None,
        status: str | None = None, since: str | None = None,
        limit: int = Query(50, ge=1, le=500),
    ) -> dict[str, Any]:
        from worker.reporting import list_runs as _list

        wanted = _query_scope(scope, agent_id, user_id, company_id)
        if who.scope is not None:
            if wanted is not None and wanted != who.scope:
                raise NotFound("no such scope")
            wanted = who.scope
        when = None
        if since:
            try:
                when = parse_timestamp(since)
            except ValueError as exc:
                raise InvalidInput(f"since: {exc}") from None
        if status is not None and ("\x00" in status or len(status) > 16):
            raise InvalidInput("unknown status")
        return {"runs": _list(app, scope=wanted, status=status, since=when, limit=limit)}

    @api.get("/api/runs/{run_id}", tags=["runs"])
    def show_run(run_id: str, who: Caller) -> dict[str, Any]:
        return _visible_run(app, run_id, who)

    @api.post("/api/runs", status_code=202, tags=["runs"])
    def start_run(body: RunIn, who: Caller) -> dict[str, Any]:
        """Create a run; Celery executes it when DREAM_BROKER_URL is set, else a thread here."""
        from worker.runs.start import RunRequest
        from worker.runs.start import start_run as start

        started = start(app, RunRequest(_scope_for(who, body.scope), trigger="api",
                                        force=body.force, dry_run=body.dry_run,
                                        allow_retire=body.allow_retire))
        return {"run_id": started.run_id, "status": started.status,
                "mode": started.mode.value}

    @api.post("/api/runs/{run_id}/cancel", tags=["runs"])
    def cancel(run_id: str, who: Caller) -> dict[str, Any]:
        """Cancel a queued, interrupted or running run and free its scope (409 if finished)."""
        from worker.runs.service import cancel_run

        _visible_run(app, run_id, who)
        was = cancel_run(app, run_id, f"cancelled through the API by {who.label}")
        return {"run_id": run_id, "status": RunStatus.CANCELLED.value, "was": was}

    @api.post("/api/runs/{run_id}/undo", tags=["runs"])
    def undo(run_id: str, who: Caller, body: UndoIn | None = None) -> Any:
        _visible_run(app, run_id, who)
        try:
            from worker.safety.undo import undo_run
        except ModuleNotFoundError:
            return JSONResponse({"error": "not_implemented", "detail": "undo is not available"},
                                status_code=501)
        result = undo_run(app, run_id, force_cascade=bool(body and body.force_cascade))
        return result.as_dict()

    # ---- ops ------------------------------------------------------------------------------
    @api.get("/healthz", tags=["ops"])
    def healthz() -> Any:
        """Liveness plus a database round-trip; no token needed."""
        try:
            with app.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:  # any driver error means "not healthy", never a 500
            log.warning("api.health_failed", error_type=type(exc).__name__)
            return JSONResponse({"status": "unavailable", "database": "down"}, status_code=503)
        return {"status": "ok", "database": "ok"}

    @api.get("/metrics", response_class=PlainTextResponse, tags=["ops"])
    def prometheus(who: Caller) -> PlainTextResponse:
        """Runs and notes by status, model calls and tokens, phase durations (a scoped token
        sees its own scope's figures)."""
        body = metrics.render(metrics.collect(app, who.scope))
        return PlainTextResponse(body, media_type="text/plain; version=0.0.4")

    api.include_router(dashboard.router)
    api.include_router(review_routes.router)
    api.include_router(review_page.router)
    return api


def validation_detail(errors: Any) -> str:
    """``body.scope.agent_id: String should have at most 64 characters; ...`` (no input values)."""
    parts = []
    for error in list(errors)[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {str(error.get('msg', 'invalid')).removeprefix('Value error, ')}")
    text = "; ".join(parts) or "invalid request"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:500]


def _scope_for(who: Principal, requested: ScopeIn | None) -> Scope:
    """The scope a request acts on: a scoped token's own, or the admin's explicit choice."""
    if who.scope is not None:
        if requested is not None and requested.to_scope() != who.scope:
            raise NotFound("no such scope")
        return who.scope
    if requested is None:
        raise InvalidInput("scope is required with an admin token")
    return requested.to_scope()


def _query_scope(key: str | None, agent_id: str | None, user_id: str | None,
                 company_id: str | None) -> Scope | None:
    if any(v is not None and ("\x00" in v or len(v) > 400)
           for v in (key, agent_id, user_id, company_id)):
        raise InvalidInput("scope parameters must be short and contain no NUL character")
    if key:
        try:
            scope = Scope.from_key(key)
        except (ValueError, TypeError, RecursionError):
            raise InvalidInput('scope must be a scope key such as ["agent",null,null]') from None
        parts = (scope.agent_id, scope.user_id, scope.company_id)
        if not isinstance(scope.agent_id, str) or not all(p is None or isinstance(p, str) for p in parts):
            raise InvalidInput('scope parts are strings or null, e.g. ["agent",null,null]')
    elif agent_id:
        scope = Scope(agent_id, user_id, company_id)
    elif user_id or company_id:
        raise InvalidInput("user_id and company_id need agent_id")
    else:
        return None
    if problem := scope_problem(scope):
        raise InvalidInput(f"scope: {problem}")
    return scope


def _visible_run(app: App, run_id: str, who: Principal) -> dict[str, Any]:
    from worker.reporting import run_tree

    if "\x00" in run_id or len(run_id) > 64:
        raise NotFound(f"no run with id {run_id[:64]!r}")
    tree = run_tree(app, run_id)
    if who.scope is not None and tree["scope"] != who.scope.key:
        raise NotFound(f"no run with id {run_id}")
    return tree

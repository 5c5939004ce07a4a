"""Operations: liveness with a database round trip (no token), Prometheus metrics."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from worker.api import metrics
from worker.api.deps import Caller, DreamApp
from worker.store.health import database_state, health_body

log = structlog.get_logger(__name__)
router = APIRouter(tags=["ops"])


@router.get("/healthz")
def healthz(app: DreamApp) -> Any:
    """Liveness plus a database round-trip that reads the schema's revision; no token needed."""
    body, status = health_body(database_state(app.engine, "api"))
    return body if status == 200 else JSONResponse(body, status_code=status)


@router.get("/livez")
def livez() -> dict[str, str]:
    """The process answers (a liveness probe): no database round trip, so an outage of the
    database takes a replica out of service (``/healthz``) without restarting it."""
    return {"status": "ok"}


@router.get("/metrics", response_class=PlainTextResponse)
def prometheus(who: Caller, app: DreamApp) -> PlainTextResponse:
    """Runs and notes by status, model calls and tokens, phase durations (a scoped token
    sees its own scope's figures)."""
    body = metrics.render(metrics.collect(app, who.scope))
    return PlainTextResponse(body, media_type="text/plain; version=0.0.4")

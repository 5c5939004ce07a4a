"""Operations: liveness with a database round trip (no token), Prometheus metrics."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from worker.api import metrics
from worker.api.deps import Caller, DreamApp
from worker.errors import ConfigError
from worker.store.errors import database_error

log = structlog.get_logger(__name__)
router = APIRouter(tags=["ops"])


@router.get("/healthz")
def healthz(app: DreamApp) -> Any:
    """Liveness plus a database round-trip that reads the schema's revision (a database no
    one upgraded is no more usable than one that is down); no token needed."""
    try:
        with app.engine.connect() as conn:
            conn.execute(text("SELECT version_num FROM alembic_version"))
    except Exception as exc:  # any driver error means "not healthy", never a 500
        found = database_error(exc) if isinstance(exc, SQLAlchemyError) else None
        state = "no schema" if isinstance(found, ConfigError) and "upgrade" in str(found) \
            else "down"
        log.warning("api.health_failed", error_type=type(exc).__name__, database=state)
        return JSONResponse({"status": "unavailable", "database": state}, status_code=503)
    return {"status": "ok", "database": "ok"}


@router.get("/metrics", response_class=PlainTextResponse)
def prometheus(who: Caller, app: DreamApp) -> PlainTextResponse:
    """Runs and notes by status, model calls and tokens, phase durations (a scoped token
    sees its own scope's figures)."""
    body = metrics.render(metrics.collect(app, who.scope))
    return PlainTextResponse(body, media_type="text/plain; version=0.0.4")

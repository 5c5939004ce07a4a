"""FastAPI app factory: the host API, ops endpoints and the dashboard, over one App.

Routes (worker.api.routers) only translate HTTP into calls to worker.host / worker.runs /
worker.reporting; errors are answered by class (worker.api.handlers).
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response

from worker.api.auth import parse_tokens
from worker.api.deps import known_query, page_fields_once, unique_body_keys
from worker.api.guards import BodyLimit, ScrubbedErrors
from worker.api.handlers import install_error_handlers
from worker.api.routers import PAGES, ROUTERS
from worker.app import App

log = structlog.get_logger(__name__)


def create_api(app: App) -> FastAPI:
    """One FastAPI application over an already-built App (settings, engine, embedder)."""
    api = FastAPI(title="dream-worker host API", version="1",
                  description="Fusion candidates and fuse, write-time dedup, dream runs. Every "
                              "endpoint except /healthz and /livez needs `Authorization: Bearer <token>`.")
    api.state.app = app
    api.state.tokens = parse_tokens(app.settings.api_tokens)
    install_error_handlers(api)
    api.middleware("http")(access_log)
    # Outermost last: the size limit runs before anything reads the body or the token.
    api.add_middleware(ScrubbedErrors)
    api.add_middleware(BodyLimit, max_bytes=app.settings.api_max_body_bytes)
    for router in ROUTERS:
        api.include_router(router, dependencies=[Depends(page_fields_once)] if router in PAGES
                           else [Depends(known_query), Depends(unique_body_keys)])
    return api


async def access_log(request: Request, call_next: Any) -> Response:
    started = time.perf_counter()
    response: Response = await call_next(request)
    # Path only: the query string may carry the dashboard token.
    log.info("api.request", method=request.method, path=request.url.path,
             status=response.status_code, ms=round((time.perf_counter() - started) * 1000, 1))
    return response

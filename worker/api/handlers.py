"""The API's answers to expected errors: every DreamError by its class (worker.errors), a
database that is down or not set up (503 or 500 by what worker.store.errors makes of it, the
remedy in the server log), and a request FastAPI could not validate, named by field and rule
(never by the value sent)."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException

from worker.errors import BrokerUnavailable, ConfigError, DreamError, Unauthorized, Unavailable
from worker.store.errors import database_error

log = structlog.get_logger(__name__)


async def dream_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DreamError)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    detail = caller_detail(exc, "api", request.url.path)
    return JSONResponse({**exc.details(), "error": exc.code, "detail": detail},
                        status_code=exc.status, headers=headers)


def caller_detail(exc: DreamError, channel: str, path: str | None = None) -> str:
    """What a caller of the API or the MCP server is told of ``exc``. A fault of the operator's
    setup (a broker that does not answer, a setting the worker cannot use) is said without the
    hosts and settings it names, which go to the server log with the remedy, as a database
    failure's do; any other refusal is the caller's own to fix, said whole."""
    if not isinstance(exc, BrokerUnavailable | ConfigError):
        return str(exc)
    log.warning(f"{channel}.service_failed", path=path, error=str(exc))
    if isinstance(exc, BrokerUnavailable):
        return "the run queue (broker) is unavailable; retry later (the server log says why)"
    return "the server is misconfigured; its operator finds what to fix in the server log"


async def database_failure(request: Request, exc: Exception) -> Response:
    """A database outage is no bug of the request's: 503 (or 500 for a store that is not set
    up), one line for the caller; the remedy, which names the operator's settings and hosts,
    goes to the server log only."""
    assert isinstance(exc, SQLAlchemyError)
    error = database_error(exc)
    if error is None:
        raise exc  # a bug: ScrubbedErrors answers 500 and logs its frames
    log.warning("api.database_failed", path=request.url.path, error=str(error))
    return JSONResponse({"error": error.code, "detail": database_detail(error)},
                        status_code=error.status)


def database_detail(error: DreamError) -> str:
    """What a caller of the API or the MCP server is told of a database failure."""
    if isinstance(error, Unavailable):
        return "the database is unavailable; retry later (the server log says why)"
    return "the server's database is not set up; its operator finds what to fix in the server log"


async def invalid_request(request: Request, exc: Exception) -> Response:
    # FastAPI's default echoes the offending input back, which fails to encode for NaN or a
    # lone surrogate (a 500 whose traceback quoted the text); name the field and the rule only.
    assert isinstance(exc, RequestValidationError)
    detail = validation_detail(exc.errors())
    if request.url.path.startswith("/dashboard"):  # a browser's page: one line of HTML
        from worker.api.dashboard import invalid_page

        return invalid_page(f"{detail}; correct the address, or go back to the dashboard")
    return JSONResponse({"error": "invalid", "detail": detail}, status_code=422)


# What the framework itself refuses (before any route runs), said as the API's own errors are.
_HTTP_ERRORS = {
    400: ("bad_request", "the body could not be read as JSON (invalid UTF-8, nesting too deep "
                         "or a number too long); send one JSON object in UTF-8"),
    404: ("not_found", "no such endpoint; /openapi.json lists them"),
    405: ("method_not_allowed", "this endpoint does not take that method; /openapi.json lists "
                                "each endpoint's methods"),
}


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (an unreadable body, an unknown path or method) as
    ``{"error", "detail"}`` with what to do, like every other refusal; its default is a bare
    ``{"detail": "Not Found"}``."""
    assert isinstance(exc, HTTPException)
    code, detail = _HTTP_ERRORS.get(exc.status_code, (f"http_{exc.status_code}", str(exc.detail)))
    return JSONResponse({"error": code, "detail": detail}, status_code=exc.status_code,
                        headers=exc.headers)


def install_error_handlers(api: FastAPI) -> None:
    api.add_exception_handler(DreamError, dream_error)
    api.add_exception_handler(HTTPException, http_error)
    api.add_exception_handler(SQLAlchemyError, database_failure)
    api.add_exception_handler(RequestValidationError, invalid_request)


def validation_detail(errors: Any) -> str:
    """``body.scope.agent_id: String should have at most 64 characters; ...`` (no input values)."""
    parts = []
    for error in list(errors)[:3]:
        loc = error.get("loc", ())
        # A JSON syntax error's location is the body and a character offset: the body it is.
        where = "body" if error.get("type") == "json_invalid" else ".".join(str(p) for p in loc)
        parts.append(f"{where}: {_rule(error)}")
    text = "; ".join(parts) or "invalid request"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:500]


def _rule(error: Any) -> str:
    """The rule an error breaks, with what to send when the body as a whole is wrong."""
    kind, where = error.get("type"), tuple(error.get("loc", ()))
    if kind == "json_invalid":  # the decoder's message (a position, never the text)
        reason = str((error.get("ctx") or {}).get("error", "invalid JSON"))[:120]
        return f"not valid JSON ({reason}); send one JSON object"
    rule = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if where == ("body",) and kind in ("model_attributes_type", "dict_type", "missing"):
        return f"{rule}; send a JSON object with Content-Type: application/json"
    return rule

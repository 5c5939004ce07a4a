"""The API's answers to expected errors: every DreamError by its class (worker.errors), and a
request FastAPI could not validate, named by field and rule (never by the value sent)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from worker.errors import DreamError, Unauthorized


async def dream_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DreamError)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return JSONResponse({"error": exc.code, "detail": str(exc)}, status_code=exc.status,
                        headers=headers)


async def invalid_request(request: Request, exc: Exception) -> Response:
    # FastAPI's default echoes the offending input back, which fails to encode for NaN or a
    # lone surrogate (a 500 whose traceback quoted the text); name the field and the rule only.
    assert isinstance(exc, RequestValidationError)
    detail = validation_detail(exc.errors())
    if request.url.path.startswith("/dashboard"):  # a browser's page: one line of HTML
        from worker.api.dashboard import invalid_page

        return invalid_page(f"{detail}; correct the address, or go back to the dashboard")
    return JSONResponse({"error": "invalid", "detail": detail}, status_code=422)


def install_error_handlers(api: FastAPI) -> None:
    api.add_exception_handler(DreamError, dream_error)
    api.add_exception_handler(RequestValidationError, invalid_request)


def validation_detail(errors: Any) -> str:
    """``body.scope.agent_id: String should have at most 64 characters; ...`` (no input values)."""
    parts = []
    for error in list(errors)[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()))
        parts.append(f"{where}: {str(error.get('msg', 'invalid')).removeprefix('Value error, ')}")
    text = "; ".join(parts) or "invalid request"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:500]

"""ASGI middleware that runs before routing, authentication and body parsing (R31).

``BodyLimit`` refuses a request body over the configured size: at once from Content-Length, or
while streaming by counting chunks (chunked uploads declare no length). ``ScrubbedErrors`` turns an
unexpected exception into a plain 500 and logs it as frames only: a server's own traceback would
print the exception message, which can quote request text (R21).
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from worker.safety.scrub import stack

log = structlog.get_logger(__name__)


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when the streamed body passes the limit; FastAPI re-raises
    HTTPExceptions from body reading, so the route never sees a partial body."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=too_large_detail(limit))


def too_large_detail(limit: int) -> str:
    return (f"request body is larger than {limit} bytes (DREAM_API_MAX_BODY_BYTES); "
            "send less per request")


async def send_json(send: Send, status: int, body: dict[str, Any],
                    headers: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": payload})


class HTTPMiddleware:
    """A pure ASGI middleware that acts on HTTP requests (``http``) only: anything else (the
    lifespan, a websocket) goes to the wrapped app untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class BodyLimit(HTTPMiddleware):
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _content_length(scope)
        if declared == -1:
            await send_json(send, 400, {"error": "bad_request",
                                        "detail": "Content-Length is not a number"})
            return
        if declared is not None and declared > self.max_bytes:
            # Refused unread: nothing of the body is buffered, whoever sends it.
            log.info("api.body_too_large", path=scope.get("path"), declared=declared)
            await send_json(send, 413, {"error": "too_large",
                                        "detail": too_large_detail(self.max_bytes)},
                            headers=[(b"connection", b"close")])
            return
        received = 0
        over = False
        answered = False

        async def counted() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    over = True
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def answer(message: Message) -> None:
            nonlocal answered
            if not over:
                await send(message)
            elif not answered:
                # Whatever the inner app made of the interrupted read (a 400 "error parsing the
                # body", once middleware wrapped it in an exception group), the answer is a 413.
                answered = True
                await self._too_large(send, scope, received)

        try:
            await self.app(scope, counted, answer)
        except Exception:
            if not over:
                raise
        if over and not answered:
            await self._too_large(send, scope, received)

    async def _too_large(self, send: Send, scope: Scope, received: int) -> None:
        log.info("api.body_too_large", path=scope.get("path"), received=received)
        await send_json(send, 413, {"error": "too_large", "detail": too_large_detail(self.max_bytes)},
                        headers=[(b"connection", b"close")])


def _content_length(scope: Scope) -> int | None:
    """The declared length, None when absent, -1 when it is not a number."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) < 20 else -1
    return None


class ScrubbedErrors(HTTPMiddleware):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            # A bug: still a 500 and a log line with where it happened, but never its message.
            log.error("api.unhandled_error", path=scope.get("path"),
                      error_type=type(exc).__name__, frames=stack(exc))
            if not started:
                await send_json(send, 500, {"error": "internal",
                                            "detail": "internal error; the server log has where"})

"""`dream mcp --transport http`: the SDK's answers to a body it cannot read, made one line,
and its 401 to an admin token made to say so.

The SDK answers a body that is JSON but no JSON-RPC message with pydantic's multi-line dump,
``input_value={...}`` and all: it sends the request back, note text included, and is no line a
client can show. ``OneLineErrors`` rewrites those 400 answers (and the SDK's bare parse error,
and its "Body must be a single JSON-RPC request" of a protocol version past the handshake's) to
the stdio server's lines (worker.mcp.stdio), with the same codes and the request's id when the
body shows one (the SDK's carry null). A request whose id is no id (null, a fraction, a boolean,
an object, an array), which the SDK takes for a notification and answers ``202 Accepted`` with
no body, gets that 400 and -32600 too.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from starlette.types import Message, Receive, Scope, Send

from worker.api.auth import Principal, authenticate, bearer
from worker.api.guards import HTTPMiddleware
from worker.mcp.stdio import (
    INVALID_ID_LINE,
    INVALID_REQUEST,
    INVALID_REQUEST_LINE,
    PARSE_ERROR,
    decoded,
    invalid_id,
    parse_error_line,
    request_id,
)

log = structlog.get_logger(__name__)
_LIMIT = 1 << 20  # a 400 the SDK writes is a few kilobytes at most; past this, passed on as is


class OneLineErrors(HTTPMiddleware):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: list[Message] = []
        request: list[bytes] = []  # the body as the SDK read it, until its answer starts

        async def read() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                request.append(message.get("body", b""))
            return message

        async def rewritten(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (202, 400):
                held.append(message)
                return
            if message["type"] == "http.response.start":
                request.clear()
            if not held:
                await send(message)
                return
            held.append(message)
            size = sum(len(m.get("body", b"")) for m in held[1:])
            if message.get("more_body", False) and size <= _LIMIT:
                return
            for out in _one_line(held, b"".join(request)):
                await send(out)
            held.clear()
            request.clear()

        await self.app(scope, read, rewritten)


def _one_line(held: list[Message], request: bytes) -> list[Message]:
    """The held 400 answer, its JSON-RPC error message replaced when it is the SDK's; the held
    202, a 400 when the request it accepted has an id that is no id."""
    start, body = held[0], b"".join(m.get("body", b"") for m in held[1:])
    text = request.decode("utf-8", errors="replace")
    if start["status"] == 202:
        if not invalid_id(decoded(text)):
            return held
        answer: Any = {"jsonrpc": "2.0", "id": None,
                       "error": {"code": INVALID_REQUEST, "message": INVALID_ID_LINE}}
        start = {**start, "status": 400, "headers": [(b"content-type", b"application/json")]}
    else:
        try:
            answer = json.loads(body)
            message = answer["error"]["message"]
        except (ValueError, TypeError, KeyError):
            return held
        if not isinstance(message, str):
            return held
        error = _error(message, text)
        if error is None:
            return held
        answer["error"], answer["id"] = error, request_id(text)
    log.warning("mcp.unreadable_message", code=answer["error"]["code"], transport="http")
    payload = json.dumps(answer).encode()
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
    return [{**start, "headers": [*headers, (b"content-length", str(len(payload)).encode())]},
            {"type": "http.response.body", "body": payload, "more_body": False}]


def _error(message: str, request: str) -> dict[str, Any] | None:
    """The stdio server's error for the SDK's answer ``message`` to ``request``, None when it is
    no answer to an unreadable body."""
    if message.startswith("Parse error"):
        return {"code": PARSE_ERROR, "message": parse_error_line(message)}
    if not message.startswith(("Validation error", "Body must be a single JSON-RPC")):
        return None
    line = INVALID_ID_LINE if invalid_id(decoded(request)) else INVALID_REQUEST_LINE
    return {"code": INVALID_REQUEST, "message": line}


# No quote and ASCII only: it goes into the WWW-Authenticate header as well.
ADMIN_TOKEN_LINE = ("the bearer token is an admin token, which MCP does not take: each tool acts "
                    "on its token's one scope; send a scoped token (one with an agent_id in "
                    "DREAM_API_TOKENS)")
_SDK_401 = b'error_description="Authentication required"'


class AdminTokenRefusal(HTTPMiddleware):
    """The SDK answers an admin token 401 "Authentication required", as it does no token: only
    the server's log said why (``mcp.admin_token_refused``). That 401 now says it was an admin
    token and which to send instead (never the token)."""

    def __init__(self, app: Any, tokens: list[tuple[bytes, Principal]]) -> None:
        super().__init__(app)
        self.tokens = tokens

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = next((v.decode("latin-1") for k, v in scope.get("headers", [])
                      if k.lower() == b"authorization"), None)
        principal = authenticate(self.tokens, bearer(given))
        if principal is None or principal.scope is not None:
            await self.app(scope, receive, send)
            return
        replaced = False

        async def answer(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 401:
                replaced = True
                for out in _admin_refusal(message):
                    await send(out)
            elif not replaced:
                await send(message)

        await self.app(scope, receive, answer)


def _admin_refusal(start: Message) -> list[Message]:
    """The SDK's 401 start with ADMIN_TOKEN_LINE as its description, in the header and body."""
    described = f'error_description="{ADMIN_TOKEN_LINE}"'.encode()
    headers = [(k, v.replace(_SDK_401, described) if k.lower() == b"www-authenticate" else v)
               for k, v in start.get("headers", []) if k.lower() != b"content-length"]
    payload = json.dumps({"error": "invalid_token", "error_description": ADMIN_TOKEN_LINE}).encode()
    return [{**start, "headers": [*headers, (b"content-length", str(len(payload)).encode())]},
            {"type": "http.response.body", "body": payload, "more_body": False}]

"""`dream mcp --transport http`: the SDK's answers to a body it cannot read, made one line,
and its 401 to an admin token made to say so.

The SDK answers a body that is JSON but no JSON-RPC message with pydantic's multi-line dump,
``input_value={...}`` and all: it sends the request back, note text included, and is no line a
client can show. ``OneLineErrors`` rewrites those 400 answers (and the SDK's bare parse error,
and its "Body must be a single JSON-RPC request" of a protocol version past the handshake's) to
the stdio server's lines (worker.mcp.stdio), with the same codes and the request's id when the
body shows one (the SDK's carry null). A request whose id is no id (null, a fraction, a boolean,
an object, an array), which the SDK takes for a notification and answers ``202 Accepted`` with
no body, gets that 400 and -32600 too. ``LoneSurrogates`` refuses a body with a lone surrogate
escape (``"\\ud800"``) as the other transports do, before the SDK's 2026-07-28 transport reads it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic_core
import structlog
from starlette.types import Message, Receive, Scope, Send

from worker.api.auth import Principal, authenticate, bearer
from worker.api.guards import HTTPMiddleware, send_json
from worker.mcp.stdio import (
    INVALID_ID_LINE,
    INVALID_REQUEST,
    INVALID_REQUEST_LINE,
    PARSE_ERROR,
    decoded,
    duplicate_key,
    duplicate_line,
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


# A \\u escape of a surrogate (D800-DFFF): only a body holding one is parsed a second time.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class LoneSurrogates(HTTPMiddleware):
    """A lone surrogate escape (``"\\ud800"``) is invalid JSON to the SDK's stdio and 2025
    transports (pydantic's parser: -32700, nothing done), but its 2026-07-28 transport reads
    bodies with Python's json, which takes it: the request ran, a lone surrogate in its id, its
    ``_meta`` or a cursor went on, and its answer echoed an id no strict client can read. A
    scoped request's body is read whole here (BodyLimit bounds it) and refused as the other
    transports refuse it: 400, -32700, the stdio line, the id when the body shows a valid one.
    Other requests go on unread: the SDK answers them 401 first."""

    def __init__(self, app: Any, tokens: list[tuple[bytes, Principal]]) -> None:
        super().__init__(app)
        self.tokens = tokens

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = authenticate(self.tokens, bearer(_authorization(scope)))
        if scope.get("method") != "POST" or principal is None or principal.scope is None:
            await self.app(scope, receive, send)
            return
        read = await _whole_body(receive)
        body = b"".join(m.get("body", b"") for m in read if m["type"] == "http.request")
        if (reason := _unparsed(body)) is not None:
            log.warning("mcp.unreadable_message", code=PARSE_ERROR, transport="http")
            text = body.decode("utf-8", errors="replace")
            answer = {"jsonrpc": "2.0", "id": request_id(text),
                      "error": {"code": PARSE_ERROR, "message": parse_error_line(reason)}}
            await send_json(send, 400, answer)
            return
        if (key := duplicate_key(body)) is not None:  # pydantic keeps the last value silently
            log.warning("mcp.unreadable_message", code=INVALID_REQUEST, transport="http")
            text = body.decode("utf-8", errors="replace")
            await send_json(send, 400, {"jsonrpc": "2.0",
                                        "id": None if key == "id" else request_id(text),
                                        "error": {"code": INVALID_REQUEST,
                                                  "message": duplicate_line(key)}})
            return

        async def replayed() -> Message:
            return read.pop(0) if read else await receive()

        await self.app(scope, replayed, send)


async def _whole_body(receive: Receive) -> list[Message]:
    """The request's messages up to its last body chunk (or a disconnect)."""
    read = []
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            return read


def _unparsed(body: bytes) -> str | None:
    """Why pydantic's JSON parser (the SDK's other transports') refuses a body holding a
    surrogate escape, or None."""
    if not _SURROGATE_ESCAPE.search(body):
        return None
    try:
        pydantic_core.from_json(body)
    except ValueError as exc:
        return str(exc)
    return None


def _authorization(scope: Scope) -> str | None:
    return next((v.decode("latin-1") for k, v in scope.get("headers", [])
                 if k.lower() == b"authorization"), None)


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
        principal = authenticate(self.tokens, bearer(_authorization(scope)))
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

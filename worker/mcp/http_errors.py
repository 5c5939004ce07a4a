"""`dream mcp --transport http`: the SDK's answers to a body it cannot read, made one line.

The SDK answers a body that is JSON but no JSON-RPC message with pydantic's multi-line dump,
``input_value={...}`` and all: it sends the request back, note text included, and is no line a
client can show. ``OneLineErrors`` rewrites those 400 answers (and the SDK's bare parse error) to
the stdio server's lines (worker.mcp.stdio), with the same codes.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from starlette.types import Message, Receive, Scope, Send

from worker.api.guards import HTTPMiddleware
from worker.mcp.stdio import INVALID_REQUEST, INVALID_REQUEST_LINE, PARSE_ERROR, parse_error_line

log = structlog.get_logger(__name__)
_LIMIT = 1 << 20  # a 400 the SDK writes is a few kilobytes at most; past this, passed on as is


class OneLineErrors(HTTPMiddleware):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: list[Message] = []

        async def rewritten(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 400:
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            size = sum(len(m.get("body", b"")) for m in held[1:])
            if message.get("more_body", False) and size <= _LIMIT:
                return
            for out in _one_line(held):
                await send(out)
            held.clear()

        await self.app(scope, receive, rewritten)


def _one_line(held: list[Message]) -> list[Message]:
    """The held 400 answer, its JSON-RPC error message replaced when it is the SDK's."""
    start, body = held[0], b"".join(m.get("body", b"") for m in held[1:])
    try:
        answer: Any = json.loads(body)
        message = answer["error"]["message"]
    except (ValueError, TypeError, KeyError):
        return held
    if not isinstance(message, str):
        return held
    if message.startswith("Validation error"):
        answer["error"] = {"code": INVALID_REQUEST, "message": INVALID_REQUEST_LINE}
    elif message.startswith("Parse error"):
        answer["error"] = {"code": PARSE_ERROR, "message": parse_error_line(message)}
    else:
        return held
    log.warning("mcp.unreadable_message", code=answer["error"]["code"], transport="http")
    payload = json.dumps(answer).encode()
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
    return [{**start, "headers": [*headers, (b"content-length", str(len(payload)).encode())]},
            {"type": "http.response.body", "body": payload, "more_body": False}]

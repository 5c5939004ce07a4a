"""`dream mcp` over stdio: the SDK's transport, plus an answer to every line it cannot read.

The SDK's stdio reader hands a line that is no JSON-RPC message (invalid JSON, a lone surrogate
escape, a number too long, nesting too deep, an object that is no request) to the server as an
exception, which drops it with a debug log: its sender waits for an answer that never comes.
Here each gets the JSON-RPC error it is due (-32700 parse error, -32600 invalid request), with
the request's id when the line shows one (else null, as JSON-RPC says), and one line naming the
problem and what to send: never the line itself, which may hold note text. So does a request
whose id is no id (null, a fraction, a boolean, an object, an array): the SDK reads it as a
notification, which gets no answer.
"""

from __future__ import annotations

import json
import re
import signal
import threading
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from worker.domain.limits import DuplicateKey, unique_keys
from worker.mcp.stdio_wire import (
    AnsweredWriteStream,
    BoundedLines,
    InFlight,
    claimed_stdin,
    too_long_id,
    too_long_line,
)
from worker.runs.stops import STOP_SIGNALS, Stopped

log = structlog.get_logger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
_SEND = "send one JSON-RPC 2.0 message per line, in UTF-8"
# The id of a line the JSON decoder gave up on, when it comes before any nested value.
_EARLY_ID = re.compile(r'\s*\{\s*(?:"(?:jsonrpc|method)"\s*:\s*"[^"\\]{0,100}"\s*,\s*)*'
                       r'"id"\s*:\s*(-?\d{1,15}|"[^"\\]{0,200}")')


INVALID_REQUEST_LINE = ("invalid request: the message is no JSON-RPC 2.0 request, notification "
                        f"or response; {_SEND}, an object with jsonrpc, id, method and params")


INVALID_ID_LINE = ("invalid request: the request's id is neither a string nor an integer (null, "
                   f"a fraction, a boolean, an object or an array); {_SEND}, each request with "
                   "a string or integer id, a notification with no id member")


def parse_error_line(reason: str) -> str:
    """What a sender of invalid JSON is told: the decoder's reason (a position, never text)."""
    # The SDK's bare "Parse error" (its 2026-07-28 HTTP transport) gives no reason to repeat.
    reason = reason.removeprefix("Invalid JSON: ").removeprefix("Parse error")
    reason = reason.removeprefix(": ")[:120]
    because = f" ({reason})" if reason else ""
    return (f"parse error: the message is not valid JSON{because}; {_SEND}, strings valid "
            "Unicode (no lone \\ud800-\\udfff escape), numbers under 4300 digits")


async def serve_stdio(server: Server[Any], max_line_bytes: int,
                      at_once: Callable[[str], None] | None = None) -> None:
    """``MCPServer.run_stdio_async`` with every unreadable or over-long line answered, and every
    request read answered before the server ends, at stdin's end or at a first SIGTERM or
    SIGINT (worker.mcp.stdio_wire). A signal during that drain ends it at once: ``at_once``
    is called with its name (it ends the process), or ``Stopped`` is raised here once the
    requests' threads let the serving end."""
    in_flight = InFlight()
    again: list[str] = []  # the signal that cut the drain short
    with claimed_stdin() as wire:
        lines = BoundedLines(wire, max_line_bytes, request_id)
        seen = SeenLines(lines)
        # The SDK reads any async iterable of lines; it types the argument as an anyio file.
        async with (stdio_server(stdin=seen) as (read_stream, write_stream),  # type: ignore[arg-type]
                    anyio.create_task_group() as watching):
            with anyio.CancelScope() as serving:
                watching.start_soon(_stop_on_signals, lines, serving, again, at_once)
                # A refusal goes out unwatched: it answers no request read, even one with its id.
                await server.run(AnsweringReadStream(read_stream, write_stream, max_line_bytes,
                                                     in_flight, seen),
                                 AnsweredWriteStream(write_stream, in_flight),
                                 server.create_initialization_options())
            watching.cancel_scope.cancel()
    if again:
        log.warning("mcp.stopped_at_once", signal=again[0], unanswered=in_flight.count)
        raise Stopped(again[0])


async def _stop_on_signals(lines: BoundedLines, serving: anyio.CancelScope, again: list[str],
                           at_once: Callable[[str], None] | None) -> None:
    """SIGTERM (an MCP client stopping its server, a container stopping) or Ctrl-C ends the
    input as stdin closing does, so the requests in flight are answered and the dreams started
    end before the exit; SIGTERM's default action killed the process with them, and Ctrl-C was
    `Aborted!`. A signal during that drain (up to 60 s: a second one, or a first once stdin
    closed, as an MCP client escalates) ends the serving now (``serving`` cancelled, the
    signal put in ``again``). Signals reach the main thread only,
    so a server run in another thread keeps the defaults."""
    if threading.current_thread() is not threading.main_thread():
        return
    # asyncio puts back the default handlers when the receiver closes, not the ones it found:
    # the `dream` command's, which stop the wait for the dreams started (worker.runs.stops).
    found = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        await _receive_stops(lines, serving, again, at_once)
    finally:
        for sig, handler in found.items():
            if handler is not None:
                signal.signal(sig, handler)


async def _receive_stops(lines: BoundedLines, serving: anyio.CancelScope, again: list[str],
                         at_once: Callable[[str], None] | None) -> None:
    with anyio.open_signal_receiver(*STOP_SIGNALS) as received:
        async for signum in received:
            name = signal.Signals(signum).name
            if lines.ended:  # stdin closed, or a signal came before: draining now
                if at_once is not None:  # not a cancel: it would wait for the tool threads
                    at_once(name)
                again.append(name)
                serving.cancel()
                return
            log.info("mcp.stopping", signal=name)
            lines.stop()


class SeenLines:
    """The lines handed to the SDK, each kept until the read stream takes the item the SDK made
    of it (one per line, in order: a message or the exception that refused it), so that an
    answer can read the line's own id: the exception shows only the first error's input, often
    a value nested in the message (its jsonrpc, its params), and a notification none at all."""

    def __init__(self, lines: BoundedLines) -> None:
        self.lines = lines
        self.waiting: deque[str] = deque()

    def __aiter__(self) -> SeenLines:
        return self

    async def __anext__(self) -> str:
        line = await self.lines.__anext__()
        self.waiting.append(line)
        return line

    def taken(self) -> str:
        """The line of the item the read stream just took."""
        return self.waiting.popleft() if self.waiting else ""


class AnsweringReadStream:
    """The SDK's read stream, minus its exceptions and the requests it took for notifications:
    each is answered on the write stream. At the end of stdin it ends only once the requests
    read are answered: the SDK cancels the handlers still running when its read stream ends,
    and their senders would never hear back."""

    def __init__(self, inner: Any, write: Any, max_line_bytes: int, in_flight: InFlight,
                 seen: SeenLines) -> None:
        self.inner = inner
        self.write = write
        self.max_line_bytes = max_line_bytes
        self.in_flight = in_flight
        self.seen = seen

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> SessionMessage:
        while True:
            try:
                item = await self.inner.receive()
            except anyio.EndOfStream:
                await self.in_flight.drain()
                raise
            line = self.seen.taken()
            if isinstance(item, Exception):
                answer = refusal(item, line, self.max_line_bytes)
            elif isinstance(item.message, types.JSONRPCNotification) and invalid_id(decoded(line)):
                answer = id_refusal()
            elif (key := duplicate_key(line)) is not None:
                answer = duplicate_refusal(key, line)
            else:
                return self.in_flight.received(item)
            await self.write.send(SessionMessage(answer))

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __aiter__(self) -> AnsweringReadStream:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringReadStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> None:
        await self.aclose()


def refusal(exc: Exception, line: str, max_line_bytes: int) -> types.JSONRPCError:
    """The JSON-RPC error for a line the transport could not read as a message."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    syntax = next((e for e in errors if e.get("type") == "json_invalid"), None)
    too_long, long_id = too_long_id(line)
    if too_long:
        return types.JSONRPCError(jsonrpc="2.0", id=long_id, error=types.ErrorData(
            code=INVALID_REQUEST, message=too_long_line(max_line_bytes)))
    if syntax is not None:
        code = PARSE_ERROR
        message = parse_error_line(str(syntax.get("msg", "invalid JSON")))
    else:  # a request whose id is no id and whose rest is wrong too is told of its id first
        code = INVALID_REQUEST
        message = INVALID_ID_LINE if invalid_id(decoded(line)) else INVALID_REQUEST_LINE
    log.warning("mcp.unreadable_message", code=code, error_type=type(exc).__name__)
    return types.JSONRPCError(jsonrpc="2.0", id=request_id(line),
                              error=types.ErrorData(code=code, message=message))


def id_refusal() -> types.JSONRPCError:
    """The answer to a request whose id is no id: -32600, id null (it has none to carry)."""
    log.warning("mcp.unreadable_message", code=INVALID_REQUEST, error_type="InvalidId")
    return types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(
        code=INVALID_REQUEST, message=INVALID_ID_LINE))


def duplicate_key(text: str | bytes) -> str | None:
    """The key a JSON message names twice in one object, or None: the SDK reads it with
    pydantic, which keeps the last value silently (two ``content`` arguments stored the
    second), where every importer and the HTTP API refuse it."""
    try:
        json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKey as exc:
        return str(exc)[:64]
    except (ValueError, RecursionError):
        return None
    return None


def duplicate_line(key: str) -> str:
    return (f"invalid request: key {key!r} appears twice in one object; {_SEND}, each key "
            "once in an object (JSON readers keep either value)")


def duplicate_refusal(key: str, line: str) -> types.JSONRPCError:
    """The answer to a message naming a key twice: -32600, nothing run; its id when the id
    itself is not the key given twice."""
    log.warning("mcp.unreadable_message", code=INVALID_REQUEST, error_type="DuplicateKey")
    return types.JSONRPCError(jsonrpc="2.0", id=None if key == "id" else request_id(line),
                              error=types.ErrorData(code=INVALID_REQUEST,
                                                    message=duplicate_line(key)))


def invalid_id(message: Any) -> bool:
    """Whether a decoded message is a request (it has a method) with an id member that is no
    string and no integer: JSON-RPC allows null only in an answer, MCP not even there for a
    request, and the SDK reads such a request as a notification, which it never answers."""
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return False
    found = message["id"]
    return isinstance(found, bool) or not isinstance(found, int | str)


def decoded(text: str) -> Any:
    """The JSON value of ``text``, or None when it is no JSON Python reads."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def request_id(given: Any) -> int | str | None:
    """The id the sender is waiting on, when the line (or what parsed of it) shows one."""
    if isinstance(given, str):
        try:
            given = json.loads(given, parse_int=lambda digits: int(digits) if len(digits) < 19 else None)
        except (ValueError, RecursionError):
            match = _EARLY_ID.match(given)
            given = {"id": json.loads(match.group(1))} if match else None
    found = given.get("id") if isinstance(given, dict) else None
    if isinstance(found, bool) or not isinstance(found, int | str):
        return None
    return found if isinstance(found, int) or not _bad_text(found) else None


def _bad_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # an id with a lone surrogate cannot be written back
        return True
    return False

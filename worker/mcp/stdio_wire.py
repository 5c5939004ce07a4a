"""The stdio wire under `dream mcp`: stdin read in lines of bounded size, and each request in
flight tracked on its own so that a client closing stdin still gets every answer."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import IO, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
import structlog
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import RequestId

log = structlog.get_logger(__name__)

# A line can hold a newline only at its end: a string with one before it came from no client.
TOO_LONG = "\n(line over the limit)\n"
_SKIP_CHUNK = 65_536
# How long the requests still running when stdin closes get to answer before the server exits.
DRAIN_SECONDS = 60.0


@contextmanager
def claimed_stdin() -> Iterator[IO[bytes]]:
    """The wire, from a private duplicate of fd 0, with fd 0 itself pointed at the null device
    while serving (as the SDK does when it reads stdin itself): nothing else in the process, nor
    a child, can take bytes meant for the server."""
    wire = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        # Never closed, nor ``wire``: a reader thread abandoned at a stop or a cancellation may
        # still block on them, holding the stream's lock (closing it here would wait for that
        # thread forever), and a closed descriptor's number could be handed to another file
        # under that thread.
        yield os.fdopen(wire, "rb", closefd=False)
    finally:
        os.dup2(wire, 0)


class BoundedLines:
    """Lines of ``wire`` as text, none read past ``limit`` bytes (the newline not counted).

    An over-long line is never held whole: its first ``limit + 1`` bytes show it is too long
    (and maybe its id), the rest is skipped in small chunks up to its newline. Lines end at
    newlines, so the stream resynchronises there: the client loses that one message only.
    It comes out as ``TOO_LONG`` followed by its first bytes' request id in JSON
    (``null`` when they show none): a line the JSON decoder refuses, which the read stream
    answers as too long (``too_long_id``)."""

    def __init__(self, wire: IO[bytes], limit: int,
                 id_of: Callable[[str], int | str | None]) -> None:
        self.wire = wire
        self.limit = limit
        self.id_of = id_of
        self.stopped = False
        self.ended = False  # stdin closed, or ``stop``: the server drains, then ends
        self._reading: anyio.CancelScope | None = None

    def stop(self) -> None:
        """End the lines here, as if stdin had closed (the server was told to stop): a line
        still being read is not waited for, and none after it is served."""
        self.stopped = self.ended = True
        if self._reading is not None:
            self._reading.cancel()

    def __aiter__(self) -> BoundedLines:
        return self

    async def __anext__(self) -> str:
        line = None
        with anyio.CancelScope() as self._reading:
            if not self.stopped:
                line = await self._read_in_daemon()
        self._reading = None
        if line is None or self.stopped:
            self.ended = True
            raise StopAsyncIteration
        return line

    async def _read_in_daemon(self) -> str | None:
        """``read_line`` in a daemon thread of its own: a read abandoned (a stop, a cancel)
        stays blocked on a client that may never write again, and an anyio worker thread,
        which Python joins at exit, would keep the process from ever ending."""
        token = anyio.lowlevel.current_token()
        done = anyio.Event()
        got: list[str | None | BaseException] = []

        def read() -> None:
            try:
                got.append(self.read_line())
            except BaseException as exc:  # handed to the reading task, raised there
                got.append(exc)
            with contextlib.suppress(RuntimeError):  # the event loop ended meanwhile
                anyio.from_thread.run_sync(done.set, token=token)

        threading.Thread(target=read, name="dream-mcp-stdin", daemon=True).start()
        await done.wait()
        if isinstance(got[0], BaseException):
            raise got[0]
        return got[0]

    def read_line(self) -> str | None:
        raw = self.wire.readline(self.limit + 1)
        if not raw:
            return None
        if len(raw) <= self.limit or raw.endswith(b"\n"):
            return raw.decode("utf-8", errors="replace")
        request_id = self.id_of(raw.decode("utf-8", errors="replace"))
        skipped = len(raw)
        while not raw.endswith(b"\n"):
            raw = self.wire.readline(_SKIP_CHUNK)
            if not raw:
                break
            skipped += len(raw)
        log.warning("mcp.line_too_long", limit=self.limit, skipped_bytes=skipped)
        return TOO_LONG + json.dumps(request_id)


def too_long_id(given: Any) -> tuple[bool, int | str | None]:
    """Whether a refused line is an over-long one, and the id its first bytes showed."""
    if not isinstance(given, str) or not given.startswith(TOO_LONG):
        return False, None
    found = json.loads(given[len(TOO_LONG):])
    return True, found if isinstance(found, int | str) else None


def too_long_line(limit: int) -> str:
    return (f"request too large: the line is longer than {limit} bytes "
            "(DREAM_API_MAX_BODY_BYTES); send less per message, or raise "
            "DREAM_API_MAX_BODY_BYTES for this server")


class InFlight:
    """The requests read and not yet answered, each on its own: two requests may share an id
    (JSON-RPC asks clients for unique ids; nothing makes them keep to it), and each is due its
    own answer, so an answer settles one request of its id, never all of them."""

    def __init__(self) -> None:
        self.waiting: dict[RequestId, deque[int]] = {}  # id → the requests read with it
        self._serials = itertools.count()

    @property
    def count(self) -> int:
        return sum(len(requests) for requests in self.waiting.values())

    def received(self, message: SessionMessage) -> SessionMessage:
        """``message``, counted if it is a request and carrying the hook the SDK calls when that
        request settles with no answer (the client cancelled it: the protocol forbids one)."""
        sent = message.message
        if not isinstance(sent, types.JSONRPCRequest):
            return message
        serial = next(self._serials)
        self.waiting.setdefault(sent.id, deque()).append(serial)
        metadata = message.metadata
        before = metadata.on_request_unanswered \
            if isinstance(metadata, ServerMessageMetadata) else None

        async def unanswered() -> None:
            self._settle(sent.id, serial)
            if before is not None:
                await before()

        if metadata is None:
            metadata = ServerMessageMetadata(on_request_unanswered=unanswered)
        elif isinstance(metadata, ServerMessageMetadata):
            metadata = replace(metadata, on_request_unanswered=unanswered)
        return SessionMessage(sent, metadata)

    def answered(self, message: SessionMessage) -> None:
        """An answer the server wrote: it settles the earliest request read with its id."""
        sent = message.message
        if isinstance(sent, types.JSONRPCResponse | types.JSONRPCError) and sent.id is not None:
            self._settle(sent.id, None)

    def _settle(self, request_id: RequestId, serial: int | None) -> None:
        requests = self.waiting.get(request_id)
        if not requests:
            return
        if serial is None:
            requests.popleft()
        elif serial in requests:
            requests.remove(serial)
        if not requests:
            del self.waiting[request_id]

    async def drain(self, seconds: float = DRAIN_SECONDS) -> None:
        """Wait (at most ``seconds``) until every request read has been answered."""
        deadline = time.monotonic() + seconds
        while self.waiting and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        if self.waiting:
            log.warning("mcp.unanswered_at_close", requests=self.count, waited_s=seconds)


class AnsweredWriteStream:
    """The SDK's write stream, telling ``InFlight`` of each answer it carries."""

    def __init__(self, inner: Any, in_flight: InFlight) -> None:
        self.inner = inner
        self.in_flight = in_flight

    async def send(self, message: SessionMessage) -> None:
        await self.inner.send(message)
        self.in_flight.answered(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> AnsweredWriteStream:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.inner.__aexit__(*exc)

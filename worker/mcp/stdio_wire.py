"""The stdio wire under `dream mcp`: stdin read in lines of bounded size.

A line longer than the limit is never held whole: its first ``limit + 1`` bytes show it is too
long (and, maybe, its id), the rest is skipped in small chunks up to its newline, and the server
goes on with the next line. Lines end at newlines, so the stream resynchronises there: a client
that sent one oversized message loses that message only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import anyio
import anyio.to_thread
import structlog

log = structlog.get_logger(__name__)

# A line can hold a newline only at its end: a string with one before it came from no client.
TOO_LONG = "\n(line over the limit)\n"
_SKIP_CHUNK = 65_536


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
        with os.fdopen(wire, "rb", closefd=False) as stream:
            yield stream
    finally:
        os.dup2(wire, 0)
        os.close(wire)


class BoundedLines:
    """Lines of ``wire`` as text, none read past ``limit`` bytes (the newline not counted).

    An over-long line comes out as ``TOO_LONG`` followed by its first bytes' request id in JSON
    (``null`` when they show none): a line the JSON decoder refuses, which the read stream
    answers as too long (``too_long_id``)."""

    def __init__(self, wire: IO[bytes], limit: int, id_of: Any) -> None:
        self.wire = wire
        self.limit = limit
        self.id_of = id_of

    def __aiter__(self) -> BoundedLines:
        return self

    async def __anext__(self) -> str:
        line = await anyio.to_thread.run_sync(self.read_line, abandon_on_cancel=True)
        if line is None:
            raise StopAsyncIteration
        return line

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

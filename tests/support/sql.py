"""The SQL an engine executes while a block runs, one normalised line per statement; and an
action run just before a given statement (another writer landing mid-way)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from worker.app import App


@contextmanager
def recorded_statements(app: App) -> Iterator[list[str]]:
    """Only the statements of the thread that opened the block: the engine's listener also
    sees other threads (the process's lease heartbeat reads and writes ``run_steps`` for any
    phase that runs long enough), whose statements are not the block's to count."""
    seen: list[str] = []
    me = threading.get_ident()

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if threading.get_ident() == me:
            seen.append(" ".join(statement.split()))

    event.listen(app.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(app.engine, "before_cursor_execute", record)


@contextmanager
def recorded_commits(app: App) -> Iterator[list[bool]]:
    """The commits of the thread that opened the block, each True when its transaction wrote
    (on PostgreSQL a unit that only read ends with COMMIT too); another thread's (a lease beat)
    are not the block's."""
    from worker.store.db import only_read

    seen: list[bool] = []
    me = threading.get_ident()

    def record(conn: Any) -> None:
        if threading.get_ident() == me:
            seen.append(not only_read(conn))

    event.listen(app.engine, "commit", record)
    try:
        yield seen
    finally:
        event.remove(app.engine, "commit", record)


@contextmanager
def before_first(app: App, starts: str | tuple[str, ...],
                 action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` (on its own connection) just before ``app`` first sends a statement
    starting with ``starts`` (or any of them): another writer landing between a read and the
    write after it. Fails the test if no such statement was sent."""
    done: list[bool] = []

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not done and " ".join(statement.split()).startswith(starts):
            done.append(True)
            action()

    event.listen(app.engine, "before_cursor_execute", on_statement)
    try:
        yield
    finally:
        event.remove(app.engine, "before_cursor_execute", on_statement)
    assert done, f"no statement started with {starts!r}"

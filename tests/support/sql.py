"""The SQL an engine executes while a block runs, one normalised line per statement."""

from __future__ import annotations

import threading
from collections.abc import Iterator
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

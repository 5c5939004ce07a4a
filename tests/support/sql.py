"""The SQL an engine executes while a block runs, one normalised line per statement."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from worker.app import App


@contextmanager
def recorded_statements(app: App) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(app.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(app.engine, "before_cursor_execute", record)

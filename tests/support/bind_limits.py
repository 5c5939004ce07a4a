"""The most values one statement may bind on each backend, with SQLite's lowered to the smallest
its builds ship: a look-up asked for one id more than that must still answer."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from worker.app import App

# SQLite's default before 3.32 (32,766 since; Debian's build allows 250,000), which some
# Pythons still link; psycopg sends at most 65,535 parameters, whatever the server.
SQLITE_SMALLEST = 999
POSTGRESQL = 65_535


@contextmanager
def bind_limit(app: App) -> Iterator[int]:
    """The app's limit while the block runs, lowered on SQLite for every connection it opens."""
    if app.engine.dialect.name != "sqlite":
        yield POSTGRESQL
        return

    def lower(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, SQLITE_SMALLEST)

    event.listen(app.engine, "connect", lower)
    app.engine.dispose()  # the pooled connections predate the listener
    try:
        yield SQLITE_SMALLEST
    finally:
        event.remove(app.engine, "connect", lower)
        app.engine.dispose()

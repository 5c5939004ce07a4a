"""Row locks in id order (PostgreSQL; SQLite has one writer): two transactions that lock some of
the same rows take them in the same order, so one waits for the other instead of each holding a
row the other wants (the cycle PostgreSQL breaks by failing one: "deadlock detected").

One order for every lock, whoever takes it: the ids' code-point order. Python's ``sorted``
gives it (an executemany of one-row UPDATEs locks its rows in the order of its parameters), and
so does a text ORDER BY under the "C" collation on a UTF-8 database (byte order is code-point
order in UTF-8). An ORDER BY under the database's own collation does not: on en_US.UTF-8
``'a1' < 'B1'``, in Python ``'B1' < 'a1'``, and a writer sorting one way deadlocks with one
sorting the other. So a lock's ORDER BY goes through ``lock_order``, and a lock in parameter
order through ``lock_sorted``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

from sqlalchemy import ColumnElement, String, and_, select
from sqlalchemy.orm import Session

T = TypeVar("T")

# PostgreSQL's byte-wise collation (every server has it, whatever locales it was built with).
BYTEWISE = "C"


def is_postgres(session: Session) -> bool:
    """Whether ``session`` writes to PostgreSQL (the only backend with row locks)."""
    return session.get_bind().dialect.name == "postgresql"


def lock_order(id_column: Any, on_postgres: bool) -> Any:
    """The ORDER BY term of a lock taken in ``id_column``'s order: a text column under the
    "C" collation on PostgreSQL (SQLite has no "C" collation, and its BINARY one already
    compares bytes); anything else (an integer id) as it is."""
    if on_postgres and isinstance(getattr(id_column, "type", None), String):
        return id_column.collate(BYTEWISE)
    return id_column


@overload
def lock_sorted(values: Iterable[str]) -> list[str]: ...
@overload
def lock_sorted(values: Iterable[T], key: Callable[[T], str]) -> list[T]: ...
def lock_sorted(values: Iterable[Any], key: Callable[[Any], str] | None = None) -> list[Any]:
    """Ids, or rows whose ``key`` is their id, in lock order: what an executemany that locks
    a row per parameter set, or a statement per chunk of ids, is given. A stable sort: two
    changes of one row stay in the order they were made."""
    return sorted(values, key=key)


def locked(session: Session, stmt: Any, id_column: Any) -> Any:
    """``stmt`` (a SELECT) locking its rows FOR UPDATE in lock order on PostgreSQL: a FOR
    UPDATE locks rows in the order it returns them. Unchanged on SQLite."""
    if not is_postgres(session):
        return stmt
    return stmt.order_by(lock_order(id_column, True)).with_for_update()


def locked_in_order(session: Session, id_column: Any, *where: ColumnElement[bool]) -> Any:
    """The WHERE clause of a multi-row UPDATE: the rows matching ``where``, on PostgreSQL
    through a sub-select that locks them in lock order first. An UPDATE alone takes its rows
    in whatever order its plan meets them (a scan: the order they lie in)."""
    if not is_postgres(session):
        return and_(*where)
    # Not correlated: the sub-select reads the UPDATE's own table, as a table of its own.
    held = locked(session, select(id_column).where(*where), id_column)
    return id_column.in_(held.correlate(None))

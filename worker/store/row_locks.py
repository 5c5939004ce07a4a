"""Row locks in id order (PostgreSQL; SQLite has one writer): two transactions that lock some of
the same rows take them in the same order, so one waits for the other instead of each holding a
row the other wants (the cycle PostgreSQL breaks by failing one: "deadlock detected")."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, select
from sqlalchemy.orm import Session


def locked_in_order(session: Session, id_column: Any, *where: ColumnElement[bool]) -> Any:
    """The WHERE clause of a multi-row UPDATE: the rows matching ``where``, on PostgreSQL
    through a sub-select that locks them in ``id_column``'s order first. An UPDATE alone takes
    its rows in whatever order its plan meets them (a scan: the order they lie in)."""
    if session.get_bind().dialect.name != "postgresql":
        return and_(*where)
    # Not correlated: the sub-select reads the UPDATE's own table, as a table of its own.
    locked = select(id_column).where(*where).order_by(id_column).with_for_update()
    return id_column.in_(locked.correlate(None))

"""Lists of ids (hashes, fingerprints, rows) cut into pieces of one statement each, so an
``IN (...)`` list or a multi-row VALUES stays under the drivers' bound-parameter limits; and
the plain look-up of columns by id built on it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar, overload

from sqlalchemy import ColumnElement, Row, select
from sqlalchemy.orm import InstrumentedAttribute, Session

T = TypeVar("T")
Column = ColumnElement[Any] | InstrumentedAttribute[Any]
AnyRow = Row[*tuple[Any, ...]]

# Values bound per statement: far under SQLite's 32,766 and PostgreSQL's 65,535. Rows bind one
# value a column: a caller inserting wide rows sizes its chunks by their columns.
IN_CHUNK = 500


@overload
def chunked(values: list[T], size: int = IN_CHUNK) -> Iterator[list[T]]: ...
@overload
def chunked(values: Sequence[T], size: int = IN_CHUNK) -> Iterator[Sequence[T]]: ...
def chunked(values: Sequence[T], size: int = IN_CHUNK) -> Iterator[Sequence[T]]:
    """Consecutive slices of ``values`` of ``size`` items (a list's are lists), the last one
    shorter, in order; none for an empty sequence (no statement with an empty list)."""
    if size < 1:  # here, at the call, not when the first slice is taken
        raise ValueError(f"chunk size must be at least 1 (got {size})")
    return (values[start : start + size] for start in range(0, len(values), size))


def rows_by_id(session: Session, id_column: Column, columns: Sequence[Column],
               ids: Iterable[str]) -> dict[str, AnyRow]:
    """id → row (``id_column``, then ``columns``) of the ids that exist, each id asked once:
    a SELECT per ``IN_CHUNK`` ids on the session's connection (no ORM work, no autoflush)."""
    conn = session.connection()
    found: dict[str, AnyRow] = {}
    for chunk in chunked(list(set(ids))):
        stmt = select(id_column, *columns).where(id_column.in_(chunk))
        found.update((r[0], r) for r in conn.execute(stmt))
    return found


def records_by_id(session: Session, model: Any, fields: Sequence[str],
                  ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """id → {attribute: value} of ``model``'s ``fields`` for the ids that exist (``rows_by_id``):
    what an import compares a line of a stored id against."""
    found = rows_by_id(session, model.id, [getattr(model, f) for f in fields], ids)
    return {i: dict(zip(fields, tuple(r)[1:], strict=True)) for i, r in found.items()}

"""The guarded UPDATE an undo restores notes and examples with (``SafetyRepository._restore``),
built once per set of columns."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, Table, and_, bindparam, or_, update

from worker.domain.types import NoteStatus, Protection
from worker.store.types import JSONType

_PINNED = (Protection.PROTECTED.value, Protection.IMMUTABLE.value)
_RESTORES: dict[tuple[str, tuple[str, ...], bool], Any] = {}


def restore_statement(table: Table, keys: tuple[str, ...], retires: bool) -> Any:
    """The UPDATE of ``keys`` (and the version) on ``table`` where the row is still at
    ``b_version``; ``retires``: also only where the note is not active, or neither pinned nor
    taken over since the undo read it (``is_auto_generated`` still ``b_auto``): a pin and a
    takeover keep the version, and a host may write either without the scope's lock."""
    stmt = _RESTORES.get((table.name, keys, retires))
    if stmt is None:
        stmt = (update(table)
                .where(table.c.id == bindparam("b_id"), table.c.version == bindparam("b_version"))
                .values({k: _value(table, k) for k in (*keys, "version")}))
        if retires:
            # Not NOT IN: an expanding list cannot go through executemany.
            stmt = stmt.where(or_(table.c.status != NoteStatus.ACTIVE.value, and_(
                *(table.c.protection != p for p in _PINNED),
                table.c.is_auto_generated == bindparam("b_auto", type_=Boolean))))
        _RESTORES[(table.name, keys, retires)] = stmt
    return stmt


def _value(table: Table, key: str) -> Any:
    """The bound value of ``key``: a JSON column's None (a before-image without flags) is SQL
    NULL, as the note held it; bound as the column's type it was the JSON text 'null'."""
    if isinstance(table.c[key].type, JSONType):
        return bindparam(f"v_{key}", type_=JSONType(none_as_null=True))
    return bindparam(f"v_{key}")

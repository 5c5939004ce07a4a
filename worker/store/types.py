"""Column types that differ by backend: pgvector ``vector`` on PostgreSQL, float32 bytes on SQLite."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pgvector.sqlalchemy import VECTOR
from sqlalchemy import JSON, DateTime, LargeBinary
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine


class Embedding(TypeDecorator[np.ndarray]):
    """A float32 vector of any dimension (the embedder decides; no fixed width in the schema)."""

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(VECTOR())
        return dialect.type_descriptor(LargeBinary())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        arr = np.asarray(value, dtype=np.float32)
        if dialect.name == "postgresql":
            return arr  # VECTOR's own bind processor serialises it
        return arr.tobytes()

    def process_result_value(self, value: Any, dialect: Dialect) -> np.ndarray | None:
        if value is None:
            return None
        if dialect.name == "postgresql":
            return np.asarray(value, dtype=np.float32)
        return np.frombuffer(value, dtype=np.float32)


class JSONType(TypeDecorator[Any]):
    """JSON on SQLite, JSONB on PostgreSQL."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        # ``JSONType(none_as_null=True)``: None binds as SQL NULL, not the JSON text 'null'.
        none_as_null = bool(getattr(self.impl, "none_as_null", False))
        if dialect.name == "postgresql":
            return dialect.type_descriptor(JSONB(none_as_null=none_as_null))
        return dialect.type_descriptor(JSON(none_as_null=none_as_null))


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python on every backend (SQLite stores naive UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    # On SQLite one function instead of ours chained to the dialect's: a third cheaper, and every
    # row a run writes carries several of these.
    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        # The last value bound and its text: a write's rows share its one timestamp. One tuple,
        # replaced whole, so threads sharing the processor never pair a value with another's text.
        last: list[tuple[Any, str]] = [(None, "")]

        def process(value: Any) -> str | None:
            if value is None:
                return None
            seen, known = last[0]
            if value is seen:
                return known
            given = value
            if value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            # The text SQLite's DATETIME writes: "%04d-%02d-%02d %02d:%02d:%02d.%06d".
            text: str = value.isoformat(" ", "microseconds")
            last[0] = (given, text)
            return text

        return process

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        moment: datetime = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return moment

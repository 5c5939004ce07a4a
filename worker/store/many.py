"""One executemany of a prebuilt DML statement on the driver: compiled once per dialect and row
shape, each row bound through the columns' own bind processors. A run's batched writes skip
SQLAlchemy's per-row parameter construction and the statement's cache-key walk; the SQL, the
driver call and the rowcount are the ones ``Connection.execute(stmt, rows)`` would make."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from operator import itemgetter
from typing import Any, cast

from sqlalchemy.engine import Connection
from sqlalchemy.sql import Executable

# Prebuilt statements only (module constants or per-shape caches): a plan holds its statement.
MAX_PLANS = 512
_PLANS: dict[tuple[Executable, str, tuple[str, ...]], _Plan | None] = {}
Processor = Callable[[Any], Any]
_STYLES = ("qmark", "format", "pyformat", "named")


@dataclass(frozen=True)
class _Plan:
    sql: str
    positional: bool
    # (name, row key or None for a value fixed in the statement, fixed value, processor)
    binds: tuple[tuple[str, str | None, Any, Processor | None], ...]

    def bind(self, rows: Sequence[dict[str, Any]]) -> list[Any]:
        """Each row's parameters as the driver takes them; a processor sees every value, None
        included, as in SQLAlchemy's own execution (JSON writes None as JSON null)."""
        if self.positional:
            return self._positional(rows)
        out: list[Any] = []
        for row in rows:
            out.append({name: fixed if key is None else (row[key] if proc is None
                                                         else proc(row[key]))
                        for name, key, fixed, proc in self.binds})
        return out

    @cached_property
    def _picks(self) -> tuple[Callable[[dict[str, Any]], tuple[Any, ...]] | None,
                              tuple[tuple[int | None, Any, Processor | None], ...]]:
        """What ``_positional`` binds rows with: a getter of the row values in order (None when
        every parameter is fixed), and per parameter where it comes from (the index of its
        row value, or None for a value fixed in the statement), that fixed value and the
        processor of its row value."""
        keys = [key for _, key, _, _ in self.binds if key is not None]
        getter = itemgetter(*keys) if keys else None
        get = getter if len(keys) != 1 or getter is None else (lambda row: (getter(row),))
        sources: list[tuple[int | None, Any, Processor | None]] = []
        at = 0
        for _, key, value, proc in self.binds:
            if key is None:
                sources.append((None, value, None))
            else:
                sources.append((at, None, proc))
                at += 1
        return get, tuple(sources)

    def _positional(self, rows: Sequence[dict[str, Any]]) -> list[Any]:
        """The positional parameters of each row: picked in C; when a value is fixed or
        converted, column by column (each processor mapped over its column, every fixed value
        repeated) and the rows zipped back."""
        get, sources = self._picks
        if get is not None and all(at == k and proc is None
                                   for k, (at, _, proc) in enumerate(sources)):
            return list(map(get, rows))  # every parameter a row value, as it is
        picked: list[Any] = list(zip(*map(get, rows), strict=True)) if get is not None else []
        columns: list[Any] = []
        for at, value, proc in sources:
            if at is None:
                columns.append(repeat(value, len(rows)))
            else:
                columns.append(picked[at] if proc is None else map(proc, picked[at]))
        return list(zip(*columns, strict=True))


def execute_many(conn: Connection, stmt: Executable, rows: Sequence[dict[str, Any]]) -> int:
    """``conn.execute(stmt, rows)`` for a list of rows with the same keys; the rowcount. A
    statement this cannot bind exactly (Python-side column defaults to fill, RETURNING,
    expanding or literal parameters, escaped names) goes through ``Connection.execute``."""
    if not rows:
        return 0
    keys = tuple(rows[0])
    key = (stmt, conn.dialect.name, keys)
    if key in _PLANS:
        plan = _PLANS[key]
    else:
        plan = _plan(conn, stmt, keys)
        if len(_PLANS) < MAX_PLANS:
            _PLANS[key] = plan
    if plan is None:
        return int(conn.execute(stmt, list(rows)).rowcount)
    return int(conn.exec_driver_sql(plan.sql, plan.bind(rows)).rowcount)


def _plan(conn: Connection, stmt: Executable, keys: tuple[str, ...]) -> _Plan | None:
    dialect = conn.dialect
    compiled: Any = cast(Any, stmt).compile(dialect=dialect, column_keys=list(keys),
                                            for_executemany=True)
    if (compiled.insert_prefetch or compiled.update_prefetch or compiled.effective_returning
            or compiled.literal_execute_params or compiled.post_compile_params
            or compiled.escaped_bind_names or dialect.paramstyle not in _STYLES):
        return None
    positional = bool(compiled.positional)
    names = list(compiled.positiontup) if positional else list(compiled.binds)
    wanted = set(keys)
    binds = []
    for name in names:
        param = compiled.binds[name]
        if param.expanding or param.callable is not None:
            return None
        proc = param.type.dialect_impl(dialect).bind_processor(dialect)
        if name in wanted:
            binds.append((name, name, None, proc))
        elif param.required:
            return None  # a value the rows do not carry: let SQLAlchemy raise its error
        else:
            value = param.effective_value
            binds.append((name, None, proc(value) if proc else value, None))
    return _Plan(compiled.string, positional, tuple(binds))

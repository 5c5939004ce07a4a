"""Read-only look-ups of reference entities: the worker's registry or a host's own tables."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import String, bindparam, cast, column, literal, null, select, table, union_all
from sqlalchemy.orm import Session

from worker.store.chunks import chunked
from worker.store.repositories.registry import ENTITY_MODELS

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# Ids per look-up: it binds nothing else, so twice the store's ``IN_CHUNK`` still stays well
# under every driver's limit (prune asks for every entity of a batch at once).
_CHUNK = 1000


@dataclass(frozen=True)
class EntityRecord:
    """What a look-up found for one id; ids that do not exist are simply absent."""

    status: str
    deleted: bool
    deleted_reason: str | None = None
    deleted_at: datetime | None = None  # (a registry record's own deletion time, if any)


@dataclass(frozen=True)
class HostTable:
    """Where a host keeps one entity type: "table.id_column.status_column[.reason_column]"."""

    table: str
    id_column: str
    status_column: str
    reason_column: str | None = None

    @classmethod
    def parse(cls, spec: str, setting: str) -> HostTable:
        parts = spec.split(".")
        if len(parts) not in (3, 4) or not all(_IDENTIFIER.match(p) for p in parts):
            # Identifiers are checked strictly (letters, digits, underscore) and then quoted by
            # SQLAlchemy, so a setting can never smuggle SQL into the look-up.
            raise ValueError(
                f"{setting} must look like table.id_column.status_column[.reason_column] using "
                f"letters, digits and underscores only (got {spec!r})"
            )
        return cls(*parts)

    def selectable(self) -> Any:
        cols: list[Any] = [column(self.id_column), column(self.status_column)]
        if self.reason_column:
            cols.append(column(self.reason_column))
        return table(self.table, *cols)


_UNIONS: dict[tuple[str, ...], Any] = {}


def _registry_union(kinds: tuple[str, ...]) -> Any:
    """One SELECT per kind (kind, id, status, deleted_at, deleted_reason), UNION ALL; built
    once per set of kinds, the ids bound as expanding parameters ``<kind>_ids``."""
    stmt = _UNIONS.get(kinds)
    if stmt is None:
        parts = []
        for kind in kinds:
            model = ENTITY_MODELS[kind]
            reason = getattr(model, "deleted_reason", None)
            parts.append(select(
                literal(kind, String).label("kind"), model.id.label("id"),
                model.status.label("status"), model.deleted_at.label("deleted_at"),
                (reason if reason is not None else cast(null(), String)).label("deleted_reason"),
            ).where(model.id.in_(bindparam(f"{kind}_ids", expanding=True))))
        stmt = _UNIONS[kinds] = parts[0] if len(parts) == 1 else union_all(*parts)
    return stmt


class ReferenceRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def registry(self, kind: str, ids: Iterable[str]) -> dict[str, EntityRecord]:
        """The worker's own registry table for ``kind``; one query per 1,000 ids."""
        model = ENTITY_MODELS[kind]
        wanted = sorted(set(ids))
        out: dict[str, EntityRecord] = {}
        reason_col = getattr(model, "deleted_reason", None)
        for chunk in chunked(wanted, _CHUNK):
            cols: list[Any] = [model.id, model.status, model.deleted_at]
            if reason_col is not None:
                cols.append(reason_col)
            for row in self.session.execute(select(*cols).where(model.id.in_(chunk))):
                out[row.id] = EntityRecord(
                    status=row.status,
                    deleted=row.deleted_at is not None or row.status == "deleted",
                    deleted_reason=row.deleted_reason if reason_col is not None else None,
                    deleted_at=row.deleted_at,
                )
        return out

    def registry_many(self, wanted: Mapping[str, Iterable[str]]) -> dict[str, dict[str, EntityRecord]]:
        """``registry`` for several kinds at once: one UNION ALL per 1,000 ids in all (prune
        asks for the agent, user, company and conversations of a batch in one statement)."""
        pairs = [(kind, i) for kind in sorted(wanted) for i in sorted(set(wanted[kind]))]
        out: dict[str, dict[str, EntityRecord]] = {kind: {} for kind in wanted}
        for chunk in chunked(pairs, _CHUNK):
            by_kind: dict[str, list[str]] = {}
            for kind, i in chunk:
                by_kind.setdefault(kind, []).append(i)
            stmt = _registry_union(tuple(by_kind))
            rows = self.session.connection().execute(
                stmt, {f"{k}_ids": v for k, v in by_kind.items()})
            for row in rows:
                out[row.kind][row.id] = EntityRecord(
                    status=row.status,
                    deleted=row.deleted_at is not None or row.status == "deleted",
                    deleted_reason=row.deleted_reason,
                    deleted_at=row.deleted_at,
                )
        return out

    def probe_host(self, where: HostTable) -> None:
        """Read the configured table and columns for no row: the driver's error when one of
        them is not there."""
        self.session.execute(select(*where.selectable().c).limit(0)).all()

    def host(self, where: HostTable, ids: Iterable[str]) -> dict[str, EntityRecord]:
        """A host table named by configuration, read-only; one query per 1,000 ids."""
        tbl = where.selectable()
        wanted = sorted(set(ids))
        out: dict[str, EntityRecord] = {}
        for chunk in chunked(wanted, _CHUNK):
            stmt = select(*tbl.c).where(tbl.c[where.id_column].in_(chunk))
            for row in self.session.execute(stmt):
                status = str(row[1]) if row[1] is not None else "active"
                reason = row[2] if where.reason_column else None
                out[str(row[0])] = EntityRecord(
                    status=status, deleted=status == "deleted",
                    deleted_reason=str(reason) if reason is not None else None,
                )
        return out

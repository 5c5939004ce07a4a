"""All SQL touching examples (input/output pairs the agent learned from)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, insert, select
from sqlalchemy.orm import Session

from worker.domain.types import NoteStatus, Scope
from worker.store.chunks import records_by_id, rows_by_id
from worker.store.models import ExampleRow
from worker.store.repositories.retention import ArchiveItem, archive_rows

_E = cast(Table, ExampleRow.__table__)
# Prebuilt (every run's archive phase asks it): no statement built, no cache key generated.
_ACTIVE = (
    select(_E.c.id, _E.c.is_auto_generated, _E.c.success_score, _E.c.created_at,
           _E.c.last_accessed_at, _E.c.expires_at, _E.c.version, _E.c.access_count)
    .where(_E.c.scope_key == bindparam("scope_key"), _E.c.status == NoteStatus.ACTIVE.value)
    .order_by(_E.c.id)
)


@dataclass
class Example:
    """What the archive planner needs of one example (never its input/output text)."""

    id: str
    is_auto_generated: bool
    success_score: float | None
    created_at: datetime
    last_accessed_at: datetime | None
    expires_at: datetime | None
    version: int
    access_count: int = 0  # read, perhaps with no date of the last read: then never idle


class ExampleRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def insert_many(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.session.execute(insert(ExampleRow), rows)

    def records(self, ids: Iterable[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """id → ``fields`` of the stored ones: what an import compares a line of a stored id
        against (``worker.ingest.same_record``)."""
        return records_by_id(self.session, ExampleRow, fields, ids)

    def active(self, scope: Scope) -> list[Example]:
        """One query per scope: every active example with the fields retention decides on."""
        rows = self.session.connection().execute(_ACTIVE, {"scope_key": scope.key}).all()
        return [Example(**r._asdict()) for r in rows]

    def review_state(self, ids: Iterable[str]) -> dict[str, Any]:
        """Current version, status and the fields archive decides on of each id (rows with
        those attributes), one query: what makes an example's review item stale."""
        return rows_by_id(self.session, _E.c.id, (
            _E.c.version, _E.c.status, _E.c.is_auto_generated, _E.c.expires_at,
            _E.c.last_accessed_at, _E.c.success_score), ids)

    def count_by_status(self, scope: Scope) -> dict[str, int]:
        rows = self.session.execute(
            select(ExampleRow.status, func.count())
            .where(ExampleRow.scope_key == scope.key).group_by(ExampleRow.status)
        ).all()
        return {status: count for status, count in rows}

    def archive(
        self, scope: Scope, items: list[ArchiveItem], *, run_id: str | None, reason: str,
        now: datetime,
    ) -> list[str]:
        """Batched archive with an operation-log row per example (entity="example")."""
        return archive_rows(self.session, ExampleRow, "example", scope, items, run_id=run_id,
                            reason=reason, now=now)

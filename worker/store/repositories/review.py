"""All SQL touching review items (changes proposed by a run, approved or declined later)."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert, select, update
from sqlalchemy.orm import Session

from worker.domain.types import Scope
from worker.store.chunks import chunked
from worker.store.models import ReviewItemRow
from worker.store.row_locks import locked_in_order

_ITEMS = cast(Table, ReviewItemRow.__table__)
OPEN = "open"
APPROVED = "approved"
UNDONE = "undone"


class ReviewItemRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_many(self, scope: Scope, run_id: str | None, rows: Iterable[dict[str, Any]],
                 now: datetime) -> int:
        """Insert open items (one executemany); the number inserted."""
        values = [{**r, "scope_key": scope.key, "run_id": run_id, "status": OPEN,
                   "created_at": now} for r in rows]
        if values:
            self.session.connection().execute(insert(_ITEMS), values)
        return len(values)

    def open_rows(self, scope: Scope) -> list[ReviewItemRow]:
        """The scope's open items (versions, fingerprint, payload): what a run plans around."""
        return list(self.session.scalars(
            select(ReviewItemRow).where(ReviewItemRow.scope_key == scope.key,
                                        ReviewItemRow.status == OPEN).order_by(ReviewItemRow.id)))

    def open_naming(self, scope: Scope, ids: Iterable[str]) -> builtins.list[ReviewItemRow]:
        """The scope's open items that name any of ``ids`` (a member or a source): one light
        read of every open item's ids, then the matching rows whole (none when nothing
        matches), so a host write in a scope with many open items loads only its own."""
        wanted = set(ids)
        named = self.session.execute(
            select(ReviewItemRow.id, ReviewItemRow.versions, ReviewItemRow.source_ids)
            .where(ReviewItemRow.scope_key == scope.key, ReviewItemRow.status == OPEN)).all()
        hits = [r.id for r in named
                if wanted & (set(r.versions or {}) | set(r.source_ids or ()))]
        if not hits:
            return []
        return [row for chunk in chunked(hits) for row in self.session.scalars(
            select(ReviewItemRow).where(ReviewItemRow.id.in_(chunk)).order_by(ReviewItemRow.id))]

    def mark_stale(self, item_ids: list[int], now: datetime, outcome: str,
                   by: str = "run") -> None:
        """The open items of these ids stale: an UPDATE per ``IN_CHUNK`` ids, in id order;
        ``by``: what found them so (a run, or the host write that moved their notes)."""
        for chunk in chunked(sorted(set(item_ids))):
            self.session.execute(
                update(ReviewItemRow)
                .where(locked_in_order(self.session, ReviewItemRow.id,
                                       ReviewItemRow.id.in_(chunk)),
                       ReviewItemRow.status == OPEN)
                .values(status="stale", decided_at=now, decided_by=by, outcome=outcome))

    def scopes_with_open(self, limit: int = 200) -> list[Scope]:
        """Scopes that have open items (what an admin's review page offers)."""
        keys = self.session.scalars(
            select(ReviewItemRow.scope_key).where(ReviewItemRow.status == OPEN).distinct()
            .order_by(ReviewItemRow.scope_key).limit(limit))
        return [Scope.from_key(k) for k in keys]

    def get(self, scope: Scope, item_id: int) -> ReviewItemRow | None:
        """The item, only if it belongs to ``scope`` (another scope's id is not found)."""
        return self.session.scalars(
            select(ReviewItemRow).where(ReviewItemRow.id == item_id,
                                        ReviewItemRow.scope_key == scope.key)).first()

    def list(self, scope: Scope, *, status: str | None = OPEN, run_id: str | None = None,
             limit: int | None = None, offset: int = 0) -> list[ReviewItemRow]:
        """The scope's items, oldest first (the order they were proposed in)."""
        stmt = select(ReviewItemRow).where(ReviewItemRow.scope_key == scope.key)
        if status is not None:
            stmt = stmt.where(ReviewItemRow.status == status)
        if run_id is not None:
            stmt = stmt.where(ReviewItemRow.run_id == run_id)
        stmt = stmt.order_by(ReviewItemRow.id).offset(offset)
        if limit is not None:
            stmt = stmt.limit(limit)
        return list(self.session.scalars(stmt))

    def decided(self, scope: Scope, limit: int) -> builtins.list[ReviewItemRow]:
        """The scope's ``limit`` most recently proposed items that are no longer open, newest
        first (the review page's history)."""
        return list(self.session.scalars(
            select(ReviewItemRow).where(ReviewItemRow.scope_key == scope.key,
                                        ReviewItemRow.status != OPEN)
            .order_by(ReviewItemRow.id.desc()).limit(limit)))

    def decide(self, item_id: int, status: str, *, now: datetime, by: str | None,
               outcome: str | None = None, applied_run_id: str | None = None) -> bool:
        """Compare-and-set open → ``status``; False when someone decided it first."""
        result = self.session.execute(
            update(ReviewItemRow)
            .where(ReviewItemRow.id == item_id, ReviewItemRow.status == OPEN)
            .values(status=status, decided_at=now, decided_by=by, outcome=outcome,
                    applied_run_id=applied_run_id))
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def undo_applied(self, run_id: str) -> int:
        """The items an undone run applied: approved → undone (approver and run kept)."""
        result = self.session.execute(
            update(ReviewItemRow)
            .where(locked_in_order(self.session, ReviewItemRow.id,
                                   ReviewItemRow.applied_run_id == run_id,
                                   ReviewItemRow.status == APPROVED))
            .values(status=UNDONE, outcome=f"undone: run {run_id}, which applied it, was "
                                             "undone; the next run proposes afresh"))
        return int(result.rowcount or 0)  # type: ignore[attr-defined]

    def applied_of(self, run_id: str) -> builtins.list[tuple[int, str]]:
        """(item id, the approval's run) of the items ``run_id`` proposed that stand applied:
        what undoing the proposing run leaves in place (each approval is a run of its own)."""
        return [(int(r.id), str(r.applied_run_id)) for r in self.session.execute(
            select(ReviewItemRow.id, ReviewItemRow.applied_run_id)
            .where(ReviewItemRow.run_id == run_id, ReviewItemRow.status == APPROVED)
            .order_by(ReviewItemRow.id))]

    def withdraw_run(self, run_id: str, now: datetime) -> int:
        """An undone run's open proposals go with it (declined, nothing remembered)."""
        result = self.session.execute(
            update(ReviewItemRow)
            .where(locked_in_order(self.session, ReviewItemRow.id,
                                   ReviewItemRow.run_id == run_id, ReviewItemRow.status == OPEN))
            .values(status="declined", decided_at=now, decided_by="undo",
                    outcome=f"withdrawn: run {run_id} was undone"))
        return int(result.rowcount or 0)  # type: ignore[attr-defined]

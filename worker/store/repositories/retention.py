"""SQL for prune and archive: candidate loads, and the examples' batched archive with an
operation-log row each (notes go through the phase kit's one guarded write)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, insert, or_, select, tuple_, update
from sqlalchemy.orm import Session

from worker.domain.types import Note, NoteStatus, Protection, Scope
from worker.store.chunks import IN_CHUNK, chunked
from worker.store.models import NoteLineageRow, NoteRow, OperationLogRow
from worker.store.repositories.note_load import ABSORBED
from worker.store.repositories.notes import _NOTE_COLUMNS, _row_to_note
from worker.store.row_locks import is_postgres, lock_order, lock_sorted


@dataclass(frozen=True)
class LineageParent:
    """A note another note was written from or retired into (one lineage edge), as it is now."""

    id: str
    child_id: str
    relation: str
    status: str
    consolidated_into_id: str | None
    source_conversation_id: str | None
    lineage_conversation_ids: tuple[str, ...]


@dataclass(frozen=True)
class ArchiveItem:
    """One row to archive if it is still at ``version`` (and ``expect``'s fields still hold the
    values the plan decided on: a host renews or re-scores an example without a new version);
    ``comment`` goes into its operation-log reason."""

    id: str
    version: int
    comment: str
    expect: tuple[tuple[str, Any], ...] = ()


def append_comment(existing: str | None, comment: str) -> str:
    return comment if not existing else f"{existing}\n{comment}"


# The UPDATE binds three values an item (its id, and its id with its version).
_ARCHIVE_CHUNK = IN_CHUNK // 3


def archive_rows(
    session: Session, model: Any, entity: str, scope: Scope, items: list[ArchiveItem], *,
    run_id: str | None, reason: str, now: datetime,
) -> list[str]:
    """Archive rows still active at their planned version; returns the ids actually archived.

    Per ``_ARCHIVE_CHUNK`` items in id order: one SELECT for the before-images, one UPDATE …
    RETURNING, and one executemany into the operation log: a few statements per scope, never
    one per row. A row the host changed since it was loaded fails the version guard and is
    left alone (R10).
    """
    done: list[str] = []
    for chunk in chunked(lock_sorted(items, key=lambda i: i.id), _ARCHIVE_CHUNK):
        done += _archive_rows(session, model, entity, scope, chunk, run_id=run_id,
                              reason=reason, now=now)
    return sorted(done)


def _archive_rows(
    session: Session, model: Any, entity: str, scope: Scope, items: list[ArchiveItem], *,
    run_id: str | None, reason: str, now: datetime,
) -> list[str]:
    cols = [model.id, model.version, model.status]
    cols += [getattr(model, f) for f in sorted({f for i in items for f, _ in i.expect})
             if f not in ("id", "version", "status", "comments")]
    current = {
        r.id: r for r in session.connection().execute(
            # In lock order, as every multi-row lock (``worker.store.row_locks``); on SQLite
            # in id order, no lock (the write lock is the transaction's own).
            select(*cols).where(model.id.in_([i.id for i in items]))
            .order_by(lock_order(model.id, is_postgres(session))).with_for_update()
        )
    }
    planned = [item for item in items if (row := current.get(item.id)) is not None
               and row.version == item.version and row.status == NoteStatus.ACTIVE.value
               and _as_planned(row, item.expect)]
    done = sorted(_archive(session, model, planned, now)) if planned else []
    by_id = {i.id: i for i in items}
    log_rows = [_log_row(current[nid], by_id[nid], entity, scope, run_id, reason, now)
                for nid in done]
    if log_rows:
        session.connection().execute(insert(OperationLogRow), log_rows)
    return done


def _as_planned(row: Any, expect: tuple[tuple[str, Any], ...]) -> bool:
    """The plan's values were read through the same typed columns (times aware UTC on both
    backends), so they compare as read."""
    return all(getattr(row, f) == v for f, v in expect)


def _archive(session: Session, model: Any, group: list[ArchiveItem],
             now: datetime) -> list[str]:
    """One UPDATE … RETURNING for the items; the ids it archived."""
    values: dict[str, Any] = {"status": NoteStatus.ARCHIVED.value, "version": model.version + 1}
    if hasattr(model, "updated_at"):
        values["updated_at"] = now
    stmt = (
        update(model)
        # The plain ``id IN`` lets SQLite use the primary key; it scans the whole table
        # for a row-value IN alone (measured: 0.5 s per scope at 10k notes).
        .where(model.id.in_([i.id for i in group]),
               tuple_(model.id, model.version).in_([(i.id, i.version) for i in group]),
               model.status == NoteStatus.ACTIVE.value,
               # Backstop for R26 under every planner: maintenance never archives a row a
               # person wrote (notes and examples alike).
               model.is_auto_generated.is_(True))
        .values(**values)
        .returning(model.id)
        .execution_options(synchronize_session=False)
    )
    return [r[0] for r in session.connection().execute(stmt)]


def _log_row(row: Any, item: ArchiveItem, entity: str, scope: Scope, run_id: str | None,
             reason: str, now: datetime) -> dict[str, Any]:
    """The operation-log row of one archived row, from the before-image loaded under lock."""
    before: dict[str, Any] = {"status": row.status, "version": row.version}
    after: dict[str, Any] = {"status": NoteStatus.ARCHIVED.value, "version": row.version + 1}
    return {
        "run_id": run_id, "scope_key": scope.key, "entity": entity, "entity_id": row.id,
        "op": "update", "before": before, "after": after,
        "reason": f"{reason}: {item.comment}", "created_at": now,
    }


def retirement_befores(session: Session, into: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per note id: the tracked fields as they were before the latest change that retired it
    into ``into[id]`` (its operation-log before-image; a host fuse zeroes importance), what a
    note given back gets again; absent when the log has none. One statement per 500 notes."""
    out: dict[str, dict[str, Any]] = {}
    ids = sorted(into)
    for chunk in chunked(ids):
        for entry in session.connection().execute(
            select(OperationLogRow.entity_id, OperationLogRow.before, OperationLogRow.after)
            .where(OperationLogRow.entity == "note", OperationLogRow.entity_id.in_(chunk))
            .order_by(OperationLogRow.id)
        ):
            if (entry.after or {}).get("consolidated_into_id") == into[entry.entity_id]:
                out[entry.entity_id] = dict(entry.before or {})
    return out


class RetentionRepository:
    """Notes as prune and archive see them (no embeddings loaded: neither phase needs vectors)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def prune_candidates(self, scope: Scope, limit: int, now: datetime,
                         ) -> tuple[list[Note], set[str]]:
        """Active, auto-generated, non-protected notes, least recently checked first (never first;
        a check stamped after ``now``, by a run with a later clock, counts as none); with them,
        which a retired note points at (``ScopeSnapshot.absorbed``)."""
        never = or_(NoteRow.last_checked_at.is_(None), NoteRow.last_checked_at > now)
        never_first = case((never, 0), else_=1)
        rows = self.session.connection().execute(
            select(*_NOTE_COLUMNS, ABSORBED)
            .where(
                NoteRow.scope_key == scope.key,
                NoteRow.status == NoteStatus.ACTIVE.value,
                NoteRow.is_auto_generated.is_(True),
                NoteRow.protection.notin_((Protection.IMMUTABLE.value, Protection.PROTECTED.value)),
            )
            .order_by(never_first, case((never, None), else_=NoteRow.last_checked_at),
                      NoteRow.created_at, NoteRow.id)
            .limit(limit)
        ).all()
        return [_row_to_note(r) for r in rows], {r.id for r in rows if r.absorbed}

    def lineage_parents(self, child_ids: list[str], relations: tuple[str, ...],
                        ) -> list[LineageParent]:
        """The parents of these notes over ``relations`` edges, with their state: one statement
        per 500 children (what prune asks only when a fused note's conversation is gone)."""
        out: list[LineageParent] = []
        for chunk in chunked(child_ids):
            out.extend(LineageParent(r.id, r.child_id, r.relation, r.status,
                                     r.consolidated_into_id, r.source_conversation_id,
                                     tuple(r.lineage_conversation_ids or ()))
                       for r in self.session.connection().execute(
                select(NoteRow.id, NoteLineageRow.child_id, NoteLineageRow.relation,
                       NoteRow.status, NoteRow.consolidated_into_id,
                       NoteRow.source_conversation_id, NoteRow.lineage_conversation_ids)
                .join(NoteRow, NoteRow.id == NoteLineageRow.parent_id)
                .where(NoteLineageRow.child_id.in_(chunk),
                       NoteLineageRow.relation.in_(relations))
                .order_by(NoteRow.id)))
        return out

    def retirement_befores(self, into: dict[str, str]) -> dict[str, dict[str, Any]]:
        return retirement_befores(self.session, into)

    def active_notes(self, scope: Scope) -> list[Note]:
        rows = self.session.connection().execute(
            select(*_NOTE_COLUMNS)
            .where(NoteRow.scope_key == scope.key, NoteRow.status == NoteStatus.ACTIVE.value)
            .order_by(NoteRow.id)
        ).all()
        return [_row_to_note(r) for r in rows]


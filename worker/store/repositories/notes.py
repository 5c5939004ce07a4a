"""NoteRepository: the reads of notes, lineage and the operation log (the writes are
inherited from ``note_writes.NoteWrites``), and the ScopeSnapshot they load."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session, defer

from worker.domain.types import Note, NoteStatus, Scope, conversations_of
from worker.store.chunks import chunked, records_by_id, rows_by_id
from worker.store.models import NoteLineageRow, NoteRow
from worker.store.repositories.note_load import ScopeSnapshot, load_scope
from worker.store.repositories.note_writes import NoteWrites
from worker.store.repositories.said_dates import Statements, statements

__all__ = ["NoteRepository", "ScopeSnapshot"]

# Columns the planners need; the embedding is loaded separately into one matrix.
_NOTE_COLUMNS = (
    NoteRow.id,
    NoteRow.agent_id,
    NoteRow.user_id,
    NoteRow.company_id,
    NoteRow.content,
    NoteRow.type,
    NoteRow.status,
    NoteRow.protection,
    NoteRow.is_auto_generated,
    NoteRow.importance,
    NoteRow.access_count,
    NoteRow.created_at,
    NoteRow.updated_at,
    NoteRow.last_accessed_at,
    NoteRow.expires_at,
    NoteRow.source_conversation_id,
    NoteRow.consolidation_generation,
    NoteRow.consolidated_into_id,
    NoteRow.version,
    NoteRow.content_hash,
    NoteRow.flags,
    NoteRow.lineage_conversation_ids,
    NoteRow.write_seq,
)


# Prebuilt (a run counts its scope's notes before and after): no statement or cache key per call.
_COUNT_ALL = select(NoteRow.status, func.count()).group_by(NoteRow.status)
_COUNT_SCOPE = _COUNT_ALL.where(NoteRow.scope_key == bindparam("scope_key"))


def _row_to_note(row: Any) -> Note:
    return Note(
        id=row.id,
        scope=Scope(row.agent_id, row.user_id, row.company_id),
        content=row.content,
        type=row.type,
        status=row.status,
        protection=row.protection,
        is_auto_generated=row.is_auto_generated,
        importance=row.importance,
        access_count=row.access_count,
        created_at=row.created_at,
        updated_at=row.updated_at,
        last_accessed_at=row.last_accessed_at,
        expires_at=row.expires_at,
        source_conversation_id=row.source_conversation_id,
        consolidation_generation=row.consolidation_generation,
        consolidated_into_id=row.consolidated_into_id,
        version=row.version,
        content_hash=row.content_hash,
        flags=list(row.flags or []),
        lineage_conversation_ids=tuple(row.lineage_conversation_ids or ()),
        write_seq=row.write_seq,
    )


class NoteRepository(NoteWrites):
    def __init__(self, session: Session) -> None:
        self.session = session

    # ---- reads -------------------------------------------------------------------------
    def load_scope(
        self, scope: Scope, statuses: Sequence[str] = (NoteStatus.ACTIVE.value,), *,
        model: str | None = None, vectors: bool = True,
    ) -> ScopeSnapshot:
        """One query for the whole scope: notes plus their vectors (``note_load.load_scope``)."""
        return load_scope(self, scope, statuses, model=model, vectors=vectors)

    def get_many(self, ids: Iterable[str]) -> list[Note]:
        """The stored notes of these ids, each once, in id order (the same list whatever order
        the ids came in, on both backends): a SELECT per ``IN_CHUNK`` distinct ids."""
        rows = [r for chunk in chunked(sorted(set(ids)))
                for r in self._run(select(*_NOTE_COLUMNS).where(NoteRow.id.in_(chunk))
                                   .order_by(NoteRow.id))]
        return [_row_to_note(r) for r in rows]

    def live_with_hashes(self, scope: Scope, hashes: Iterable[str]) -> list[Note]:
        """The scope's active and pending notes holding one of these content hashes: a SELECT
        per ``IN_CHUNK`` hashes."""
        live = (NoteStatus.ACTIVE.value, NoteStatus.PENDING.value)
        return [_row_to_note(r) for chunk in chunked(sorted(set(hashes)))
                for r in self._run(select(*_NOTE_COLUMNS).where(
                    NoteRow.scope_key == scope.key, NoteRow.content_hash.in_(chunk),
                    NoteRow.status.in_(live)).order_by(NoteRow.id))]

    def versions(self, ids: Iterable[str]) -> dict[str, tuple[int, str]]:
        """Current (version, status) of each id; the stale-plan check before applying."""
        found = rows_by_id(self.session, NoteRow.id, (NoteRow.version, NoteRow.status), ids)
        return {i: (r.version, r.status) for i, r in found.items()}

    def review_state(self, ids: Iterable[str]) -> dict[str, Any]:
        """Current version, status and the fields a retirement decides on (protection, manual
        mark, expiry, last use) of each id (rows with those attributes): what makes an open
        review item stale (``review.propose``)."""
        return rows_by_id(self.session, NoteRow.id, (
            NoteRow.protection, NoteRow.is_auto_generated, NoteRow.expires_at,
            NoteRow.last_accessed_at, NoteRow.version, NoteRow.status), ids)

    def needing_embedding(self, scope: Scope, model: str) -> list[tuple[str, str]]:
        rows = self._run(
            select(NoteRow.id, NoteRow.content).where(
                NoteRow.scope_key == scope.key,
                NoteRow.status == NoteStatus.ACTIVE.value,
                (NoteRow.embedding.is_(None))
                | (NoteRow.embedding_model.is_(None))
                | (NoteRow.embedding_model != model),
            )
        ).all()
        return [(r.id, r.content) for r in rows]

    def scopes(self, status: str = NoteStatus.ACTIVE.value) -> list[Scope]:
        rows = self._run(
            select(NoteRow.scope_key).where(NoteRow.status == status).distinct()
        ).all()
        return sorted(Scope.from_key(r.scope_key) for r in rows)

    def count_by_status(self, scope: Scope | None = None) -> dict[str, int]:
        rows = (self._run(_COUNT_ALL) if scope is None
                else self._run(_COUNT_SCOPE, {"scope_key": scope.key}))
        return {status: count for status, count in rows.all()}

    def statuses_by_hash(self, scope: Scope,
                         hashes: Iterable[str]) -> dict[str, dict[frozenset[str], set[str]]]:
        """content hash → conversations (``conversations_of``) → the statuses of the scope's
        notes with that text said there (what an import's content dedup weighs: a retired note
        does not stand in for a live one, nor a note of a conversation for a line of another or
        of none); a query per ``IN_CHUNK`` hashes."""
        found: dict[str, dict[frozenset[str], set[str]]] = {}
        for chunk in chunked(sorted(set(hashes))):
            for r in self._run(select(NoteRow.content_hash, NoteRow.source_conversation_id,
                                      NoteRow.lineage_conversation_ids, NoteRow.status).where(
                    NoteRow.scope_key == scope.key, NoteRow.content_hash.in_(chunk))):
                held_in = conversations_of(r.source_conversation_id, r.lineage_conversation_ids)
                found.setdefault(r.content_hash, {}).setdefault(held_in, set()).add(r.status)
        return found

    def identities(self, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """id → (scope key, content hash) for the ids that exist: what an import compares against."""
        found = rows_by_id(self.session, NoteRow.id, (NoteRow.scope_key, NoteRow.content_hash), ids)
        return {i: (r.scope_key, r.content_hash) for i, r in found.items()}

    def records(self, ids: Iterable[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """id → ``fields`` of the stored ones: what an import compares a line of a stored id
        against (``worker.ingest.same_record``)."""
        return records_by_id(self.session, NoteRow, fields, ids)

    def export_rows(
        self,
        status: str | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        company_id: str | None = None,
        batch_size: int = 2000,
        with_embedding: bool = True,
    ) -> Iterable[NoteRow]:
        # Each scope's history in the order it was said (``write_seq`` orders notes of one
        # ``created_at``), so a file edited without that field still imports in that order.
        stmt = select(NoteRow).order_by(NoteRow.scope_key, NoteRow.created_at,
                                        NoteRow.write_seq.nulls_first(), NoteRow.id)
        if not with_embedding:  # decoding vectors dominates an export that does not print them
            stmt = stmt.options(defer(NoteRow.embedding, raiseload=True))
        if status:
            stmt = stmt.where(NoteRow.status == status)
        if agent_id:
            stmt = stmt.where(NoteRow.agent_id == agent_id)
        if user_id:
            stmt = stmt.where(NoteRow.user_id == user_id)
        if company_id:
            stmt = stmt.where(NoteRow.company_id == company_id)
        yield from self.session.scalars(stmt.execution_options(yield_per=batch_size))

    def lineage_parents(self, child_ids: Iterable[str]) -> dict[str, list[str]]:
        """child id → its parent ids, whatever the relation (``lineage_edges``)."""
        return {child: [parent for parent, _ in edges]
                for child, edges in self.lineage_edges(child_ids).items()}

    def lineage_edges(self, child_ids: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
        """child id → its (parent id, relation) edges, each once (``dated_lineage``)."""
        return {child: [(parent, relation) for parent, relation, _ in edges]
                for child, edges in self.dated_lineage(child_ids).items()}

    def dated_lineage(self, child_ids: Iterable[str]
                      ) -> dict[str, list[tuple[str, str, datetime]]]:
        """child id → its (parent id, relation, first recorded) edges, each once; a query per
        ``IN_CHUNK`` children. A run after an undone one records the undone run's edges again
        (undo keeps them, erasure follows them): the same edge twice is one edge, dated when
        it was first recorded."""
        out: dict[str, list[tuple[str, str, datetime]]] = {}
        for chunk in chunked(sorted(set(child_ids))):
            for child, parent, relation, at in self._run(
                select(NoteLineageRow.child_id, NoteLineageRow.parent_id, NoteLineageRow.relation,
                       func.min(NoteLineageRow.created_at))
                .where(NoteLineageRow.child_id.in_(chunk))
                .group_by(NoteLineageRow.child_id, NoteLineageRow.parent_id,
                          NoteLineageRow.relation)
            ):
                out.setdefault(child, []).append((parent, relation, at))
        return out

    def statements(self, note_ids: Iterable[str]) -> dict[str, Statements]:
        """When each note's fact was said, as the log records it (``said_dates.statements``):
        what an export writes so that an erasure in the store it is imported to can date a
        note back."""
        return statements(self.session, note_ids)

    def contents(self, scope: Scope) -> Iterator[str]:
        """Every note text of the scope, any status, streamed (to scrub error messages, R21)."""
        stmt = select(NoteRow.content).where(NoteRow.scope_key == scope.key)
        yield from self.session.execute(stmt.execution_options(yield_per=1000)).scalars()

    def comments_of(self, ids: Iterable[str]) -> dict[str, str | None]:
        """Current comments of each id (the snapshot does not carry them)."""
        return {i: r.comments for i, r in
                rows_by_id(self.session, NoteRow.id, (NoteRow.comments,), ids).items()}

    def active_hashes(self, scope: Scope, type: str) -> str:
        """Content hashes of the scope's active notes of ``type``, concatenated (64 hex chars
        each, no separator): read from the covering index alone and returned as one value, so a
        write on a 10,000-note scope allocates no per-row objects."""
        stmt = select(func.aggregate_strings(NoteRow.content_hash, "")).where(
            NoteRow.scope_key == scope.key, NoteRow.status == NoteStatus.ACTIVE.value,
            NoteRow.type == type,
        )
        return self._run(stmt).scalar() or ""

    def contents_by_hash(
        self, scope: Scope, hashes: Iterable[str]
    ) -> list[tuple[str, str, Any, str | None]]:
        """(content_hash, content, embedding, embedding_model) of one note per hash, in chunks."""
        hashes = list(hashes)
        out: dict[str, tuple[str, str, Any, str | None]] = {}
        for chunk in chunked(hashes):
            rows = self._run(
                select(NoteRow.content_hash, NoteRow.content, NoteRow.embedding,
                       NoteRow.embedding_model).where(
                    NoteRow.scope_key == scope.key, NoteRow.content_hash.in_(chunk))
            ).all()
            for r in rows:
                out.setdefault(r[0], (r[0], r[1], r[2], r[3]))
        return list(out.values())

    def active_with_hash(self, scope: Scope, type: str, hash_: str) -> str | None:
        """Lowest id of an active note of ``type`` with this content hash in the scope."""
        # Filter status/type here: with them in the WHERE clause SQLite prefers the covering
        # (scope, status, type) index and scans the whole scope instead of the hash index.
        rows = self._run(
            select(NoteRow.id, NoteRow.status, NoteRow.type).where(
                NoteRow.scope_key == scope.key, NoteRow.content_hash == hash_)
        ).all()
        ids = [r[0] for r in rows if r[1] == NoteStatus.ACTIVE.value and r[2] == type]
        return min(ids) if ids else None

    def with_hash(self, scope: Scope, hash_: str,
                  ) -> list[tuple[str, str, frozenset[str], datetime | None]]:
        """(id, status, conversations: ``conversations_of``, expires_at) of every note of the
        scope with this content hash, any status."""
        rows = self._run(
            select(NoteRow.id, NoteRow.status, NoteRow.source_conversation_id,
                   NoteRow.lineage_conversation_ids, NoteRow.expires_at).where(
                NoteRow.scope_key == scope.key, NoteRow.content_hash == hash_)
        ).all()
        return [(r[0], r[1], conversations_of(r[2], r[3]), r[4]) for r in rows]

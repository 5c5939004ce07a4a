"""The scope load: a scope's notes and their vectors in one statement (the phases' one read),
as ``ScopeSnapshot``; a lean row → Note, one float32 matrix, SQLite's datetimes parsed once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Boolean, LargeBinary, String, bindparam, case, select, type_coerce
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement

from worker.domain.types import Note, NoteStatus, Scope
from worker.store.models import NoteRow


@dataclass
class ScopeSnapshot:
    """A scope's notes as loaded in one query, with their embeddings as one float32 matrix."""

    notes: list[Note]
    vectors: np.ndarray  # shape (len(notes), dim); rows align with notes
    # Rows without a vector from the model the load was asked about (their matrix rows are
    # zero until embedded); empty when the load was not asked (``load_scope(model=None)``).
    unembedded: list[int] = field(default_factory=list)
    # When prune last looked at each note (prune's order; bookkeeping, no version).
    checked: dict[str, datetime | None] = field(default_factory=dict)
    # What a write's before-images need beyond ``Note``: (comments, valid_to as read, flags as
    # stored, None kept apart from []) of the notes that have any; absent: all three None.
    rest: dict[str, tuple[Any, Any, Any]] = field(default_factory=dict)
    # The notes with a conversation that a retired note points at (``absorbed``): prune gives
    # those back when it archives such a note for its conversation, and reads lineage only then.
    absorbed: set[str] = field(default_factory=set)
    # When each note's validity began, of the notes where that is not its created_at (a fusion
    # is valid from when it was written; an import may give any start), as read.
    began: dict[str, Any] = field(default_factory=dict)
    _index: dict[str, Note] | None = field(default=None, repr=False, compare=False)

    def by_id(self) -> dict[str, Note]:
        return {n.id: n for n in self.notes}

    def without(self, ids: set[str]) -> ScopeSnapshot:
        """The snapshot minus ``ids`` (rows and vectors kept aligned)."""
        keep = [i for i, n in enumerate(self.notes) if n.id not in ids]
        if len(keep) == len(self.notes):
            return self
        return ScopeSnapshot([self.notes[i] for i in keep], self.vectors[keep],
                             checked=self.checked, rest=self.rest, absorbed=self.absorbed,
                             began=self.began)

    def live(self, now: datetime) -> ScopeSnapshot:
        """The snapshot minus the notes expired at ``now``. Such a note is about to be archived:
        it retires, absorbs or joins nothing (before, "This week only, the standup starts at
        11:00", expired, retired "… at 9:00" in the run that archived it, leaving no value).
        The one filter the judging phases and a host's candidates share."""
        return self.without({n.id for n in self.notes if n.expired(now)})

    def state(self, ids: Iterable[str]) -> dict[str, dict[str, Any]] | None:
        """What the locked re-read (``WriteRepository.lock_state``) returns for ``ids``, as this
        snapshot knows them; None when one is not among its notes (not active when loaded)."""
        index = self._index
        if index is None:
            index = self._index = {n.id: n for n in self.notes}
        out: dict[str, dict[str, Any]] = {}
        for i in ids:
            n = index.get(i)
            if n is None:
                return None
            comments, valid_to, flags = self.rest.get(i, _NOTHING)
            out[i] = {"id": i, "version": n.version, "status": n.status,
                      "protection": n.protection,
                      "is_auto_generated": n.is_auto_generated, "created_at": n.created_at,
                      "expires_at": n.expires_at, "last_accessed_at": n.last_accessed_at,
                      "consolidated_into_id": n.consolidated_into_id, "comments": comments,
                      "valid_to": _utc(valid_to), "importance": n.importance,
                      "flags": list(flags) if flags is not None else None,
                      "last_checked_at": self.checked.get(i), "write_seq": n.write_seq,
                      "valid_from": _utc(self.began[i]) if i in self.began else n.created_at}
        return out


def _raw(column: Any) -> Any:
    """A datetime column as the driver returns it (SQLite: text), converted by ``_utc``."""
    return type_coerce(column, String).label(column.key)


class _RetiredInto(ColumnElement[bool]):
    """Whether a retired note points at the row (``notes.consolidated_into_id``)."""

    inherit_cache = True
    _traverse_internals = []  # stateless: one cache key, so the load is compiled once
    type = Boolean()


_PROBE = (f"EXISTS (SELECT 1 FROM notes AS retired_into{{}} WHERE "
          f"retired_into.consolidated_into_id = notes.id AND "
          f"retired_into.status = '{NoteStatus.REVOKED.value}')")


@compiles(_RetiredInto)
def _probe(element: _RetiredInto, compiler: Any, **kw: Any) -> str:
    return _PROBE.format("")


@compiles(_RetiredInto, "sqlite")
def _probe_sqlite(element: _RetiredInto, compiler: Any, **kw: Any) -> str:
    # The pointer's index named: ANALYZE finds it NULL in nearly every row, one value in
    # SQLite's statistics, and the planner then scans the table once per probe (≈ 100× the
    # whole load on a 20k-note store, measured).
    return _PROBE.format(" INDEXED BY ix_notes_consolidated_into")


# Whether a retired note points at the row: asked only of a note with a source conversation
# (one index probe each), the only kind prune archives for its own conversation; a note with
# none reads NULL.
ABSORBED = case((NoteRow.source_conversation_id.is_not(None), _RetiredInto())).label("absorbed")

# The scope load's columns: Note's fields in its own order after ``scope`` (each row becomes a
# Note in one positional call), then what the phases keep beside the notes, the vector last.
_LOAD_COLUMNS = (
    NoteRow.id, NoteRow.content, NoteRow.type, NoteRow.status, NoteRow.protection,
    NoteRow.is_auto_generated, NoteRow.importance, NoteRow.access_count, _raw(NoteRow.created_at),
    _raw(NoteRow.updated_at), _raw(NoteRow.last_accessed_at), _raw(NoteRow.expires_at),
    NoteRow.source_conversation_id, NoteRow.consolidation_generation,
    NoteRow.consolidated_into_id, NoteRow.version, NoteRow.content_hash, NoteRow.flags,
    _raw(NoteRow.last_checked_at), NoteRow.embedding_model, NoteRow.comments,
    _raw(NoteRow.valid_to), NoteRow.lineage_conversation_ids, NoteRow.write_seq, ABSORBED,
    _raw(NoteRow.valid_from),
)
(_FLAGS, _CHECKED, _MODEL, _COMMENTS, _VALID_TO, _LINEAGE, _SEQ, _ABSORBED, _VALID_FROM,
 _VECTOR) = range(17, 27)
_NOTHING = (None, None, None)
_RAW_VECTOR = type_coerce(NoteRow.embedding, LargeBinary).label("embedding")
# Built once: the scope and statuses are bound per call (no statement construction per load).
_LOADS = {
    with_vectors: select(*_LOAD_COLUMNS, *((_RAW_VECTOR,) if with_vectors else ()))
    .where(NoteRow.scope_key == bindparam("scope_key"),
           NoteRow.status.in_(bindparam("statuses", expanding=True)))
    .order_by(NoteRow.id)
    for with_vectors in (True, False)
}


def _utc(value: Any) -> datetime | None:
    """What ``UTCDateTime`` reads, from SQLite's naive UTC text (one parse, no ``replace``)
    or a driver's datetime."""
    if value is None:
        return None
    if isinstance(value, str):
        return datetime.fromisoformat(value + "+00:00")
    moment: datetime = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return moment


def _notes_of(rows: Sequence[Any], scope: Scope) -> list[Note]:
    # Every row is of ``scope`` (the WHERE clause says so): one Scope shared by all.
    t = _utc
    notes = []
    for r in rows:
        created = t(r[8])
        # A note never changed since it was written: its updated_at reads as its created_at
        # (one parse, one immutable datetime for both).
        updated = created if r[9] == r[8] else t(r[9])
        notes.append(Note(r[0], scope, r[1], r[2], r[3], r[4], r[5], r[6], r[7], created,
                          updated, t(r[10]), t(r[11]), r[12], r[13], r[14], r[15], r[16],
                          list(r[_FLAGS] or ()), tuple(r[_LINEAGE] or ()), r[_SEQ]))
    return notes


def _matrix(vectors: list[Any], unembedded: list[int]) -> np.ndarray:
    """The rows' vectors as one float32 matrix; rows in ``unembedded`` are zero (width 0 when
    no row has a usable vector). SQLite's are raw bytes: joined and read with one
    ``np.frombuffer`` when every row has one of the same width."""
    if not unembedded and vectors and isinstance(vectors[0], bytes):
        width = len(vectors[0])
        if width and all(isinstance(v, bytes) and len(v) == width for v in vectors):
            flat = np.frombuffer(b"".join(vectors), dtype=np.float32)
            return flat.reshape(len(vectors), width // 4)
    skip = set(unembedded)
    usable = {k: np.frombuffer(v, dtype=np.float32) if isinstance(v, bytes | memoryview) else v
              for k, v in enumerate(vectors) if v is not None and k not in skip}
    if not usable:
        return np.zeros((len(vectors), 0), dtype=np.float32)
    dim = len(next(iter(usable.values())))
    out = np.zeros((len(vectors), dim), dtype=np.float32)
    for k, v in usable.items():
        if len(v) == dim:
            out[k] = v
    return out


def load_scope(
    repo: Any, scope: Scope, statuses: Sequence[str] = (NoteStatus.ACTIVE.value,), *,
    model: str | None = None, vectors: bool = True,
) -> ScopeSnapshot:
    """One query for the whole scope: notes plus their vectors, ordered by id for determinism.

    With ``model``, a row whose vector is missing or from another model is listed in
    ``unembedded`` (the caller embeds it) and the others keep theirs; without, any missing
    vector leaves the matrix empty (width 0). ``vectors=False`` reads none (prune, archive)."""
    params = {"scope_key": scope.key, "statuses": list(statuses)}
    if vectors and repo.session.get_bind().dialect.name == "postgresql":
        sql, fixed = _binary_load(repo.session.get_bind().dialect, tuple(statuses))
        rows = _fetch_binary(repo, sql, {**fixed, "scope_key": scope.key})
    else:
        rows = repo._run(_LOADS[vectors], params).all()
    notes = _notes_of(rows, scope)
    # Most notes were never looked at by prune; a mark equal to the note's updated_at (prune
    # changed it as it looked) reads as that, parsed once.
    checked = {r[0]: None if r[_CHECKED] is None else n.updated_at if r[_CHECKED] == r[9]
               else _utc(r[_CHECKED]) for r, n in zip(rows, notes, strict=True)}
    # Kept as read (valid_to parsed only for a note a write touches): most rows have none.
    rest = {r[0]: (r[_COMMENTS], r[_VALID_TO], r[_FLAGS]) for r in rows
            if r[_COMMENTS] is not None or r[_VALID_TO] is not None or r[_FLAGS] is not None}
    absorbed = {r[0] for r in rows if r[_ABSORBED]}
    began = {r[0]: r[_VALID_FROM] for r in rows if r[_VALID_FROM] != r[8]}  # 8: created_at
    empty = np.zeros((len(notes), 0), dtype=np.float32)
    if not vectors:
        return ScopeSnapshot(notes, empty, checked=checked, rest=rest, absorbed=absorbed,
                             began=began)
    raw = [r[_VECTOR] for r in rows]
    if model is None:
        unembedded = [k for k, v in enumerate(raw) if v is None]
        if unembedded:
            return ScopeSnapshot(notes, empty, checked=checked, rest=rest,
                                 absorbed=absorbed, began=began)
    else:
        unembedded = [k for k, r in enumerate(rows)
                      if r[_VECTOR] is None or r[_MODEL] is None or r[_MODEL] != model]
    return ScopeSnapshot(notes, _matrix(raw, unembedded), unembedded, checked, rest,
                         absorbed, began)

def _binary_load(dialect: Any, statuses: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """The scope load's SQL for the raw cursor and its fixed parameters (the statuses), compiled
    once per set of statuses (building and compiling it per load was ≈ 0.9 ms); the scope is
    bound per call as ``scope_key``."""
    found = _BINARY_LOADS.get(statuses)
    if found is None:
        stmt = (select(*_LOAD_COLUMNS, _RAW_VECTOR)
                .where(NoteRow.scope_key == bindparam("scope_key", ""),
                       NoteRow.status.in_(list(statuses)))
                .order_by(NoteRow.id))
        compiled = stmt.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
        found = (str(compiled), {k: v for k, v in compiled.params.items() if k != "scope_key"})
        if len(_BINARY_LOADS) < 64:
            _BINARY_LOADS[statuses] = found
    return found


_BINARY_LOADS: dict[tuple[str, ...], tuple[str, dict[str, Any]]] = {}


def _fetch_binary(repo: Any, sql: str, params: dict[str, Any]) -> list[Any]:
    """The scope load through a binary psycopg cursor with pgvector's loader.

    pgvector's text format costs ~10× the CPU (measured: 0.74 s vs 0.08 s per 10k
    512-d vectors), which dominated the per-scope load on PostgreSQL.
    """
    from pgvector.psycopg import register_vector

    conn = repo.session.connection()
    dbapi: Any = conn.connection.driver_connection
    if not getattr(dbapi, "_dream_vector_registered", False):
        register_vector(dbapi)
        dbapi._dream_vector_registered = True
    with dbapi.cursor(binary=True) as cur:
        cur.execute(sql, params)
        rows: list[Any] = cur.fetchall()
    out = []
    for r in rows:
        row = list(r)
        v = row[_VECTOR]
        if v is not None:
            row[_VECTOR] = np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v,
                                      dtype=np.float32)
        out.append(row)
    return out

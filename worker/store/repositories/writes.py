"""SQL for a phase's one guarded write: the locked re-read of every member (when the write has
no carried state to check against, or its guarded update fell short), the batched inserts and
updates (notes, lineage, operation log, verdict memory) and the steps, inserted fenced by
the lease epoch as the write's last statement (or the lease fence on its own)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import (
    Integer,
    Table,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from worker.domain.types import NoteStatus, RunStatus
from worker.store.chunks import chunked
from worker.store.many import execute_many
from worker.store.models import (
    DreamRunRow,
    JudgementRow,
    NoteLineageRow,
    NoteRow,
    OperationLogRow,
    ReviewRow,
    RunStepRow,
)
from worker.store.repositories.note_writes import (
    DECIDING_FIELDS,
    TRACKED_FIELDS,
    UNVERSIONED_FIELDS,
)
from worker.store.repositories.run_statements import fenced_steps_statement
from worker.store.row_locks import is_postgres, lock_order, lock_sorted
from worker.store.scope_locks import LOCK_KEY, lock_term

_NOTES = cast(Table, NoteRow.__table__)
_RUNS = cast(Table, DreamRunRow.__table__)
_JUDGEMENTS = cast(Table, JudgementRow.__table__)
# The fencing token checked by the write itself: a no-op UPDATE of the run row guarded by the
# lease epoch. Its rowcount says whether the lease is still ours; on SQLite it also takes the
# write lock first, on PostgreSQL it locks the run row, so no claim can move the epoch until
# this write commits or rolls back.
_FENCE = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("run_id"), _RUNS.c.lease_epoch == bindparam("epoch"),
           _RUNS.c.status == RunStatus.RUNNING.value)
    .values(lease_epoch=_RUNS.c.lease_epoch)
    .returning(_RUNS.c.totals)
)
STATE_FIELDS = tuple(dict.fromkeys(("version", "status", "created_at",
                                    *(f for f in DECIDING_FIELDS if f != "status"),
                                    *(f for f in TRACKED_FIELDS if f != "status"))))
# With ``valid_from``: a retirement never ends a note before its validity began.
_STATE = select(_NOTES.c.id, *(_NOTES.c[f] for f in STATE_FIELDS), _NOTES.c.valid_from).where(
    _NOTES.c.id.in_(bindparam("ids", expanding=True)))
# By dialect (PostgreSQL?): FOR UPDATE in lock order there (``row_locks``); id order on SQLite.
_STATES = {False: _STATE.order_by(_NOTES.c.id),
           True: _STATE.order_by(lock_order(_NOTES.c.id, True)).with_for_update()}
_INSERT_NOTE = insert(_NOTES)
_LOG = cast(Table, OperationLogRow.__table__)
_INSERT_LOG = insert(_LOG)
_INSERT_LINEAGE = insert(cast(Table, NoteLineageRow.__table__))
_STEPS = cast(Table, RunStepRow.__table__)
_INSERT_STEP = insert(_STEPS)
_INSERT_REVIEW = insert(cast(Table, ReviewRow.__table__))
_UPDATES: dict[tuple[tuple[str, ...], bool, bool, bool, tuple[str, ...]], Any] = {}
_TOTALS = select(_RUNS.c.totals).where(_RUNS.c.id == bindparam("run_id"))
_JOURNAL = select(_LOG.c.entity_id, _LOG.c.op, _LOG.c.before, _LOG.c.after, _LOG.c.reason).where(
    _LOG.c.run_id == bindparam("run_id"), _LOG.c.scope_key == bindparam("scope_key"),
    _LOG.c.entity == "note")
_ACTIVE_COUNT = select(func.count()).select_from(_NOTES).where(
    _NOTES.c.scope_key == bindparam("scope_key"), _NOTES.c.status == NoteStatus.ACTIVE.value)
# Verdict memory's insert, by dialect (PostgreSQL?): a fingerprint already there is kept.
NEW_JUDGEMENTS = {
    postgres: (pg_insert(_JUDGEMENTS) if postgres else sqlite_insert(_JUDGEMENTS))
    .on_conflict_do_nothing(index_elements=["scope_key", "kind", "fingerprint"])
    for postgres in (False, True)
}
# A pair a contradictions answer left unsettled (``worker.phases.contradictions.unsettled``):
# remembered from its date, so a new row takes the place of its fingerprint's older one.
UNSETTLED = "unsettled"
_OLD_UNSETTLED = delete(_JUDGEMENTS).where(
    _JUDGEMENTS.c.scope_key == bindparam("scope_key"), _JUDGEMENTS.c.kind == UNSETTLED,
    _JUDGEMENTS.c.fingerprint == bindparam("fingerprint"))


def _unchanged(name: str, postgres: bool, prefix: str = "g") -> Any:
    """Column ``name`` still at its before-image ``<prefix>_<name>`` (bound with the column's
    own type, so a datetime binds as it is stored), NULL equal to NULL. JSON (flags)
    is compared as JSON, SQL NULL and JSON null alike (a NULL written as JSON reads back as
    None too): canonical text on SQLite, jsonb equality on PostgreSQL."""
    column = _NOTES.c[name]
    given = bindparam(f"{prefix}_{name}", type_=column.type)
    if name != "flags":
        return column.is_not_distinct_from(given)
    if postgres:
        null: Any = literal_column("'null'::jsonb")
        return func.coalesce(column, null) == func.coalesce(given, null)
    return func.coalesce(func.json(column), "null") == func.coalesce(func.json(given), "null")


def _kept(postgres: bool) -> Any:
    """Per row of a guarded UPDATE: no note kept (``k_id`` None), or the kept one still active
    at ``k_version`` (a supersede into an existing note writes nothing to that note). On
    PostgreSQL the kept row is read FOR SHARE: a host edit in flight is waited for and seen,
    one after it waits for this write's commit (what ``lock_state``'s FOR UPDATE did); SQLite
    holds its write lock from the first write on."""
    kept = _NOTES.alias("kept")
    k_id = bindparam("k_id", type_=_NOTES.c.id.type)
    found = select(kept.c.id).where(
        kept.c.id == k_id, kept.c.version == bindparam("k_version", type_=Integer),
        kept.c.status == NoteStatus.ACTIVE.value)
    return or_(k_id.is_(None), exists(found.with_for_update(read=True) if postgres else found))


def _apart_count(kinds: tuple[str, ...]) -> Any:
    """How many verdict-memory rows of ``kinds`` the scope ``a_scope`` holds (a sub-select)."""
    judged = cast(Table, JudgementRow.__table__)
    return (select(func.count()).select_from(judged)
            .where(judged.c.scope_key == bindparam("a_scope", type_=judged.c.scope_key.type),
                   or_(*(judged.c.kind == k for k in kinds)))
            .scalar_subquery())


_GUARDED_LOGS: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] = {}


def _log_unless_apart(names: tuple[str, ...], kinds: tuple[str, ...]) -> Any:
    """INSERT of operation-log rows (columns ``names``) only while the scope ``a_scope`` holds
    ``a_count`` verdict-memory rows of ``kinds``, built once per shape."""
    stmt = _GUARDED_LOGS.get((names, kinds))
    if stmt is None:
        rows = select(*(bindparam(n, type_=_LOG.c[n].type).label(n) for n in names))
        stmt = _GUARDED_LOGS[(names, kinds)] = insert(_LOG).from_select(
            names, rows.where(_apart_count(kinds) == bindparam("a_count", type_=Integer))
        ).execution_options(preserve_rowcount=True)
    return stmt


class WriteRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def _run(self, stmt: Any, params: Any = None) -> Any:
        return self.session.connection().execute(stmt, params)

    def _many(self, stmt: Any, rows: list[dict[str, Any]]) -> int:
        """One executemany of ``rows`` (same keys) straight to the driver; the rowcount."""
        return execute_many(self.session.connection(), stmt, rows)

    def fence(self, run_id: str, epoch: int) -> dict[str, Any] | None:
        """The run's totals if it still holds lease ``epoch``, else None; the first statement
        of a run's write (the guard reads the scope's size at the start of the run from it)."""
        row = self._run(_FENCE, {"run_id": run_id, "epoch": epoch}).first()
        return None if row is None else dict(row.totals or {})

    def run_totals(self, run_id: str) -> dict[str, Any]:
        row = self._run(_TOTALS, {"run_id": run_id}).first()
        return dict(row.totals or {}) if row is not None else {}

    def journal(self, run_id: str, scope_key: str) -> list[Any]:
        """(entity_id, op, before, after, reason) of every note change this run logged in the
        scope: what it inserted and what it retired (one SELECT)."""
        return list(self._run(_JOURNAL, {"run_id": run_id, "scope_key": scope_key}).all())

    def active_count(self, scope_key: str) -> int:
        return int(self._run(_ACTIVE_COUNT, {"scope_key": scope_key}).scalar_one())

    def lock_state(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Current version, status, ``DECIDING_FIELDS`` and tracked fields of each id, in one SELECT
        per 500 ids, locked on PostgreSQL (``FOR UPDATE``) until the write ends.

        In lock order (``row_locks``: sorted chunks, each ORDER BY id COLLATE "C"): a FOR
        UPDATE locks rows in the order it returns them, and two writers locking notes in
        different orders can deadlock."""
        wanted = lock_sorted(set(ids))
        out: dict[str, dict[str, Any]] = {}
        stmt = _STATES[is_postgres(self.session)]
        for chunk in chunked(wanted):
            rows = self._run(stmt, {"ids": chunk}).all()
            out.update((r.id, r._asdict()) for r in rows)
        return out

    def insert_notes(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self._many(_INSERT_NOTE, rows)

    def update_notes(self, keys: tuple[str, ...], rows: list[dict[str, Any]], *,
                     unversioned: bool = False, lock_scope: str | None = None,
                     apart: tuple[str, ...] = ()) -> int:
        """One executemany UPDATE guarded by id and version; ``rows`` carry ``b_id``,
        ``b_version`` and ``v_<column>`` for each of ``keys`` (plus version, updated_at);
        the number of rows it updated.

        ``unversioned``: the caller did not re-read the rows (it checked them against the
        run's carried state), so the guard also holds each ``UNVERSIONED_FIELDS`` column it
        sets at its before-image (``g_<column>``), each ``DECIDING_FIELDS`` column at its
        before-image (``w_<column>``) and, per row, the note its change keeps
        (``k_id`` at ``k_version``, still active; None: none kept).

        ``lock_scope``: the statement takes this scope's lock first (PostgreSQL,
        ``scope_locks.lock_term``), the write's first statement doing so.

        ``apart``: verdict-memory kinds that keep notes apart; each row also needs the scope
        ``a_scope`` to hold ``a_count`` rows of them, as many as the plan read (a keep-apart
        recorded since keeps the versions: only this sees it, and the caller re-reads)."""
        if not rows:
            return 0
        # Each row's UPDATE locks it: in lock order, as ``lock_state`` takes them.
        rows = lock_sorted(rows, key=lambda r: str(r["b_id"]))
        on_postgres = is_postgres(self.session)
        postgres = unversioned and on_postgres
        locking = lock_scope is not None and on_postgres
        if locking:
            rows = [{**r, LOCK_KEY: lock_scope} for r in rows]
        stmt = _UPDATES.get((keys, unversioned, postgres, locking, apart))
        if stmt is None:  # built once per set of changed columns, then reused
            guard = [_NOTES.c.id == bindparam("b_id"), _NOTES.c.version == bindparam("b_version")]
            if unversioned:
                guard += [_unchanged(k, postgres) for k in keys if k in UNVERSIONED_FIELDS]
                guard += [_unchanged(k, postgres, "w") for k in DECIDING_FIELDS]
                guard.append(_kept(postgres))
            if apart:
                guard.append(_apart_count(apart) == bindparam("a_count", type_=Integer))
            if locking:
                guard.insert(0, lock_term())
            stmt = _UPDATES[(keys, unversioned, postgres, locking, apart)] = (
                update(_NOTES).where(*guard)
                .values({k: bindparam(f"v_{k}") for k in (*keys, "version", "updated_at")})
            )
        return self._many(stmt, rows)

    def add_lineage(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self._many(_INSERT_LINEAGE, rows)

    def add_log(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self._many(_INSERT_LOG, rows)

    def add_log_unless_apart(self, rows: list[dict[str, Any]], kinds: tuple[str, ...],
                             scope_key: str, count: int) -> bool:
        """``add_log``, as long as the scope holds ``count`` keep-aparts (``kinds``); False, with
        nothing inserted, when one was recorded since. A statement after the write's first
        UPDATE, which takes the scope's lock: it reads after the lock (PostgreSQL reads a
        statement as of its start, and that UPDATE began before it waited for the lock, so a
        keep-apart committed while it waited went unseen there)."""
        if not rows:
            return True
        stmt = _log_unless_apart(tuple(rows[0]), kinds)
        return self._many(stmt, [{**r, "a_scope": scope_key, "a_count": count}
                                 for r in rows]) == len(rows)

    def add_steps(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self._many(_INSERT_STEP, rows)

    def add_steps_fenced(self, rows: list[dict[str, Any]], run_id: str, epoch: int, *,
                         finishing: tuple[str, ...] = ()) -> bool:
        """Insert ``rows`` (one executemany) only while the run holds lease ``epoch``; False,
        with nothing inserted, when it does not (the caller rolls the whole write back).
        ``finishing``: the columns a row whose id exists updates (the phase's parent step, its
        finish joining its children's insert, ``run_statements.fenced_steps_statement``).

        Why this fences the whole transaction when it is its last statement: on SQLite the
        write lock is held from the transaction's first write to its commit, so the epoch this
        statement sees is the epoch at commit. On PostgreSQL (READ COMMITTED) the EXISTS reads
        the run row FOR SHARE: a claim or a cancel that committed before it is seen (no row,
        we roll back), one in flight is waited for and re-checked, one after it waits for our
        commit (its UPDATE needs the row lock)."""
        if not rows:
            return True
        dialect = self.session.get_bind().dialect.name
        stmt = fenced_steps_statement(dialect, tuple(rows[0]), finishing)
        params = [{**r, "f_run": run_id, "f_epoch": epoch} for r in rows]
        inserted = self._many(stmt, params)
        return inserted == len(rows)

    def add_reviews(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self._many(_INSERT_REVIEW, rows)

    def add_judgements(self, rows: list[dict[str, Any]]) -> None:
        """Verdict memory, first writer wins: a fingerprint already recorded is left as it is;
        but an unsettled pair's row, dated, replaces its older row (a renewed memory)."""
        renewed = [{"scope_key": r["scope_key"], "fingerprint": r["fingerprint"]}
                   for r in rows if r["kind"] == UNSETTLED]
        if renewed:
            self._many(_OLD_UNSETTLED, renewed)
        if rows:
            self._many(NEW_JUDGEMENTS[self.session.get_bind().dialect.name == "postgresql"], rows)

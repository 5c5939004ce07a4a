"""All SQL behind undo, erasure and the blast-radius guard.

Erasure is the only code in the worker that issues DELETE against notes (R18, R19).
"""

from __future__ import annotations

import typing
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    cast,
    delete,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from worker.domain.types import ACTIVE_RUN_STATUSES, NoteStatus, RunStatus, Said
from worker.store.chunks import IN_CHUNK, chunked, rows_by_id
from worker.store.many import execute_many
from worker.store.models import (
    DreamRunRow,
    ExampleRow,
    JudgementRow,
    NoteLineageRow,
    NoteRow,
    OperationLogRow,
    ReviewRow,
)
from worker.store.repositories.erase_records import forget_user_scopes, scrub_scope
from worker.store.repositories.kept_lives import Keeper, keepers
from worker.store.repositories.mentions import Mentions
from worker.store.repositories.restores import restore_statement
from worker.store.repositories.retention import retirement_befores
from worker.store.repositories.run_history import USER_ERASED_CANCEL
from worker.store.repositories.said_dates import Carrier, SaidIn, carriers, forget_said_in, said_in
from worker.store.row_locks import is_postgres, lock_sorted, locked, locked_in_order

# Lineage relations whose child note's text was written from the parent's text: consolidation,
# host fuse, and a host `remember` UPDATE (the longer note replaces and restates the older one).
# Contradiction edges (superseded / duplicate / subsumed) join two notes written independently.
DERIVED_RELATIONS = ("consolidated", "fused", "updated")


class ErasedNote(NamedTuple):
    """What erasure reads of a note it is about to delete."""

    scope_key: str
    content: str
    status: str
    consolidated_into_id: str | None
    said: Said  # its created_at and write_seq (``said_dates``)


@dataclass(frozen=True)
class Survivor:
    """A note outside an erasure that pointed at an erased note (what erase.plan_survivors reads)."""

    id: str
    scope_key: str
    status: str
    consolidated_into_id: str | None
    relation: str | None  # lineage edge to its pointer's note; None if there is no edge
    # Tracked fields as they were before it was retired into that note (from the operation log;
    # empty if the log has no such row): what a restoration gives back, e.g. a host fuse's
    # importance 0.0 and valid_to.
    before: dict[str, Any] = field(default_factory=dict)


class SafetyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    # ---- undo ----------------------------------------------------------------------------
    def run_log(self, run_id: str) -> list[OperationLogRow]:
        return list(self.session.scalars(
            select(OperationLogRow).where(OperationLogRow.run_id == run_id)
            .order_by(OperationLogRow.id)
        ))

    def log_after(self, entity_ids: Iterable[str], after_log_id: int) -> list[OperationLogRow]:
        """Log rows on these notes written after ``after_log_id`` (by later runs, hosts, undos)."""
        out: list[OperationLogRow] = []
        for chunk in chunked(list(set(entity_ids))):
            out.extend(self.session.scalars(
                select(OperationLogRow).where(OperationLogRow.entity_id.in_(chunk),
                                              OperationLogRow.id > after_log_id)
                .order_by(OperationLogRow.id)
            ))
        return out

    def note_state(self, ids: Iterable[str]) -> dict[str, Any]:
        """Current row of each id (tracked fields + version + scope), one query per 500 ids."""
        out: dict[str, Any] = {}
        for chunk in chunked(list(set(ids))):
            stmt = select(NoteRow).where(NoteRow.id.in_(chunk))
            # populate_existing: undo re-reads rows it has just updated with Core statements.
            for row in self.session.scalars(stmt.execution_options(populate_existing=True)):
                out[row.id] = row
        return out

    def hold_run(self, run_id: str, status: str) -> bool:
        """Lock the run row for its undo if it still reads ``status`` (False: another undo, or
        anything else, moved it meanwhile). The statement writes, so on SQLite the undo holds
        the write lock from here and reads what it restores inside that one transaction."""
        result = self.session.execute(
            update(DreamRunRow).where(DreamRunRow.id == run_id, DreamRunRow.status == status)
            .values(status=status))
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def restore_notes(self, rows: list[tuple[str, int, dict[str, Any]]],
                      auto: dict[str, bool]) -> list[str]:
        """``_restore`` of notes; ``auto``: each note's ``is_auto_generated`` as the undo read it
        (one it retires must still be so: a takeover keeps the version; one left out, unguarded)."""
        return self._restore(NoteRow, rows, auto)

    def restore_examples(self, rows: list[tuple[str, int, dict[str, Any]]]) -> list[str]:
        """``_restore`` of examples (their status)."""
        return self._restore(ExampleRow, rows)

    def _restore(self, model: type[NoteRow] | type[ExampleRow],
                 rows: list[tuple[str, int, dict[str, Any]]],
                 auto: dict[str, bool] | None = None) -> list[str]:
        """Write each (id, version, values) where its note or example is still at that version,
        bumping the version: one executemany per set of columns written, the rows locked in id
        order first on PostgreSQL. A note it retires must not be pinned nor taken over: a host's
        pin or takeover keeps the version, so both are checked in the statement too, in case one
        landed after the undo read the note (``restores.restore_statement``). The ids that
        matched no row (changed meanwhile): empty when every row was written, else the caller
        rolls the whole undo back."""
        table = typing.cast(Table, model.__table__)
        shapes: dict[tuple[tuple[str, ...], bool], list[dict[str, Any]]] = defaultdict(list)
        for entity_id, version, values in lock_sorted(rows, key=lambda r: r[0]):
            retires = model is NoteRow and entity_id in (auto or {}) and values.get(
                "status", NoteStatus.ACTIVE.value) != NoteStatus.ACTIVE.value
            shapes[(tuple(sorted(values)), retires)].append(
                {"b_id": entity_id, "b_version": version, "v_version": version + 1,
                 **({"b_auto": (auto or {})[entity_id]} if retires else {}),
                 **{f"v_{k}": v for k, v in values.items()}})
        if is_postgres(self.session):
            for chunk in chunked(lock_sorted(r[0] for r in rows)):
                self.session.execute(locked(self.session, select(table.c.id).where(
                    table.c.id.in_(chunk)), table.c.id)).all()
        moved: list[str] = []
        conn = self.session.connection()
        for (keys, retires), params in shapes.items():
            if execute_many(conn, restore_statement(table, keys, retires), params) != len(params):
                ids = [p["b_id"] for p in params]
                now = {i: r.version for i, r in
                       rows_by_id(self.session, table.c.id, (table.c.version,), ids).items()}
                # A row that matched is at version + 1 now; if a moved one happens to be too,
                # the whole group is named (the undo is rolled back either way).
                moved += [p["b_id"] for p in params if now.get(p["b_id"]) != p["v_version"]] or ids
        return sorted(moved)

    def undo_rows(self, log_id: str, entity_ids: Iterable[str]) -> list[OperationLogRow]:
        """The undo of ``log_id``'s own log rows on these notes and examples (found through the
        entity index, not by scanning the log for the reason), in the order written."""
        out: list[OperationLogRow] = []
        for chunk in chunked(sorted(set(entity_ids))):
            out.extend(self.session.scalars(
                select(OperationLogRow).where(OperationLogRow.entity_id.in_(chunk),
                                              OperationLogRow.op == "undo",
                                              OperationLogRow.reason == f"undo of run {log_id}")))
        return sorted(out, key=lambda r: r.id)

    def undo_logged(self, log_id: str) -> bool:
        """Whether an undo of ``log_id`` was already written (for ids with no run row: erasures)."""
        return self.session.execute(
            select(OperationLogRow.id).where(OperationLogRow.op == "undo",
                                             OperationLogRow.reason == f"undo of run {log_id}")
            .limit(1)).first() is not None

    def example_state(self, ids: Iterable[str]) -> dict[str, tuple[int, str, str]]:
        """id → (version, status, scope_key) of each example, one query per 500 ids."""
        out: dict[str, tuple[int, str, str]] = {}
        for chunk in chunked(list(set(ids))):
            for r in self.session.execute(
                select(ExampleRow.id, ExampleRow.version, ExampleRow.status, ExampleRow.scope_key)
                .where(ExampleRow.id.in_(chunk))
            ):
                out[r.id] = (r.version, r.status, r.scope_key)
        return out

    def forget_run_records(self, run_id: str) -> tuple[int, int]:
        """Delete the verdict memory and review records a run wrote; (judgements, reviews)."""
        judged = self.session.execute(
            delete(JudgementRow).where(JudgementRow.run_id == run_id)).rowcount  # type: ignore[attr-defined]
        reviews = self.session.execute(
            delete(ReviewRow).where(ReviewRow.run_id == run_id)).rowcount  # type: ignore[attr-defined]
        return int(judged), int(reviews)

    # ---- erasure -------------------------------------------------------------------------
    def subject_scopes(self, *, user_id: str | None = None, conversation_id: str | None = None,
                       note_id: str | None = None) -> set[str]:
        """The scopes an erasure of the subject writes in (its notes', and those of notes that
        record its conversation): the scope locks it takes first."""
        stmt = self._subject(select(NoteRow.scope_key).distinct(), user_id, conversation_id,
                             note_id)
        return {r[0] for r in self.session.execute(stmt)}

    def subject_note_ids(
        self, *, user_id: str | None = None, conversation_id: str | None = None,
        note_id: str | None = None,
    ) -> set[str]:
        stmt = self._subject(select(NoteRow.id), user_id, conversation_id, note_id,
                             recorded=False)
        return {r[0] for r in self.session.execute(self._locked(stmt))}

    def recording_conversation(self, conversation_id: str) -> set[str]:
        """Notes that record ``conversation_id`` among their sources' conversations, locked:
        derived from its notes, lineage edges or not (an import without them)."""
        stmt = select(NoteRow.id).where(self._records_conversation(conversation_id))
        return {r[0] for r in self.session.execute(self._locked(stmt))}

    def _locked(self, stmt: Select[Any]) -> Select[Any]:
        """``stmt`` FOR UPDATE on PostgreSQL: a host fuse or a run writing from these notes
        commits before the erase reads what was derived from them, or finds them gone. In lock
        order (``worker.store.row_locks``)."""
        return typing.cast(Select[Any], locked(self.session, stmt, NoteRow.id))

    def _lock(self, ids: list[str]) -> None:
        """Lock these notes before reading what was derived from them (PostgreSQL only: on
        SQLite the erase holds the write lock already)."""
        if is_postgres(self.session):
            self.session.execute(locked(self.session, select(NoteRow.id).where(
                NoteRow.id.in_(ids)), NoteRow.id))

    def _subject(self, stmt: Select[Any], user_id: str | None, conversation_id: str | None,
                 note_id: str | None, *, recorded: bool = True) -> Select[Any]:
        if user_id is not None:
            return stmt.where(NoteRow.user_id == user_id)
        if conversation_id is not None:
            own = NoteRow.source_conversation_id == conversation_id
            if not recorded:
                return stmt.where(own)
            # A note recording the conversation among its sources' carries its facts, lineage
            # edges or not (an import without them): its scope is the subject's too.
            return stmt.where(or_(own, self._records_conversation(conversation_id)))
        return stmt.where(NoteRow.id == note_id)

    def _records_conversation(self, conversation_id: str) -> ColumnElement[bool]:
        """``notes.lineage_conversation_ids`` holds ``conversation_id`` (JSONB containment on
        PostgreSQL, ``json_each`` on SQLite)."""
        column = NoteRow.lineage_conversation_ids
        if self.session.get_bind().dialect.name == "postgresql":
            return cast(column, JSONB).contains([conversation_id])
        each = func.json_each(column).table_valued("value")
        return exists(select(each.c.value).where(each.c.value == conversation_id))

    def interrupt_runs(self, *, user_id: str | None, conversation_id: str | None,
                       note_id: str | None, now: datetime) -> list[str]:
        """Interrupt every running run of a scope that holds a note of the subject: its lease
        epoch moves on, so whatever it planned from the text it read (a fused note, a step
        quoting the model's reply, a proposal) fails its fenced write and rolls back; the gate
        check resumes it, reading the scope afresh. The erase's first statement: on SQLite it
        takes the write lock, on PostgreSQL the run rows' locks, before anything is read."""
        scopes = self._subject(select(NoteRow.scope_key), user_id, conversation_id, note_id)
        return sorted(r[0] for r in self.session.execute(
            update(DreamRunRow)
            .where(locked_in_order(self.session, DreamRunRow.id,
                                   DreamRunRow.status == RunStatus.RUNNING.value,
                                   DreamRunRow.scope_key.in_(scopes)))
            .values(status=RunStatus.INTERRUPTED.value, lease_epoch=DreamRunRow.lease_epoch + 1,
                    lease_expires_at=None, enqueued_at=now,
                    status_reason="interrupted by an erasure in its scope; `dream run --due` "
                                  "resumes it from a fresh read")
            .returning(DreamRunRow.id)))

    def cancel_user_runs(self, user_id: str, now: datetime) -> list[str]:
        """Cancel every unfinished run of the user's scopes (queued, running, interrupted; a
        running one's epoch moves on, so its executor writes nothing more): an erasure of the
        user leaves nothing in those scopes to resume on. What ``interrupt_runs`` is for the
        other subjects, and taken in the same order."""
        return sorted(r[0] for r in self.session.execute(
            update(DreamRunRow)
            .where(locked_in_order(self.session, DreamRunRow.id, DreamRunRow.user_id == user_id,
                                   DreamRunRow.status.in_(ACTIVE_RUN_STATUSES)))
            .values(status=RunStatus.CANCELLED.value, lease_epoch=DreamRunRow.lease_epoch + 1,
                    lease_expires_at=None, finished_at=now,
                    status_reason=USER_ERASED_CANCEL)
            .returning(DreamRunRow.id)))

    def derived_closure(self, seed: set[str]) -> set[str]:
        """``seed`` plus every note whose text was derived from it (consolidated or fused), transitively.

        Contradiction and dedup edges (superseded / duplicate / subsumed / updated) point at a note
        that existed on its own; erasing the loser must not erase the independent winner.
        """
        found = set(seed)
        frontier = set(seed)
        while frontier:
            nxt: set[str] = set()
            for chunk in chunked(lock_sorted(frontier)):
                self._lock(chunk)
                nxt.update(r[0] for r in self.session.execute(
                    select(NoteLineageRow.child_id).where(
                        NoteLineageRow.parent_id.in_(chunk),
                        NoteLineageRow.relation.in_(DERIVED_RELATIONS))))
            frontier = nxt - found
            found |= frontier
        return found

    def retired_into(self, erased: set[str]) -> list[Survivor]:
        """Notes outside ``erased`` that point at an erased note or are a lineage parent of one,
        with the relation of the edge to the note they point at (two queries per 500 ids)."""
        relation: dict[tuple[str, str], str] = {}
        candidates: set[str] = set()
        for chunk in chunked(sorted(erased)):
            for r in self.session.execute(
                select(NoteLineageRow.parent_id, NoteLineageRow.child_id, NoteLineageRow.relation)
                .where(NoteLineageRow.child_id.in_(chunk))
            ):
                relation[(r.parent_id, r.child_id)] = r.relation
                candidates.add(r.parent_id)
            candidates.update(r[0] for r in self.session.execute(
                select(NoteRow.id).where(NoteRow.consolidated_into_id.in_(chunk))))
        out: list[Survivor] = []
        for chunk in chunked(sorted(candidates - erased)):
            rows = self.session.execute(
                select(NoteRow.id, NoteRow.scope_key, NoteRow.status,
                       NoteRow.consolidated_into_id).where(NoteRow.id.in_(chunk))).all()
            # The before-image of the change that retired each into the erased note it points at.
            befores = retirement_befores(self.session, {
                r.id: r.consolidated_into_id for r in rows if r.consolidated_into_id in erased})
            for row in rows:
                into = row.consolidated_into_id
                edge = relation.get((row.id, into)) if into else None
                out.append(Survivor(row.id, row.scope_key, row.status, into, edge,
                                    befores.get(row.id, {})))
        return out

    def contents(self, ids: Iterable[str]) -> dict[str, ErasedNote]:
        """id → scope, text and (status, pointer) of each note about to be erased (one read)."""
        out: dict[str, ErasedNote] = {}
        for chunk in chunked(list(set(ids))):
            for r in self.session.execute(
                select(NoteRow.id, NoteRow.scope_key, NoteRow.content, NoteRow.status,
                       NoteRow.consolidated_into_id, NoteRow.created_at, NoteRow.write_seq)
                .where(NoteRow.id.in_(chunk))
            ):
                out[r.id] = ErasedNote(r.scope_key, r.content, r.status, r.consolidated_into_id,
                                       (r.created_at, r.write_seq))
        return out

    def carriers(self, scope_keys: Iterable[str], gone: set[Said]) -> list[Carrier]:
        """``said_dates.carriers``: notes dated at an erased statement."""
        return carriers(self.session, scope_keys, gone)

    def keepers(self, pointed: Iterable[str]) -> list[Keeper]:
        """``kept_lives.keepers``: notes an erased note may have made live longer."""
        return keepers(self.session, pointed)

    def said_in(self, conversation_id: str) -> list[SaidIn]:
        """``said_dates.said_in``: re-datings said in the conversation."""
        return said_in(self.session, conversation_id)

    def forget_said_in(self, found: list[SaidIn]) -> None:
        forget_said_in(self.session, found)

    def erase_notes(self, ids: set[str], texts: list[str], scope_keys: set[str]) -> dict[str, int]:
        """Hard-delete the notes and every record that names them or quotes their text."""
        counts = {"notes": 0, "lineage": 0, "operation_log": 0, "operation_log_scrubbed": 0,
                  "judgements": 0, "reviews": 0, "run_steps_scrubbed": 0}
        id_list = lock_sorted(ids)
        erased = Mentions(id_list, texts)
        for chunk in chunked(id_list, IN_CHUNK // 2):  # the lineage delete binds each id twice
            counts["lineage"] += self.session.execute(delete(NoteLineageRow).where(
                or_(NoteLineageRow.parent_id.in_(chunk), NoteLineageRow.child_id.in_(chunk))
            )).rowcount  # type: ignore[attr-defined]
            counts["operation_log"] += self.session.execute(delete(OperationLogRow).where(
                OperationLogRow.entity_id.in_(chunk))).rowcount  # type: ignore[attr-defined]
            # Survivors that pointed at an erased note keep no trace of its id.
            self.session.execute(update(NoteRow).where(locked_in_order(
                self.session, NoteRow.id, NoteRow.consolidated_into_id.in_(chunk)))
                                 .values(consolidated_into_id=None))
        for key in sorted(scope_keys):
            scrub_scope(self.session, key, ids, erased, counts)
        self.session.flush()
        for chunk in chunked(id_list):
            counts["notes"] += self.session.execute(
                delete(NoteRow).where(NoteRow.id.in_(chunk))).rowcount  # type: ignore[attr-defined]
        return counts

    def forget_user(self, user_id: str, note_keys: Iterable[str]) -> dict[str, int]:
        """``erase_records.forget_user_scopes``: the user's scopes name the user no more."""
        return forget_user_scopes(self.session, user_id, note_keys)

"""The rows one write inserts and updates, built from the applied changes in order."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from worker.domain.types import NoteStatus, Scope, content_hash
from worker.errors import Conflict
from worker.phases.kit.changes import Change, ChangeKind, Member, stated_at
from worker.phases.kit.evaluate import State, apply_change
from worker.store.repositories.note_writes import (
    DECIDING_FIELDS,
    TRACKED_FIELDS,
    UNVERSIONED_FIELDS,
)
from worker.store.repositories.writes import WriteRepository


def restored_fields(before: dict[str, Any]) -> dict[str, Any]:
    """What a note given back gets besides its pointer: active, and the importance and validity
    it had before it was retired (``before``: its operation-log before-image; a host fuse zeroes
    importance and sets ``valid_to``). Erasure gives co-sources back so, prune a fused note's."""
    values: dict[str, Any] = {"status": NoteStatus.ACTIVE.value, "valid_to": None}
    if isinstance(before.get("importance"), int | float):
        values["importance"] = float(before["importance"])
    if before.get("valid_to"):
        values["valid_to"] = datetime.fromisoformat(before["valid_to"])
    return values


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class RowBuilder:
    def __init__(self, scope: Scope, run_id: str | None, now: datetime, before: State,
                 embedding_model: str | None, vectors: dict[str, np.ndarray]) -> None:
        self.scope, self.run_id, self.now = scope, run_id, now
        self.after: State = {k: dict(v) for k, v in before.items()}
        self.embedding_model, self.vectors = embedding_model, vectors
        self.notes: list[dict[str, Any]] = []
        self.updates: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        # Kept notes dated at a later statement (``Change.restate``) or given a later expiry
        # (``Change.extend_expiry``): one batch before the rest (their versions stay, and a
        # note is restated only while active, before any retirement).
        self.restates: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.lineage: list[dict[str, Any]] = []
        self.log: list[dict[str, Any]] = []

    def add(self, c: Change) -> None:
        if c.entity != "note":
            return
        if c.new_note is not None:
            self._insert(c)
        was = {m.id: dict(self.after[m.id]) for m in c.members}
        into = c.into_id if c.edits_into else None
        if into is not None:
            was[into] = dict(self.after[into])
        apply_change(c, self.after)
        reason = f"{c.reason}: {c.comment}" if c.kind == ChangeKind.ARCHIVE else c.reason
        keep = c.keep[0] if c.keep else None
        for m in c.members:
            self._update(m.id, was[m.id], self.after[m.id], reason, keep)
        if into is not None:  # dated at its fact's later statement, living as long: its version
            self._update(into, was[into], self.after[into], f"{reason}: restated",
                         batch=self.restates)
        target = c.target_id
        if c.kind == ChangeKind.SUPERSEDE and target is not None:
            self.lineage.extend(
                {"scope_key": self.scope.key, "parent_id": m.id, "child_id": target,
                 "relation": c.relation, "run_id": self.run_id, "created_at": self.now}
                for m in c.members)

    def set_fields(self, note_id: str, values: dict[str, Any], reason: str,
                   logged: dict[str, Any] | None = None) -> None:
        """A change no ``Change`` kind names (an erasure giving a retired note back): ``values``
        over the locked state, one version up, logged like any update (with ``logged`` on its
        after-image)."""
        was = dict(self.after[note_id])
        self.after[note_id].update(values, version=was["version"] + 1)
        self._update(note_id, was, self.after[note_id], reason)
        if logged:
            self.log[-1]["after"].update(logged)

    def _insert(self, c: Change) -> None:
        n = c.new_note
        assert n is not None
        vector = self.vectors.get(n.id)
        self.notes.append({
            "id": n.id, "scope_key": self.scope.key, "agent_id": self.scope.agent_id,
            "user_id": self.scope.user_id, "company_id": self.scope.company_id,
            "content": n.content, "content_hash": content_hash(n.content), "type": n.type,
            "embedding": vector, "embedding_model": self.embedding_model if vector is not None
            else None, "status": NoteStatus.ACTIVE.value, "created_at": stated_at(n, self.now),
            "updated_at": self.now, "valid_from": self.now, "version": 1,
            "importance": n.importance, "access_count": n.access_count,
            "consolidation_generation": n.consolidation_generation,
            "last_accessed_at": n.last_accessed_at, "is_auto_generated": n.is_auto_generated,
            "protection": n.protection, "comments": n.comments,
            "lineage_conversation_ids": list(n.lineage_conversation_ids) or None,
            "source_conversation_id": n.source_conversation_id,
            "write_seq": n.write_seq, "expires_at": n.expires_at,
        })
        # is_auto_generated: an undo tells a note the run made manual from one a person took
        # over since (worker.safety.undo_holds), which keeps the version.
        self.log.append(self._log_row(n.id, "insert", None,
                                      {"status": NoteStatus.ACTIVE.value, "version": 1,
                                       "is_auto_generated": n.is_auto_generated},
                                      n.reason or c.reason))

    def _update(self, note_id: str, was: dict[str, Any], now: dict[str, Any],
                reason: str, keep: Member | None = None,
                batch: list[tuple[tuple[str, ...], dict[str, Any]]] | None = None) -> None:
        changed = {f: now.get(f) for f in TRACKED_FIELDS if now.get(f) != was.get(f)}
        if not changed and now["version"] == was["version"]:
            return
        keys = tuple(sorted(changed))
        # b_: the row as it must still be (g_: what may change without a version, checked
        # when the state was not re-read; k_: the note the change keeps, still active there).
        row = {**{f"v_{k}": changed[k] for k in keys}, "b_id": note_id,
               "b_version": was["version"], "v_version": now["version"],
               "v_updated_at": self.now,
               **{f"g_{k}": was.get(k) for k in keys if k in UNVERSIONED_FIELDS},
               **{f"w_{k}": was.get(k) for k in DECIDING_FIELDS},
               "k_id": keep.id if keep is not None else None,
               "k_version": keep.version if keep is not None else None}
        (self.updates if batch is None else batch).append((keys, row))
        before = {f: _jsonable(was.get(f)) for f in keys}
        before["version"] = was["version"]
        after = {f: _jsonable(v) for f, v in changed.items()}
        after["version"] = now["version"]
        if "status" in changed and "is_auto_generated" in was:
            # Whether the note was a person's when its status changed: an undo that would
            # retire it again tells one taken over since (which keeps the version) from one
            # that already was (worker.safety.undo_holds).
            after["is_auto_generated"] = bool(was["is_auto_generated"])
        self.log.append(self._log_row(note_id, "update", before, after, reason))

    def _log_row(self, entity_id: str, op: str, before: dict[str, Any] | None,
                 after: dict[str, Any] | None, reason: str) -> dict[str, Any]:
        return {"run_id": self.run_id, "scope_key": self.scope.key, "entity": "note",
                "entity_id": entity_id, "op": op, "before": before, "after": after,
                "reason": reason, "created_at": self.now}

    def update_batches(self) -> list[tuple[tuple[str, ...], list[dict[str, Any]]]]:
        """Consecutive updates with the same columns, one executemany each, in item order."""
        out: list[tuple[tuple[str, ...], list[dict[str, Any]]]] = []
        for keys, row in [*self.restates, *self.updates]:
            if out and out[-1][0] == keys:
                out[-1][1].append(row)
            else:
                out.append((keys, [row]))
        return out


class Edits:
    """Field edits to notes of any scopes over one locked state (``RowBuilder.set_fields``, a
    builder per scope): each note a version up, logged under ``run_id`` (None: no run's)."""

    def __init__(self, state: State, run_id: str | None, now: datetime) -> None:
        self.state, self.run_id, self.now = state, run_id, now
        self._scopes: dict[str, RowBuilder] = {}

    def set(self, scope_key: str, note_id: str, values: dict[str, Any], reason: str,
            logged: dict[str, Any] | None = None) -> None:
        rows = self._scopes.get(scope_key)
        if rows is None:
            rows = self._scopes[scope_key] = RowBuilder(
                Scope.from_key(scope_key), self.run_id, self.now, self.state, None, {})
        rows.set_fields(note_id, values, reason, logged)

    def write(self, writes: WriteRepository, changed: str | Exception) -> None:
        """One UPDATE per scope and set of columns, each row guarded by the version read, and
        one log insert per scope. A row changed since the locked read raises ``changed`` (a
        message: a ``Conflict``) and the caller's transaction rolls all of it back."""
        for rows in self._scopes.values():
            for keys, batch in rows.update_batches():
                if writes.update_notes(keys, batch) != len(batch):
                    raise changed if isinstance(changed, Exception) else Conflict(changed)
            writes.add_log(rows.log)

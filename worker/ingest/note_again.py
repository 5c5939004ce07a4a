"""A fact an import says again: the note that holds its text is dated at the later statement.

A line under a new id (or none) whose text its scope already holds, live, adds no note
(``notes._present``). Its date still counts: the fact was stated again then, and a value
stated between the two statements must not read as newer to a judge. A line above in the same
file takes the later date before it is inserted (``notes._restated``); a stored note takes it
here, under the import's lock, logged as an edit (a new version), in one batch per scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from worker.domain.types import Scope, said_key
from worker.errors import Conflict
from worker.phases.kit.rows import RowBuilder
from worker.store.repositories.note_writes import SAID_IN
from worker.store.uow import UnitOfWork

_LIVE = frozenset({"active", "pending"})
_CHANGED = "a note changed during the import; nothing was imported, run it again"


def restate_stored(uow: UnitOfWork, rows: Sequence[dict[str, Any]], known: set[str],
                   now: datetime) -> int:
    """Each stored live note whose text a live line left out says, dated at the latest such
    line dated after it; ``known``: the lines to pass over (inserted now; of a stored id, which
    is that note, not a statement of it again; without a date of their own). Per scope one
    read, one locked read, one UPDATE batch and one log insert; how many notes were re-dated."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if r["id"] in known or r["status"] not in _LIVE:
            continue
        key = (r["scope_key"], r["content_hash"])
        if key not in latest or _said(r) > _said(latest[key]):
            latest[key] = r
    by_scope: dict[str, list[str]] = {}
    for scope_key, content_hash in latest:
        by_scope.setdefault(scope_key, []).append(content_hash)
    moved = 0
    for scope_key, hashes in by_scope.items():
        scope = Scope.from_key(scope_key)
        lines = ((n, latest[(scope_key, n.content_hash)])
                 for n in uow.notes.live_with_hashes(scope, hashes))
        # Later by its date: a line of the same date is the same statement imported again (its
        # recorded order is only this import's), and re-importing a file changes nothing.
        moved += _redate(uow, scope, [(n.id, line) for n, line in lines
                                      if n.created_at is None
                                      or line["created_at"] > n.created_at], now)
    return moved


def _redate(uow: UnitOfWork, scope: Scope, later: list[tuple[str, dict[str, Any]]],
            now: datetime) -> int:
    """Each note dated at its line's statement, a new version logged as an edit: one locked
    read, one UPDATE batch and one log insert for the scope."""
    if not later:
        return 0
    state = uow.writes.lock_state(i for i, _ in later)
    if len(state) != len(later):
        raise Conflict(_CHANGED)
    rows = RowBuilder(scope, None, now, state, None, {})
    for note_id, line in later:
        said_in = line.get("source_conversation_id")
        rows.set_fields(note_id, {"created_at": line["created_at"],
                                  "write_seq": line["write_seq"]}, "import: stated again",
                        {SAID_IN: said_in} if said_in else None)
    for keys, batch in rows.update_batches():
        if uow.writes.update_notes(keys, batch) != len(batch):
            raise Conflict(_CHANGED)
    uow.writes.add_log(rows.log)
    return len(later)


def _said(row: dict[str, Any]) -> tuple[datetime, int]:
    return said_key(row["created_at"], row["write_seq"])

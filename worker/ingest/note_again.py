"""A fact an import says again: the note that holds its text is dated at the later statement.

A line under a new id (or none) whose text its scope already holds, live, adds no note
(``notes._present``). Its date still counts: the fact was stated again then, and a value
stated between the two statements must not read as newer to a judge. A line above in the same
file takes the later date before it is inserted (``notes._restated``); a stored note takes it
here, under the import's lock, logged as an edit (a new version).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from worker.domain.types import Scope, said_key
from worker.store.uow import UnitOfWork

_LIVE = frozenset({"active", "pending"})


def restate_stored(uow: UnitOfWork, rows: Sequence[dict[str, Any]], known: set[str],
                   now: datetime) -> int:
    """Each stored live note whose text a live line left out says, dated at the latest such
    line dated after it; ``known``: the lines to pass over (inserted now; of a stored id, which
    is that note, not a statement of it again; without a date of their own). One read per
    scope; how many notes were re-dated."""
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
        for note in uow.notes.live_with_hashes(Scope.from_key(scope_key), hashes):
            line = latest[(scope_key, note.content_hash)]
            # Later by its date: a line of the same date is the same statement imported
            # again (its recorded order is only this import's), and re-importing a file
            # changes nothing.
            if note.created_at is None or line["created_at"] > note.created_at:
                moved += uow.notes.change(note, run_id=None, reason="import: stated again",
                                          now=now, created_at=line["created_at"],
                                          write_seq=line["write_seq"])
    return moved


def _said(row: dict[str, Any]) -> tuple[datetime, int]:
    return said_key(row["created_at"], row["write_seq"])

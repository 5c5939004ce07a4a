"""A fact an import says again: the note that holds its text is dated at the later statement.

A line under a new id (or none) whose text its scope already holds, live, adds no note
(``notes._present``), unless only notes said in another conversation hold it (``held``: the
line is then that conversation's own note). Its date still counts: the fact was stated again
then, and a value stated between the two statements must not read as newer to a judge. The
note takes it here, under the import's lock, after the import's inserts: whether it was stored
before or made by a line above in the same file, it is logged as an edit (a new version) with
the conversation the later line was said in, in one batch per scope. So one file imported in
one go or in parts ends the same, and an erasure of that conversation dates the note back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from worker.domain.types import Scope, conversations_of, said_key, stands_in
from worker.errors import Conflict
from worker.phases.kit.kept_apart import bind_again
from worker.phases.kit.rows import Edits
from worker.store.repositories.note_writes import SAID_IN
from worker.store.uow import UnitOfWork

_LIVE = frozenset({"active", "pending"})
# content hash → conversations (``conversations_of``) → the statuses of the notes holding that
# text said there
Holders = dict[str, dict[frozenset[str], set[str]]]
_CHANGED = "a note changed during the import; nothing was imported, run it again"
IMPORT_STATED_AGAIN = "import: stated again"  # the log reason of a line that dates a note


def restate_stored(uow: UnitOfWork, rows: Sequence[dict[str, Any]], known: set[str],
                   now: datetime) -> set[str]:
    """Each stored live note (inserted by this import too) whose text a live line left out
    says, dated at the latest such line dated after it; ``known``: the lines to pass over (the
    notes inserted now; of a stored id, which is that note, not a statement of it again;
    without a date of their own). Per scope one read, one locked read, one UPDATE batch and
    one log insert; the ids of the notes re-dated."""
    # (scope, text) → conversation → the latest such line said there
    latest: dict[tuple[str, str], dict[str | None, dict[str, Any]]] = {}
    for r in rows:
        if r["id"] in known or r["status"] not in _LIVE:
            continue
        said = latest.setdefault((r["scope_key"], r["content_hash"]), {})
        line = said.get(r["source_conversation_id"])
        if line is None or _said(r) > _said(line):
            said[r["source_conversation_id"]] = r
    by_scope: dict[str, set[str]] = {}
    for scope_key, content_hash in latest:
        by_scope.setdefault(scope_key, set()).add(content_hash)
    moved: set[str] = set()
    for scope_key, hashes in by_scope.items():
        scope = Scope.from_key(scope_key)
        # A line says again only a note that stands in for it (``stands_in``: another
        # conversation's note kept the line apart, ``held``).
        lines = ((n, max(found, key=_said)) for n in uow.notes.live_with_hashes(scope, hashes)
                 if (found := [line for c, line in latest[(scope_key, n.content_hash)].items()
                               if stands_in(conversations_of(n.source_conversation_id,
                                                             n.lineage_conversation_ids), c)]))
        # Later by its date: a line of the same date is the same statement imported again (its
        # recorded order is only this import's), and re-importing a file changes nothing.
        moved |= _redate(uow, scope, [(n.id, line) for n, line in lines
                                      if n.created_at is None
                                      or line["created_at"] > n.created_at], now)
    return moved


def _redate(uow: UnitOfWork, scope: Scope, later: list[tuple[str, dict[str, Any]]],
            now: datetime) -> set[str]:
    """Each note dated at its line's statement, a new version logged as an edit: one locked
    read, one UPDATE batch and one log insert for the scope."""
    if not later:
        return set()
    state = uow.writes.lock_state(i for i, _ in later)
    if len(state) != len(later):
        raise Conflict(_CHANGED)
    edits = Edits(state, None, now)
    for note_id, line in later:
        said_in = line.get("source_conversation_id")
        edits.set(scope.key, note_id, {"created_at": line["created_at"],
                                       "write_seq": line["write_seq"]}, IMPORT_STATED_AGAIN,
                  {SAID_IN: said_in} if said_in else None)
    edits.write(uow.writes, _CHANGED)
    # Stated again is no change of the note: a keep-apart (a declined merge) that bound it at
    # its version before binds it at its new one, or the next dream would merge it.
    bind_again(uow, {i: int(state[i]["version"]) for i, _ in later}, {}, now)
    return {note_id for note_id, _ in later}


def _said(row: dict[str, Any]) -> tuple[datetime, int]:
    return said_key(row["created_at"], row["write_seq"])


def held(holders: Holders, row: dict[str, Any]) -> set[str]:
    """The statuses of the notes holding ``row``'s text that may stand in for it
    (``stands_in``: said in no conversation, or in the line's alone)."""
    by_conversation = holders.get(row["content_hash"], {})
    said_in = row["source_conversation_id"]
    return set().union(*(statuses for held_in, statuses in by_conversation.items()
                         if stands_in(held_in, said_in)))

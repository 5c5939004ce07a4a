"""``kept_apart`` of an imported note: the sets of notes a host kept apart (``dream keep-apart``)
or a reviewer declined to merge, revoke or flag, as ``dream notes export`` writes them on the
line of each set's first id. Recorded at the versions the notes have in this store, so a dream
on the imported store leaves them apart as the exporting store's dreams did."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from worker.domain.limits import ident_problem
from worker.domain.types import NoteStatus, fingerprint_notes
from worker.ingest.jsonl import InputError
from worker.phases.kit.snapshot import KEEP_APART
from worker.store.uow import UnitOfWork

MAX_SETS = 1_000  # per note; a host keeps a note apart from a handful of others
MAX_MEMBERS = 100


def parse_apart(value: object, note_id: str, number: int) -> list[list[str]]:
    """The line's sets, each of distinct ids, the line's own among them; absent: none."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_SETS:
        raise InputError(f"line {number}: kept_apart must be an array of at most {MAX_SETS} "
                         "arrays of note ids")
    sets: list[list[str]] = []
    for entry in value:
        if not isinstance(entry, list) or not 2 <= len(entry) <= MAX_MEMBERS:
            raise InputError(f"line {number}: each kept_apart entry must be an array of 2 to "
                             f"{MAX_MEMBERS} note ids")
        ids = [str(i) if isinstance(i, int) and not isinstance(i, bool) else i for i in entry]
        for i in ids:
            if not isinstance(i, str) or (problem := ident_problem(i)):
                what = problem if isinstance(i, str) else "must be a string or whole number"
                raise InputError(f"line {number}: a kept_apart note id {what}")
        if len(set(ids)) != len(ids) or note_id not in ids:
            raise InputError(f"line {number}: each kept_apart entry lists distinct note ids, "
                             "this note's own among them")
        sets.append(sorted(ids))
    return sets


def record_apart(uow: UnitOfWork, apart: dict[str, list[list[str]]], in_file: set[str],
                 line_of: dict[str, int], now: datetime) -> None:
    """Record each set as a keep-apart at its notes' versions here, once every note is a stored
    active note of the line's scope. A note of the file that was not added (a note of its scope
    already holds its text), or one not active, binds nothing: that set is left out."""
    named = {i for sets in apart.values() for ids in sets for i in ids}
    notes = {n.id: n for n in uow.notes.get_many(named)}
    for owner, sets in apart.items():
        for ids in sets:
            where = f"line {line_of[owner]}: kept_apart"
            missing = [i for i in ids if i not in notes]
            if any(i not in in_file for i in missing):
                first = next(i for i in missing if i not in in_file)
                raise InputError(f"{where} names note {first!r}, which is neither in this file "
                                 "nor stored; import it too or drop the entry")
            if missing:
                continue
            members = [notes[i] for i in ids]
            if not _binds(where, members, notes[owner].scope.key):
                continue
            uow.judgements.record(notes[owner].scope, KEEP_APART, fingerprint_notes(members),
                                  ids, KEEP_APART, "kept apart (imported)", None, now)


def _binds(where: str, members: list[Any], scope_key: str) -> bool:
    """Whether the set binds here: every note active (a note retired since, here, ends the
    decision as any change does, so a file imported again still imports). Another scope's
    note is refused: nothing ever joins two scopes."""
    for n in members:
        if n.scope.key != scope_key:
            raise InputError(f"{where} names note {n.id!r} of another scope")
    return all(n.status == NoteStatus.ACTIVE.value for n in members)

"""A note dated at an erased statement is dated back to the statements of its fact still held.

The contradictions phase keeps one note of a fact said twice and dates it at the later
statement (``Change.restate``): a value said between the two must not read as newer. When the
later statement's note is erased, the kept note kept its date, and the erased conversation still
decided which value a later judge took as current. The erasure now dates it at the latest
statement left: its own first date, a later note still retired into it as the same fact, or a
line an import or a host said it again in; a fusion, written at its newest source's date, at
its newest source's statement left. Logged under the erasure's id like its restorations
(``dream undo`` reverts them together), one version up, so a pair judged on the old date is
judged again. A note it had superseded as the older value of one attribute, ended at the erased
date (``valid_to``), is ended at the date left instead (never before its ``valid_from``); one
that is the later statement now stays retired, ended at no known time, and is held for review,
as when the newer note itself is erased.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from worker.domain.types import Said, said_key
from worker.errors import Conflict
from worker.phases.kit.rows import Edits
from worker.store.repositories.said_dates import Carrier
from worker.store.uow import UnitOfWork

CHANGED = "a note changed during the erase; nothing was erased, run it again"


@dataclass
class DatedBack:
    ids: list[str] = field(default_factory=list)  # notes dated back
    # Scope → notes a dated-back note had superseded as the older value that are the later
    # statement now: still retired, held for review (as when the newer note itself is erased).
    reopened: dict[str, list[str]] = field(default_factory=dict)
    # Each note dated back → its version before (a keep-apart bound it there: ``bind_again``).
    was: dict[str, int] = field(default_factory=dict)


def date_back(uow: UnitOfWork, gone: set[Said], scope_keys: set[str],
              erase_id: str, subject: str, now: datetime) -> DatedBack:
    """Date back every note of ``scope_keys`` carrying one of the erased statements ``gone``
    (the erased notes' and the conversation's, read before the erase), in the erase's
    transaction, after the erased notes are deleted."""
    found = uow.safety.carriers(scope_keys, gone)
    dated = _dates(found, gone)
    if not dated:
        return DatedBack()
    ends = _ends(found, dated)
    state = uow.writes.lock_state([*dated, *ends])
    for old_id, end in ends.items():
        began = state.get(old_id, {}).get("valid_from")
        if end is not None and began is not None and end < began:
            ends[old_id] = began  # never before its validity began
    why = f"erase of {subject.split()[0]}: "
    edits = Edits(state, erase_id, now)
    for c in found:
        if c.note_id in dated:
            expect(state, c.note_id, created_at=c.said[0], write_seq=c.said[1])
            when, seq = dated[c.note_id]
            edits.set(c.scope_key, c.note_id, {"created_at": when, "write_seq": seq},
                      why + "the later statement it was dated at was erased")
            for old in c.superseded:
                if old.id in ends:
                    expect(state, old.id, valid_to=old.valid_to)
                    edits.set(c.scope_key, old.id, {"valid_to": ends[old.id]},
                              why + "the statement that ended it was erased; ended at the one "
                              "left")
    edits.write(uow.writes, CHANGED)
    return DatedBack(sorted(dated), _reopened(found, dated),
                     {i: int(state[i]["version"]) for i in dated})


def _ends(found: list[Carrier], dated: Mapping[str, Said]) -> dict[str, datetime | None]:
    """The older values a dated-back note superseded that were ended at its erased date: each
    ended at its date left instead, or, when said after that date, at no known time (None;
    held for review, ``_reopened``)."""
    out: dict[str, datetime | None] = {}
    for c in found:
        if c.note_id not in dated or c.said[0] is None:
            continue
        left = dated[c.note_id]
        for old in c.superseded:
            if old.valid_to == c.said[0]:
                later = said_key(*old.said) > said_key(*left)
                out[old.id] = None if later else left[0]
    return out


def _reopened(found: list[Carrier], dated: Mapping[str, Said]) -> dict[str, list[str]]:
    """Per scope, the values retired as older than a carrier's erased date that are later than
    the date it has left."""
    out: dict[str, list[str]] = {}
    for c in found:
        if c.note_id in dated:
            now_at, was_at = said_key(*dated[c.note_id]), said_key(*c.said)
            later = [old.id for old in c.superseded if now_at < said_key(*old.said) <= was_at]
            if later:
                out.setdefault(c.scope_key, []).extend(later)
    return out


def expect(state: Mapping[str, Mapping[str, Any]], note_id: str, **fields: Any) -> None:
    """The locked row still holds ``fields`` as read, or the erase starts over (Conflict)."""
    row = state.get(note_id)
    if row is None or any(row.get(k) != v for k, v in fields.items()):
        raise Conflict(CHANGED)


def _dates(found: list[Carrier], gone: set[Said]) -> dict[str, Said]:
    """Each carrier's latest statement not erased, when earlier than its date. A member or a
    fusion's source that is a carrier itself counts at its own new date (a fact said three
    times, kept twice over; a note dated at the erased statement, then fused)."""
    out: dict[str, Said] = {}
    for _ in range(len(found) + 1):  # each round settles at least one more chain link
        changed = False
        for c in found:
            first = _first(c, out)
            if first is None:
                continue  # its own date, never moved: the erased note shared it by chance
            held = [first, *c.unheld, *(out.get(i, said) for i, said in c.members)]
            left = [s for s in held if s not in gone]
            # A fusion's first statement is its sources' own (none is erased, or it would be).
            latest = max([*left, *([first] if c.sources else [])], key=lambda s: said_key(*s),
                         default=first)
            if said_key(*latest) < said_key(*c.said) and out.get(c.note_id) != latest:
                out[c.note_id] = latest
                changed = True
        if not changed:
            break
    return out


def _first(c: Carrier, out: Mapping[str, Said]) -> Said | None:
    """A carrier's own first statement: for a fusion, its newest source's as they stand now
    (the date it was written with, ``fused_fields``; a source dated back counts at its new
    date); else its date before the log first moved it (None: never moved)."""
    if not c.sources:
        return c.first
    return max((out.get(i, said) for i, said in c.sources), key=lambda s: said_key(*s))

"""What an erasure reads to date a kept note back (``worker.safety.erase_dates``).

A note kept for a later statement of its own fact carries that statement's date
(``Change.restate``, an import's line said again, a host's ``remember`` NOOP). When the note
that made the later statement is erased, the date stays behind (on a fusion of that note too,
written at its newest source's date); these reads find the notes that carry an erased note's
date and every statement of their fact the store still holds, and a fusion's sources.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import product
from typing import Any, NamedTuple

from sqlalchemy import and_, cast, func, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from worker.domain.types import NoteStatus, Said
from worker.store.chunks import IN_CHUNK, chunked
from worker.store.models import NoteLineageRow, NoteRow, OperationLogRow
from worker.store.repositories.note_writes import SAID_IN

# The lineage relations of a note retired into another as one fact said again: the kept note
# takes the later statement's date (contradictions' equivalent and subsumed pairs).
SAID_AGAIN_RELATIONS = ("duplicate", "subsumed")
# A note retired into another as the older value of one attribute (contradictions' conflict).
SUPERSEDED = "superseded"
# The lineage relations of a note fused into another (a dream's consolidation, a host's fuse):
# the fused note is dated at its newest source's statement when written (``fused_fields``).
FUSED_RELATIONS = ("consolidated", "fused")
# The reasons of a re-dating by a host's remember or an import's line (no run): "…: stated again".
STATED_AGAIN = "%: stated again"
# An import giving back an exported note's first date (``Statements``): a record, no statement.
FIRST_SAID = "import: first said"


class SaidIn(NamedTuple):
    """A re-dating whose later statement was made in a conversation (its log row)."""

    log_id: int
    note_id: str
    scope_key: str
    said: Said


class Superseded(NamedTuple):
    """A note retired into a carrier as the older value of one attribute."""

    id: str
    said: Said
    valid_to: datetime | None  # when it stopped being true: the carrier's date then


@dataclass
class Carrier:
    """A note dated at an erased statement, and the statements of its fact besides."""

    note_id: str
    scope_key: str
    said: Said
    # Its date before it was first dated at a later statement (None: the log never moved it).
    first: Said | None = None
    # Later statements no note holds: an import's line said again, a host's remember (no run).
    unheld: list[Said] = field(default_factory=list)
    # Notes retired into it as the same fact said again, still retired: (id, their statement).
    members: list[tuple[str, Said]] = field(default_factory=list)
    # Notes it superseded as the newer value, still retired into it.
    superseded: list[Superseded] = field(default_factory=list)
    # Notes fused into it, still retired into it: (id, their statement). A fusion's date is its
    # newest source's, given when it was written (the log never moved it).
    sources: list[tuple[str, Said]] = field(default_factory=list)


def carriers(session: Session, scope_keys: Iterable[str], gone: set[Said]) -> list[Carrier]:
    """The notes of ``scope_keys`` whose date and recorded order are one of the erased
    statements ``gone`` (read after the erased notes were deleted), with their statements:
    three reads (chunked by 500 ids, or by 250 scopes and 250 dates)."""
    dates = sorted({d for d, _ in gone if d is not None})
    keys = sorted(set(scope_keys))
    found: dict[str, Carrier] = {}
    for scopes, chunk in product(chunked(keys, IN_CHUNK // 2), chunked(dates, IN_CHUNK // 2)):
        for r in session.execute(
            select(NoteRow.id, NoteRow.scope_key, NoteRow.created_at, NoteRow.write_seq)
            .where(NoteRow.scope_key.in_(scopes), NoteRow.created_at.in_(chunk))
        ):
            if (r.created_at, r.write_seq) in gone:
                found[r.id] = Carrier(r.id, r.scope_key, (r.created_at, r.write_seq))
    if found:
        _statements(session, found)
        _members(session, found)
    return sorted(found.values(), key=lambda c: c.note_id)


def said_in(session: Session, conversation_id: str) -> list[SaidIn]:
    """The re-datings whose later statement was made in ``conversation_id``: a host's remember
    or an import's line said a note's fact again there, and no note records it (one read)."""
    column = OperationLogRow.after
    if session.get_bind().dialect.name == "postgresql":
        named = cast(column, JSONB)[SAID_IN].astext == conversation_id
    else:
        named = func.json_extract(column, f"$.{SAID_IN}") == conversation_id
    out: list[SaidIn] = []
    for r in session.execute(
        select(OperationLogRow.id, OperationLogRow.entity_id, OperationLogRow.scope_key,
               OperationLogRow.after)
        .where(OperationLogRow.entity == "note", OperationLogRow.run_id.is_(None),
               OperationLogRow.reason.like(STATED_AGAIN), named).order_by(OperationLogRow.id)
    ):
        if (said := _said(r.after)) is not None:
            out.append(SaidIn(r.id, r.entity_id, r.scope_key, said))
    return out


def forget_said_in(session: Session, found: list[SaidIn]) -> None:
    """Those log rows name the erased conversation no more: ``said_in`` null, a statement
    erased (their dates stay, as images, and no later erasure dates a note at them again)."""
    for s in found:
        row = session.get(OperationLogRow, s.log_id)
        if row is not None and row.after is not None:
            row.after = {**row.after, SAID_IN: None}


def _date_moves(session: Session,
                note_ids: Iterable[str]) -> Iterator[tuple[str, Any, Said, Said]]:
    """(note, its log row, the date before, the date after) of every logged change that moved a
    note's date, oldest first per note (one read per 500 notes)."""
    for chunk in chunked(sorted(note_ids)):
        for r in session.execute(
            select(OperationLogRow.entity_id, OperationLogRow.run_id, OperationLogRow.reason,
                   OperationLogRow.before, OperationLogRow.after)
            .where(OperationLogRow.entity == "note", OperationLogRow.entity_id.in_(chunk))
            .order_by(OperationLogRow.id)
        ):
            before, after = _said(r.before), _said(r.after)
            if before is not None and after is not None:
                yield r.entity_id, r, before, after


def _unheld(row: Any) -> bool:
    """A later statement no note holds: an import or a host said the fact again (no run), in no
    conversation since erased; not the first date an import gave back (``FIRST_SAID``)."""
    return row.run_id is None and row.reason != FIRST_SAID and not _erased(row.after)


def _statements(session: Session, found: dict[str, Carrier]) -> None:
    """Each carrier's first date and the statements with no note that moved it (the log)."""
    for note_id, row, before, after in _date_moves(session, found):
        c = found[note_id]
        if c.first is None:
            c.first = before
        if _unheld(row):
            c.unheld.append(after)


class Statements(NamedTuple):
    """What the log says of when a note's fact was said, as an export writes it: the note's
    own first date, and the later statements no note holds with their conversations."""

    first: Said
    again: list[tuple[Said, str | None]]


def statements(session: Session, note_ids: Iterable[str]) -> dict[str, Statements]:
    """``Statements`` of each of ``note_ids`` whose date the log moved (absent: never moved)."""
    out: dict[str, Statements] = {}
    for note_id, row, before, after in _date_moves(session, note_ids):
        found = out.setdefault(note_id, Statements(before, []))
        if _unheld(row):
            found.again.append((after, row.after.get(SAID_IN)))
    return out


def _members(session: Session, found: dict[str, Carrier]) -> None:
    """The notes retired into each carrier as its fact said again, as an older value or as a
    source of a fusion, still retired into it."""
    edge = and_(NoteLineageRow.parent_id == NoteRow.id,
                NoteLineageRow.child_id == NoteRow.consolidated_into_id,
                NoteLineageRow.relation.in_((*SAID_AGAIN_RELATIONS, SUPERSEDED,
                                             *FUSED_RELATIONS)))
    for chunk in chunked(sorted(found)):
        for r in session.execute(
            select(NoteRow.id, NoteRow.consolidated_into_id, NoteRow.created_at,
                   NoteRow.write_seq, NoteRow.valid_to, NoteLineageRow.relation)
            .join(NoteLineageRow, edge)
            .where(NoteRow.consolidated_into_id.in_(chunk),
                   NoteRow.status == NoteStatus.REVOKED.value).distinct()
            .order_by(NoteRow.id)
        ):
            c, said = found[r.consolidated_into_id], (r.created_at, r.write_seq)
            if r.relation == SUPERSEDED:
                c.superseded.append(Superseded(r.id, said, r.valid_to))
            elif r.relation in FUSED_RELATIONS:
                c.sources.append((r.id, said))
            else:
                c.members.append((r.id, said))


def _erased(image: Any) -> bool:
    """The re-dating's statement was made in a conversation since erased (``forget_said_in``)."""
    return isinstance(image, dict) and SAID_IN in image and image[SAID_IN] is None


def _said(image: Any) -> Said | None:
    """The statement an operation-log image records (None: it did not move the date)."""
    if not isinstance(image, dict) or not image.get("created_at"):
        return None
    seq = image.get("write_seq")
    when = datetime.fromisoformat(image["created_at"])
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC),  # UTC, as stored
            int(seq) if isinstance(seq, int | float) else None)

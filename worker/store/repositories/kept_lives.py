"""What an erasure reads to give a kept note its own life back (``worker.safety.erase_expiry``).

A note kept for a note retired into it as the same fact expires no sooner than that note
(``Change.extend_expiry``), and a fusion at the latest of its sources' expiries
(``fused_fields``). These reads find the notes an erased note was retired into, and the notes
those were retired into in turn, with the expiries of what each still stands for and the logged
changes of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from worker.domain.types import NoteStatus
from worker.store.chunks import chunked
from worker.store.models import NoteLineageRow, NoteRow, OperationLogRow
from worker.store.repositories.said_dates import FUSED_RELATIONS, SAID_AGAIN_RELATIONS

# The relations of a note retired into another that stands for its fact, and so for its life.
CARRYING = (*SAID_AGAIN_RELATIONS, *FUSED_RELATIONS)

Life = datetime | None  # an expiry; None: never expires
# A note's lineage edge to the note its pointer names, over a carrying relation.
_CARRIED = and_(NoteLineageRow.parent_id == NoteRow.id,
                NoteLineageRow.child_id == NoteRow.consolidated_into_id,
                NoteLineageRow.relation.in_(CARRYING))


@dataclass
class Keeper:
    """A note that may live longer for a note erased now, and what it stands for besides."""

    note_id: str
    scope_key: str
    expires_at: Life
    # Notes retired into it as its fact said again, still retired into it: (id, their expiry).
    members: list[tuple[str, Life]] = field(default_factory=list)
    # Notes fused into it, still retired into it: (id, their expiry).
    sources: list[tuple[str, Life]] = field(default_factory=list)
    # Each logged change of its expiry, oldest first: (before, after).
    moves: list[tuple[Life, Life]] = field(default_factory=list)


def keepers(session: Session, pointed: Iterable[str]) -> list[Keeper]:
    """The notes ``pointed`` at by erased notes and, transitively, the notes each was retired
    into as the same fact or fused into (read after the erased notes were deleted): one read per
    generation and 500 ids, then two for their members and logged expiries."""
    found: dict[str, Keeper] = {}
    frontier = set(pointed)
    while frontier:
        up: set[str] = set()
        for chunk in chunked(sorted(frontier)):
            for r in session.execute(
                select(NoteRow.id, NoteRow.scope_key, NoteRow.expires_at, NoteRow.status,
                       NoteRow.consolidated_into_id, NoteLineageRow.relation)
                .outerjoin(NoteLineageRow, _CARRIED).where(NoteRow.id.in_(chunk))
            ):
                found.setdefault(r.id, Keeper(r.id, r.scope_key, _utc(r.expires_at)))
                if r.status == NoteStatus.REVOKED.value and r.relation is not None:
                    up.add(r.consolidated_into_id)
        frontier = up - found.keys()
    if found:
        _members(session, found)
        _moves(session, found)
    return sorted(found.values(), key=lambda k: k.note_id)


def _members(session: Session, found: dict[str, Keeper]) -> None:
    """The notes retired into each keeper as its fact said again or fused into it."""
    for chunk in chunked(sorted(found)):
        for r in session.execute(
            select(NoteRow.id, NoteRow.consolidated_into_id, NoteRow.expires_at,
                   NoteLineageRow.relation)
            .join(NoteLineageRow, _CARRIED)
            .where(NoteRow.consolidated_into_id.in_(chunk),
                   NoteRow.status == NoteStatus.REVOKED.value).distinct().order_by(NoteRow.id)
        ):
            k = found[r.consolidated_into_id]
            (k.sources if r.relation in FUSED_RELATIONS else k.members).append(
                (r.id, _utc(r.expires_at)))


def _moves(session: Session, found: dict[str, Keeper]) -> None:
    """Each keeper's logged changes of its expiry (a run's extension, an undo, an erasure)."""
    for chunk in chunked(sorted(found)):
        for r in session.execute(
            select(OperationLogRow.entity_id, OperationLogRow.before, OperationLogRow.after)
            .where(OperationLogRow.entity == "note", OperationLogRow.entity_id.in_(chunk))
            .order_by(OperationLogRow.id)
        ):
            before, after = r.before or {}, r.after or {}
            if "expires_at" in before and "expires_at" in after:
                found[r.entity_id].moves.append((_image(before["expires_at"]),
                                                 _image(after["expires_at"])))


def _image(value: object) -> Life:
    """An expiry as an operation-log image records it (ISO text; naive is UTC, as stored)."""
    return _utc(datetime.fromisoformat(value)) if isinstance(value, str) and value else None


def _utc(when: Life) -> Life:
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when

"""One way to replace notes by one note: ``supersede`` builds the change (sources revoked into a
new note or an existing one, lineage, comments, op-log reason) that consolidation,
contradictions, the host's fuse and remember all apply through the one guarded write;
``apply_changes`` is that write for a single call (host writes, approved proposals)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from worker.domain.types import Note
from worker.phases.kit.changes import Change, ChangeKind, ItemResult, Member, NewNote
from worker.phases.kit.snapshot import RunJournal
from worker.phases.kit.write import WriteTarget, open_write


def members_of(notes: Sequence[Note]) -> tuple[Member, ...]:
    return tuple(Member(n.id, n.version) for n in notes)


def supersede(
    name: str, sources: Sequence[Note], *, relation: str, reason: str, comment: str,
    new_note: NewNote | None = None, into: Note | None = None, append_comment: bool = False,
    valid_to: datetime | None = None, importance: float | None = None,
    confidence: float | None = None, detail: dict[str, Any] | None = None,
    restate: bool = False, extend_expiry: bool = False,
) -> Change:
    """``sources`` revoked into ``new_note`` (created by the write) or into ``into`` (an existing
    note that must still be active at its version), each with a lineage edge ``relation``;
    ``restate``: ``into`` is dated at the latest of the sources said after it, and
    ``extend_expiry``: expires no sooner than any of them (``Change``). A ``new_note``
    standing for the sources carries their ``lasting_expiry`` itself (``fused_fields``)."""
    if (new_note is None) == (into is None):
        raise ValueError("supersede needs exactly one of new_note and into")
    return Change(
        kind=ChangeKind.SUPERSEDE, name=name, members=members_of(sources),
        keep=members_of([into]) if into is not None else (), new_note=new_note,
        into_id=into.id if into is not None else None, relation=relation, reason=reason,
        comment=comment, append_comment=append_comment, valid_to=valid_to,
        importance=importance, confidence=confidence, detail=detail or {}, restate=restate,
        extend_expiry=extend_expiry and into is not None,
        # A host may change a source's protection without a version. A new note's protection
        # is derived from its sources as read (``fused_fields``: ephemeral only if all were);
        # a loser retired into a winner was judged retirable as read (a note pinned since is
        # the guard's to refuse, and would block the run). Either way: stale at the write.
        expect={n.id: {"protection": n.protection} for n in sources},
    )


def embed_new_notes(app: Any, changes: Sequence[Change]) -> dict[str, Any]:
    """Vectors of every note the changes create, in one embedder call, before any transaction."""
    new = [c.new_note for c in changes if c.new_note is not None]
    if not new:
        return {}
    vectors = app.embedder.embed([n.content for n in new])
    return {n.id: vectors[k] for k, n in enumerate(new)}


def apply_changes(target: WriteTarget, changes: Sequence[Change], *,
                  journal: RunJournal | None = None, guard_each: bool = True) -> list[ItemResult]:
    """Embed, then apply ``changes`` in one guarded write (fenced when ``target`` is a run's).

    For the review flow: a stored ``Change.from_json(...)`` approved later goes through here,
    one item at a time; a member that moved since makes it ``STALE`` and nothing is written.
    """
    vectors = embed_new_notes(target.app, changes) if not target.dry_run else {}
    with open_write(target) as w:
        results = w.apply(changes, vectors=vectors, journal=journal, guard_each=guard_each)
        if w.tripped is not None and target.steps is not None:
            w.trip(w.tripped, [m.id for r in results if r.reason for m in r.change.members])
    return results

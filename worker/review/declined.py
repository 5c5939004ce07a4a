"""What a declined review item leaves behind: the review's own memory of the decline, the
phase's verdict memory, so no run proposes (nor asks a model about) it again, and a "keep
apart" for its notes, so no phase retires one of them in favour of another, until one of its
notes changes."""

from __future__ import annotations

from typing import Any

from worker.domain.types import Note, Scope, fingerprint_notes
from worker.review.items import DECLINED_KIND, ChangeKind, ProposedChange

# What an approval applies against a keep-apart: a change that retires one note in favour of
# another (a flag retires none; an archive has no successor).
RETIRING_CHANGES = frozenset({ChangeKind.MERGE, ChangeKind.REVOKE})


def remember_declined(uow: Any, scope: Scope, change: ProposedChange, reason: str | None,
                      now: Any) -> None:
    """The review's own memory, the phase's verdict memory so no model is asked again, and for
    a merge, a revocation or a flag the reviewer's "no" about the set of notes: no phase
    retires one of them in favour of another (consolidation merging two of them, contradictions
    revoking one into another) while every one keeps its version (``Memory.kept_apart``)."""
    from worker.phases.consolidate.decision import KEEP_SEPARATE
    from worker.phases.consolidate.decision import KIND as CLUSTER_KIND
    from worker.phases.contradictions.core import JUDGEMENT_KIND as PAIR_KIND
    from worker.phases.kit.snapshot import DECLINED_APART

    ids = change.note_ids
    why = f"declined in review: {reason}" if reason else "declined in review"
    uow.judgements.record(scope, DECLINED_KIND, change.fingerprint, ids, "declined", why, None,
                          now)
    members = members_fingerprint(scope, change.versions)
    if change.kind == ChangeKind.MERGE:
        uow.judgements.record(scope, CLUSTER_KIND, members, ids, KEEP_SEPARATE, why, None, now)
    elif change.kind in (ChangeKind.REVOKE, ChangeKind.FLAG):
        uow.judgements.record(scope, PAIR_KIND, members, ids, "declined", why, None, now)
    if change.kind in APART_CHANGES and len(ids) >= 2:
        uow.judgements.record(scope, DECLINED_APART, members, ids, DECLINED_APART, why, None,
                              now)


# What a decline keeps apart: the changes that retire a note in favour of another (a flag
# retires none, but its "no" says the notes are not in conflict, so neither may win over the
# other later). An archive has no successor: its decline binds only the archive itself.
APART_CHANGES = frozenset({ChangeKind.MERGE, ChangeKind.REVOKE, ChangeKind.FLAG})


def members_fingerprint(scope: Scope, versions: dict[str, int]) -> str:
    """``fingerprint_notes`` of the item's notes at the versions it was planned on."""
    return fingerprint_notes([Note(id=i, scope=scope, content="", version=v)
                              for i, v in versions.items()])


def kept_apart_since(uow: Any, scope: Scope, change: ProposedChange,
                     current: dict[str, Note]) -> tuple[str, str] | None:
    """Two of the item's notes a host kept apart (or a reviewer declined together) after it was
    proposed, binding at their versions now (``current``): a keep-apart keeps the versions, so
    the version check alone would let the approval merge or revoke one into the other."""
    from worker.phases.kit.snapshot import APART_KINDS, Memory

    if change.kind not in RETIRING_CHANGES:
        return None
    notes = [current[i] for i in change.note_ids if i in current]
    pairs = Memory(rows=uow.judgements.of_kinds(scope, APART_KINDS)).kept_apart(notes)
    if not pairs:
        return None
    first, second = min(tuple(sorted(p)) for p in pairs)
    return first, second

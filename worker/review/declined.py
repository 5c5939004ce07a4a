"""What a declined review item leaves behind: the review's own memory of the decline, and
the phase's verdict memory, so no run proposes (nor asks a model about) it again until one of
its notes changes."""

from __future__ import annotations

from typing import Any

from worker.domain.types import Note, Scope, fingerprint_notes
from worker.review.items import DECLINED_KIND, ChangeKind, ProposedChange


def remember_declined(uow: Any, scope: Scope, change: ProposedChange, reason: str | None,
                      now: Any) -> None:
    """The review's own memory, plus the phase's verdict memory so no model is asked again."""
    from worker.phases.consolidate.decision import KEEP_SEPARATE
    from worker.phases.consolidate.decision import KIND as CLUSTER_KIND
    from worker.phases.contradictions.core import JUDGEMENT_KIND as PAIR_KIND

    ids = change.note_ids
    why = f"declined in review: {reason}" if reason else "declined in review"
    uow.judgements.record(scope, DECLINED_KIND, change.fingerprint, ids, "declined", why, None,
                          now)
    members = members_fingerprint(scope, change.versions)
    if change.kind == ChangeKind.MERGE:
        uow.judgements.record(scope, CLUSTER_KIND, members, ids, KEEP_SEPARATE, why, None, now)
    elif change.kind in (ChangeKind.REVOKE, ChangeKind.FLAG):
        uow.judgements.record(scope, PAIR_KIND, members, ids, "declined", why, None, now)


def members_fingerprint(scope: Scope, versions: dict[str, int]) -> str:
    """``fingerprint_notes`` of the item's notes at the versions it was planned on."""
    return fingerprint_notes([Note(id=i, scope=scope, content="", version=v)
                              for i, v in versions.items()])

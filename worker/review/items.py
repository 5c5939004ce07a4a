"""Review before apply, the pure part: apply modes, what a proposed change is, and whether a
decision is applied at once or proposed for review."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from worker.domain.types import NoteStatus


class ApplyMode(StrEnum):
    AUTO = "auto"  # apply every decision (the behaviour before review existed)
    PROPOSE = "propose"  # plan and judge; record every change as a review item; apply nothing
    SAFE_AUTO = "safe_auto"  # apply rule verdicts and confident model verdicts; propose the rest


class ChangeKind(StrEnum):
    MERGE = "merge"  # consolidate: members revoked into one new note with the fused text
    REVOKE = "revoke"  # contradictions: the loser revoked into the winner
    FLAG = "flag"  # contradictions: both kept, flagged for a human
    ARCHIVE = "archive"  # prune / archive: notes leave the active set


class BatchOutcome(StrEnum):
    """How a decision over several items ended, for callers that read one word (the CLI's exit
    code, the API's and MCP's ``outcome``)."""

    DONE = "done"  # every item decided as asked
    BLOCKED = "blocked"  # the blast-radius guard left an item open: it waits for you
    STALE = "stale"  # an item changed or was decided meanwhile: nothing written for it


_NOT_AS_ASKED = {"blocked": BatchOutcome.BLOCKED, "stale": BatchOutcome.STALE,
                 "refused": BatchOutcome.STALE, "gone": BatchOutcome.STALE}
# An item an erasure took (with the notes it named) while a decision was under way: an answer
# for the item, single or in a batch, never an error (``review.service``).
GONE = "gone"


def batch_outcome(statuses: Iterable[str]) -> BatchOutcome:
    """Blocked before stale before done: an item the guard held waits for a person, a stale
    one only for the next run."""
    found = {_NOT_AS_ASKED.get(s, BatchOutcome.DONE) for s in statuses}
    for outcome in (BatchOutcome.BLOCKED, BatchOutcome.STALE):
        if outcome in found:
            return outcome
    return BatchOutcome.DONE


@dataclass
class Decided:
    """One item's answer to an approve or decline."""

    item_id: int
    status: str  # approved | declined | stale | blocked | refused | gone
    line: str
    run_id: str | None = None  # the approval's run (undo it with `dream undo`)
    new_note_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.item_id, "status": self.status, "detail": self.line,
                "run_id": self.run_id, "new_note_id": self.new_note_id}


def decided_body(done: list[Decided]) -> dict[str, Any]:
    """What the API and MCP answer for a decision: each item, and the batch's outcome."""
    return {"items": [d.as_dict() for d in done],
            "outcome": batch_outcome(d.status for d in done).value}


class ItemStatus(StrEnum):
    OPEN = "open"
    APPROVED = "approved"
    DECLINED = "declined"
    STALE = "stale"  # a note (or example) changed after the plan; never applied
    UNDONE = "undone"  # approved, then the run that applied it was undone (`dream undo`)


# Verdict memory of a declined item (judgements.kind): not proposed again at these versions.
DECLINED_KIND = "review_declined"
# decided_by of an open item its proposing run's undo withdrew (ReviewRepository.withdraw_run).
WITHDRAWN_BY = "undo"
# What records an item stale without approving it: the next run, a host write that moved its
# notes (fuse, keep-apart), a decline that kept them apart ("review"), an undo that gave them
# back (``review.propose.settle_stale``).
STALE_MARKERS = frozenset({"run", "host", "review", WITHDRAWN_BY})


def closed_line(row: Any, *, meanwhile: bool = False) -> str:
    """Why an item that is no longer open can be neither approved nor declined: its status
    now, who or what decided it and what is left to do, in one line of ids (``meanwhile``: it
    was open when the caller read it)."""
    status = f"was decided meanwhile: it is {row.status}" if meanwhile else f"is already {row.status}"
    return f"review item {row.id} {status}: {_closed_why(row)}"


def _closed_why(row: Any) -> str:
    by, applied = row.decided_by or "a run", row.applied_run_id
    if row.status == ItemStatus.DECLINED and row.decided_by == WITHDRAWN_BY:
        return (f"withdrawn when run {row.run_id}, which proposed it, was undone; the next dream "
                "proposes it afresh if it still applies")
    if row.status == ItemStatus.DECLINED:
        return f"declined by {by}; it is not proposed again until one of its notes changes"
    if row.status == ItemStatus.APPROVED:
        return f"approved by {by} in run {applied}; `dream undo {applied}` reverts it"
    if row.status == ItemStatus.UNDONE:
        return (f"approved by {by}, then run {applied}, which applied it, was undone; the next "
                "dream proposes it afresh")
    said = re.sub(r"^item \d+ is stale: ", "", getattr(row, "outcome", None) or "")
    return (f"{said} (it can never apply)" if said else "a note or example it names changed "
            "since it was proposed, so it can never apply; the next dream proposes afresh")


@dataclass(frozen=True)
class ProposedChange:
    """One change a phase decided, as data: what it writes, at which versions, and why.

    ``versions`` holds every note the change writes (members of a merge, the pair of a
    contradiction, the notes to archive) at the version the plan read; approval re-checks them.
    ``payload`` is what the phase needs to apply it later (small, JSON-serializable).
    """

    phase: str
    kind: ChangeKind
    versions: dict[str, int]
    reason: str = ""
    content: str | None = None
    source_ids: tuple[str, ...] = ()
    relation: str | None = None
    confidence: float | None = None
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def note_ids(self) -> list[str]:
        return sorted(self.versions)

    @property
    def fingerprint(self) -> str:
        """Identity of the change at these versions: any member's change makes a new one."""
        parts = [self.phase, self.kind.value, *sorted(f"{i}:{v}" for i, v in self.versions.items())]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()

    def row(self) -> dict[str, Any]:
        """The review_items columns this change fills (scope, run and times come from the caller)."""
        return {"phase": self.phase, "kind": self.kind.value, "versions": dict(self.versions),
                "fingerprint": self.fingerprint, "content": self.content,
                "source_ids": list(self.source_ids) or None, "relation": self.relation,
                "reason": self.reason[:1000] or None, "confidence": self.confidence,
                "payload": self.payload or None}

    @classmethod
    def from_row(cls, row: Any) -> ProposedChange:
        return cls(phase=row.phase, kind=ChangeKind(row.kind),
                   versions={str(k): int(v) for k, v in (row.versions or {}).items()},
                   reason=row.reason or "", content=row.content,
                   source_ids=tuple(row.source_ids or ()), relation=row.relation,
                   confidence=row.confidence, payload=dict(row.payload or {}))


# What a retirement decides on beyond the version: a host pins a note or takes it over as
# manual without a new version.
SEEN_FIELDS = ("protection", "is_auto_generated")


def entity_of(payload: dict[str, Any] | None) -> str:
    """What an archive item archives: "example" (the archive phase's other entity) or "note"."""
    return "example" if (payload or {}).get("entity") == "example" else "note"


def seen_of(notes: Any) -> dict[str, dict[str, Any]]:
    """``SEEN_FIELDS`` as the plan saw each note (a proposal's ``payload["seen"]``); every
    proposal records them for every note it would retire or change (archive records every
    field it decided on, ``seen_decided``: a renewal or a retrieval's touch keeps the version
    too)."""
    return {n.id: {f: seen_value(getattr(n, f)) for f in SEEN_FIELDS} for n in notes}


def seen_value(value: Any) -> Any:
    """A decided-on field as ``seen`` stores it (JSON): a time as its UTC ISO text."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    return value


def seen_decided(item_id: str, decided: Iterable[tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    """``seen`` of one note or example from the fields its plan decided on (archive's
    ``Decision.decided``: expiry, last use, score, manual mark, protection)."""
    return {item_id: {f: seen_value(v) for f, v in decided}}


def changed_unversioned(payload: dict[str, Any] | None, item: Any) -> str | None:
    """How ``item`` (a note or an example) moved since the plan beyond its version (the fields
    ``seen`` recorded), or None. An item stored before ``seen`` was recorded is not checked
    here (the write's guard still is)."""
    seen = ((payload or {}).get("seen") or {}).get(item.id)
    if seen is None:
        return None
    moved = [f"{f} {seen[f]} → {now}" for f in sorted(seen)
             if (now := seen_value(getattr(item, f))) != seen[f]]
    return ", ".join(moved) or None


def moved_since(payload: dict[str, Any] | None, version: int, now: Any) -> str | None:
    """How a note or example an item named at ``version`` moved since the plan (``now``: its
    current row, None when gone): gone, a new version or status, or a field the plan decided
    on (``changed_unversioned``: a pin, a manual takeover, a renewal, a new score keep the
    version); None while it is as planned. The one rule of staleness for approval, the next
    run's propose and ``review show``."""
    if now is None:
        return "no longer exists"
    if (now.version, now.status) != (version, NoteStatus.ACTIVE.value):
        return f"version {version} → {now.version}, {now.status}"
    return changed_unversioned(payload, now)


def resolve_mode(deployment: str, agent: str | None) -> ApplyMode:
    """The agent's own mode wins; NULL (or an unknown stored value) means the deployment's."""
    if agent is not None and agent in set(ApplyMode):
        return ApplyMode(agent)
    return ApplyMode(deployment)


def should_propose(mode: ApplyMode, *, settled_by_rule: bool, confidence: float | None,
                   min_confidence: float) -> bool:
    """True when a decision becomes a review item instead of being applied.

    safe_auto trusts the rule judge (identity, containment, expiry, a recorded deletion: it
    settles only what is safe by construction) and a model verdict whose stated confidence
    reaches the bar; a model verdict without a confidence (a fusion) is always proposed.
    """
    if mode == ApplyMode.AUTO:
        return False
    if mode == ApplyMode.PROPOSE:
        return True
    if settled_by_rule:
        return False
    return confidence is None or confidence < min_confidence

"""What a phase's write applies: small typed change items, JSON-serializable.

A ``Change`` names every note it touches with the version it was planned at, so the one guarded
write (``worker.phases.kit.write``) can skip it as stale when any of them moved. The same
values can be stored as a proposal and approved later through the same write
(``apply_changes``), one item at a time: ``Change.to_json()`` / ``Change.from_json()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class ChangeKind(StrEnum):
    SUPERSEDE = "supersede"  # members revoked into one note: a new one, or an existing winner
    ARCHIVE = "archive"  # members archived (prune, archive); notes or examples
    ANNOTATE = "annotate"  # flags and/or a comment added to members; their version is kept


class ItemStatus(StrEnum):
    APPLIED = "applied"
    STALE = "stale"  # a member changed since the plan read it: skipped, never written blindly
    GUARDED = "guarded"  # the blast-radius guard or a protection refused it (R20, R23)
    DRY_RUN = "dry_run"  # would apply; nothing written


@dataclass(frozen=True)
class Member:
    """A note (or example) as the plan saw it."""

    id: str
    version: int


@dataclass(frozen=True)
class NewNote:
    """The note a SUPERSEDE creates; columns code decides (``fused_fields``) and the text."""

    id: str
    content: str
    type: str
    importance: float = 0.5
    access_count: int = 0
    consolidation_generation: int = 1
    last_accessed_at: datetime | None = None
    is_auto_generated: bool = True
    protection: str = "standard"
    comments: str | None = None
    reason: str = ""  # the operation log's reason for the insert (else the change's)
    lineage_conversation_ids: tuple[str, ...] = ()  # see ``Note``
    # The conversation it was said in (a host's ``remember``); a run's fusion has none of its own.
    source_conversation_id: str | None = None
    # A fusion states its sources' facts, none newer than the newest source: its created_at
    # (capped at the write's time), so the policy's "stated later" compares facts, not the
    # moment a run restated them. None: a new statement, created now.
    stated_at: datetime | None = None
    write_seq: int | None = None  # ``Note.write_seq``: a fusion's is its newest source's
    # A fusion's is the latest of its sources' (``lasting_expiry``); None: never expires.
    expires_at: datetime | None = None


def stated_at(note: NewNote, now: datetime) -> datetime:
    """The created_at a new note is written with: its ``stated_at``, never after ``now``."""
    return now if note.stated_at is None else min(note.stated_at, now)


@dataclass(frozen=True)
class Change:
    """One item of a write.

    * ``SUPERSEDE``: ``members`` are revoked into ``new_note`` (inserted) or into ``into_id``
      (an existing note, listed in ``keep`` so its freshness is checked too), with a lineage
      edge ``relation`` each. ``comment`` replaces each member's comments, or is appended
      with ``append_comment``; ``valid_to`` (never before a member's own creation) and
      ``importance`` are set when given. With ``restate``, a member stated after ``into_id``
      (the same fact said again: a duplicate, a statement it holds) dates it at that later
      statement, ``created_at`` and ``write_seq`` (an immutable note keeps its own). With
      ``extend_expiry``, ``into_id`` stands for the members' fact: it expires at the latest of
      its own and their ``expires_at``, never when one of them never does (a retirement never
      shortens a fact's life); at its version, logged, so an undo gives the old one back (an
      immutable note, never archived, keeps its own).
    * ``ARCHIVE``: ``members`` archived, ``comment`` appended; ``entity`` "note" or "example".
    * ``ANNOTATE``: ``flags`` added to and ``comment`` appended to every member.

    ``reason`` goes to the operation log; ``confidence`` and ``detail`` are for reviewers.
    ``owner_gone`` (prune) keeps the item outside the guard's share; ``protected_ok`` (archive's
    long-unused protected notes) lets a protected member be retired, never an immutable one.
    ``expect``: per member, what else its plan decided on ({field: value as read}); a host may
    write those without a version (a renewal, a pin), so a member where one differs at the
    write is stale. A plan-time check: not stored with a proposal (approved later, afresh).
    """

    kind: ChangeKind
    name: str
    members: tuple[Member, ...]
    keep: tuple[Member, ...] = ()
    new_note: NewNote | None = None
    into_id: str | None = None
    relation: str = ""
    reason: str = ""
    comment: str = ""
    append_comment: bool = False
    valid_to: datetime | None = None
    importance: float | None = None
    flags: tuple[str, ...] = ()
    entity: str = "note"
    confidence: float | None = None
    owner_gone: bool = False
    protected_ok: bool = False
    restate: bool = False
    extend_expiry: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    expect: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def target_id(self) -> str | None:
        return self.new_note.id if self.new_note is not None else self.into_id

    @property
    def edits_into(self) -> bool:
        """Whether the write changes the existing note kept (``restate``, ``extend_expiry``)."""
        return self.into_id is not None and (self.restate or self.extend_expiry)

    @property
    def retires(self) -> bool:
        return self.kind in (ChangeKind.SUPERSEDE, ChangeKind.ARCHIVE)

    def ids(self) -> list[str]:
        return [m.id for m in (*self.members, *self.keep)]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind.value, "name": self.name,
            "members": [[m.id, m.version] for m in self.members],
            "keep": [[m.id, m.version] for m in self.keep],
            "into_id": self.into_id, "relation": self.relation, "reason": self.reason,
            "comment": self.comment, "append_comment": self.append_comment,
            "valid_to": _iso(self.valid_to), "importance": self.importance,
            "flags": list(self.flags), "entity": self.entity, "confidence": self.confidence,
            "owner_gone": self.owner_gone, "protected_ok": self.protected_ok,
            "restate": self.restate, "extend_expiry": self.extend_expiry,
            "detail": self.detail, "new_note": None,
        }
        if self.new_note is not None:
            n = self.new_note
            out["new_note"] = {**n.__dict__, "last_accessed_at": _iso(n.last_accessed_at),
                               "stated_at": _iso(n.stated_at), "expires_at": _iso(n.expires_at)}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Change:
        raw = data.get("new_note")
        new = None
        if raw is not None:
            new = NewNote(**{**raw, "last_accessed_at": _when(raw.get("last_accessed_at")),
                             "stated_at": _when(raw.get("stated_at")),
                             "expires_at": _when(raw.get("expires_at")),
                             "lineage_conversation_ids": tuple(
                                 raw.get("lineage_conversation_ids") or ())})
        return cls(
            kind=ChangeKind(data["kind"]), name=data["name"],
            members=tuple(Member(i, int(v)) for i, v in data["members"]),
            keep=tuple(Member(i, int(v)) for i, v in data.get("keep", [])),
            new_note=new, into_id=data.get("into_id"), relation=data.get("relation", ""),
            reason=data.get("reason", ""), comment=data.get("comment", ""),
            append_comment=bool(data.get("append_comment")),
            valid_to=_when(data.get("valid_to")), importance=data.get("importance"),
            flags=tuple(data.get("flags", ())), entity=data.get("entity", "note"),
            confidence=data.get("confidence"), owner_gone=bool(data.get("owner_gone")),
            protected_ok=bool(data.get("protected_ok")), restate=bool(data.get("restate")),
            extend_expiry=bool(data.get("extend_expiry")),
            detail=dict(data.get("detail") or {}),
        )


@dataclass
class ItemResult:
    """What the write did with one change."""

    change: Change
    status: ItemStatus
    stale_ids: list[str] = field(default_factory=list)
    reason: str = ""  # why it was guarded

    @property
    def applied(self) -> bool:
        return self.status in (ItemStatus.APPLIED, ItemStatus.DRY_RUN)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None

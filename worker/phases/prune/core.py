"""Pure planning for prune: which notes are orphans, why, and whether the model may be asked."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from worker.domain.types import Note, Protection
from worker.store.repositories.references import EntityRecord

ERASURE = "erasure"
UNKNOWN = "unknown"
# What a checker returns for an id absent from a host table whose owner declared that absence
# means deleted (DREAM_PRUNE__ABSENCE_MEANS_DELETED); the only way "missing" is ever dead.
ABSENT = EntityRecord(status="missing", deleted=True)

# Reference kinds in the order a comment names them.
REF_ORDER = ("agent", "user", "company", "conversation")
# The entities that own a whole scope: one recorded decision about them covers every note.
OWNER_KINDS = ("agent", "user", "company")


@dataclass(frozen=True)
class DeadReference:
    kind: str
    entity_id: str
    state: str  # missing | disabled | deleted | erased (or a host status other than active)
    # A conversation the note did not come from itself but a note it was fused from did
    # (``Note.lineage_conversation_ids``): its text carries that conversation's facts too.
    inherited: bool = False

    @property
    def recorded(self) -> bool:
        """The entity's own record says it is gone (not merely absent from a table)."""
        return self.state != "missing"

    def describe(self) -> str:
        subject = ("source conversation of a note it was fused from" if self.inherited
                   else "source conversation" if self.kind == "conversation"
                   else f"referenced {self.kind}")
        if self.state == "missing":
            return f"{subject} no longer exists"
        if self.state == "erased":
            return f"{subject} was erased"
        return f"{subject} is {self.state}"


@dataclass
class Orphan:
    note: Note
    dead: list[DeadReference] = field(default_factory=list)

    @property
    def only_conversation(self) -> bool:
        """Only the source conversation is gone, and not for privacy reasons: a model may keep it."""
        return all(d.kind == "conversation" for d in self.dead) and not any(
            d.state == "erased" for d in self.dead
        )

    @property
    def inherited(self) -> bool:
        """A conversation one of its sources came from is gone (a fused note): archiving it
        gives back the sources that came from elsewhere (``prune.lineage``)."""
        return any(d.inherited for d in self.dead)

    @property
    def for_conversation(self) -> bool:
        """Archived for a gone conversation (its own or a source's), not with its whole scope:
        what was retired into it and came from elsewhere is active again (``prune.lineage``)."""
        return not self.owner_recorded_gone and any(d.kind == "conversation" for d in self.dead)

    @property
    def owner_recorded_gone(self) -> bool:
        """The scope's agent, user or company is recorded disabled/deleted: explicit evidence
        about the whole scope, so the blast-radius share does not apply to it (R20)."""
        return any(d.kind in OWNER_KINDS and d.recorded for d in self.dead)

    def comment(self, when: datetime) -> str:
        reasons = "; ".join(d.describe() for d in self.dead)
        return f"archived by prune on {when.date().isoformat()}: {reasons}"


def references_of(note: Note) -> dict[str, str]:
    """Every entity the note points at, by kind in REF_ORDER (None values left out)."""
    refs = {"agent": note.scope.agent_id, "user": note.scope.user_id,
            "company": note.scope.company_id, "conversation": note.source_conversation_id}
    return {k: v for k, v in refs.items() if v is not None}


def lineage_references(note: Note) -> list[str]:
    """The conversations of the notes ``note`` was fused from that are not its own."""
    return [c for c in note.lineage_conversation_ids if c != note.source_conversation_id]


def dead_conversations(records: dict[str, dict[str, EntityRecord | None]]) -> set[str]:
    """The conversations among ``records`` that are gone (positive evidence only)."""
    return {i for i, r in records.get("conversation", {}).items()
            if reference_state("conversation", r) not in (None, UNKNOWN)}


def as_of(records: dict[str, dict[str, EntityRecord | None]],
          now: datetime) -> dict[str, dict[str, EntityRecord | None]]:
    """``records`` as they stand at ``now``: a record whose only sign of deletion is a
    ``deleted_at`` still to come (a host scheduling a deletion, a wrong year) is not yet
    deleted, as a session stamped ahead of the gate's clock counts only once it has come."""
    def current(record: EntityRecord | None) -> EntityRecord | None:
        if (record is None or record.deleted_at is None or record.deleted_at <= now
                or record.status == "deleted"):
            return record
        return replace(record, deleted=False)
    return {kind: {i: current(r) for i, r in by_id.items()} for kind, by_id in records.items()}


def reference_state(kind: str, record: EntityRecord | None) -> str | None:
    """None when the reference is alive, ``UNKNOWN`` when no record was found, otherwise why it
    is dead. Positive evidence only (R25): an empty registry proves nothing about anyone."""
    if record is None:
        return UNKNOWN
    if record == ABSENT:
        return "missing"
    if kind == "conversation" and record.deleted_reason == ERASURE:
        return "erased"
    if record.deleted or record.status == "deleted":
        return "deleted"
    if record.status != "active":
        return "disabled" if record.status == "disabled" else record.status
    return None


# Protected and immutable notes are never orphans (R23).
_NEVER_ORPHANS = frozenset({Protection.IMMUTABLE.value, Protection.PROTECTED.value})


def _states(records: dict[str, dict[str, EntityRecord | None]]) -> dict[str, dict[str, str | None]]:
    """``reference_state`` of every record, once per entity: a batch's notes share their
    agent, user and company, and often a conversation."""
    return {kind: {entity_id: reference_state(kind, record) for entity_id, record in by_id.items()}
            for kind, by_id in records.items()}


def find_orphans(
    notes: list[Note], records: dict[str, dict[str, EntityRecord | None]]
) -> list[Orphan]:
    """Notes with at least one dead reference, each listed once with all of them: a fused
    note's references include the conversations of the notes it was fused from.

    Protected and immutable notes are never orphans (R23), whatever they reference.
    """
    states = _states(records)
    orphans = []
    for note in notes:
        if note.protection in _NEVER_ORPHANS:
            continue
        dead = []
        refs = [(kind, entity_id, False) for kind, entity_id in references_of(note).items()]
        refs += [("conversation", c, True) for c in lineage_references(note)]
        for kind, entity_id, inherited in refs:  # in REF_ORDER, then the fused-from ones
            # An id without a record is UNKNOWN, like a record of None.
            state = states.get(kind, {}).get(entity_id, UNKNOWN)
            if state is not None and state != UNKNOWN:
                dead.append(DeadReference(kind, entity_id, state, inherited))
        if dead:
            orphans.append(Orphan(note, dead))
    return orphans


def count_unknown(
    notes: list[Note], records: dict[str, dict[str, EntityRecord | None]]
) -> dict[str, int]:
    """Notes per kind whose referenced entity has no record at all (counted, never retired)."""
    states = _states(records)
    counts = dict.fromkeys(REF_ORDER, 0)
    for note in notes:
        for kind, entity_id in references_of(note).items():
            if states.get(kind, {}).get(entity_id, UNKNOWN) == UNKNOWN:
                counts[kind] += 1
    return counts


def count_by_kind(orphans: list[Orphan]) -> dict[str, int]:
    """Orphaned notes per dead reference kind (a note with three dead references counts thrice)."""
    counts = dict.fromkeys(REF_ORDER, 0)
    for orphan in orphans:
        for kind in {d.kind for d in orphan.dead}:
            counts[kind] += 1
    return counts

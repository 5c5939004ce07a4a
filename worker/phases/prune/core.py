"""Pure planning for prune: which notes are orphans, why, and whether the model may be asked."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from worker.domain.types import Note, Protection
from worker.store.repositories.references import EntityRecord

ERASURE = "erasure"

# Reference kinds in the order a comment names them.
REF_ORDER = ("agent", "user", "company", "conversation")


@dataclass(frozen=True)
class DeadReference:
    kind: str
    entity_id: str
    state: str  # missing | disabled | deleted | erased

    def describe(self) -> str:
        subject = "source conversation" if self.kind == "conversation" else f"referenced {self.kind}"
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

    def comment(self, when: datetime) -> str:
        reasons = "; ".join(d.describe() for d in self.dead)
        return f"archived by prune on {when.date().isoformat()}: {reasons}"


def references_of(note: Note) -> dict[str, str]:
    """Every entity the note points at, by kind (None values left out)."""
    refs = {"agent": note.scope.agent_id, "user": note.scope.user_id,
            "company": note.scope.company_id, "conversation": note.source_conversation_id}
    return {k: v for k, v in refs.items() if v is not None}


def reference_state(kind: str, record: EntityRecord | None) -> str | None:
    """None when the reference is alive; otherwise why it is dead."""
    if record is None:
        return "missing"
    if kind == "conversation" and record.deleted_reason == ERASURE:
        return "erased"
    if record.deleted or record.status == "deleted":
        return "deleted"
    if record.status != "active":
        return "disabled" if record.status == "disabled" else record.status
    return None


def find_orphans(
    notes: list[Note], records: dict[str, dict[str, EntityRecord | None]]
) -> list[Orphan]:
    """Notes with at least one dead reference, each listed once with all of them.

    Protected and immutable notes are never orphans (R23), whatever they reference.
    """
    orphans = []
    for note in notes:
        if note.protection in (Protection.IMMUTABLE.value, Protection.PROTECTED.value):
            continue
        dead = []
        for kind in REF_ORDER:
            entity_id = references_of(note).get(kind)
            if entity_id is None:
                continue
            state = reference_state(kind, records.get(kind, {}).get(entity_id))
            if state is not None:
                dead.append(DeadReference(kind, entity_id, state))
        if dead:
            orphans.append(Orphan(note, dead))
    return orphans


def count_by_kind(orphans: list[Orphan]) -> dict[str, int]:
    """Orphaned notes per dead reference kind (a note with three dead references counts thrice)."""
    counts = dict.fromkeys(REF_ORDER, 0)
    for orphan in orphans:
        for kind in {d.kind for d in orphan.dead}:
            counts[kind] += 1
    return counts

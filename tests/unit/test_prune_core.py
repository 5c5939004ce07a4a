"""Pure prune planning: which reference states are dead and how the archive comment reads."""

from __future__ import annotations

import pytest

from tests.support.factories import NOW
from worker.domain.types import Note, Scope
from worker.phases.prune.core import count_by_kind, find_orphans, reference_state
from worker.store.repositories.references import EntityRecord

ACTIVE = EntityRecord("active", False)


@pytest.mark.parametrize(("kind", "record", "expected"), [
    ("agent", None, "missing"),
    ("agent", ACTIVE, None),
    ("agent", EntityRecord("disabled", False), "disabled"),
    ("user", EntityRecord("deleted", True), "deleted"),
    ("user", EntityRecord("active", True), "deleted"),  # deleted_at set, status not updated
    ("conversation", EntityRecord("deleted", True, "erasure"), "erased"),
    ("conversation", EntityRecord("deleted", True, "retention"), "deleted"),
])
def test_reference_state(kind: str, record: EntityRecord | None, expected: str | None) -> None:
    """Missing, disabled and deleted are dead; an erasure is its own, stronger state."""
    assert reference_state(kind, record) == expected


def _note(nid: str, conversation: str | None = None, protection: str = "standard") -> Note:
    return Note(id=nid, scope=Scope("a", "u", None), content="x", protection=protection,
                source_conversation_id=conversation)


def test_orphan_lists_every_dead_reference_in_order() -> None:
    """One orphan per note, naming agent, user and conversation in that order with the date."""
    records = {"agent": {"a": EntityRecord("disabled", False)}, "user": {"u": None},
               "conversation": {"c": None}}
    [orphan] = find_orphans([_note("n", "c")], records)
    assert orphan.comment(NOW) == (
        "archived by prune on 2026-06-01: referenced agent is disabled; "
        "referenced user no longer exists; source conversation no longer exists")
    assert not orphan.only_conversation
    assert count_by_kind([orphan]) == {"agent": 1, "user": 1, "company": 0, "conversation": 1}


def test_only_conversation_orphans_may_be_reviewed_unless_erased() -> None:
    """A note missing only its conversation may go to the model; an erased conversation may not."""
    alive = {"agent": {"a": ACTIVE}, "user": {"u": ACTIVE}}
    gone = find_orphans([_note("n", "c")], {**alive, "conversation": {"c": None}})
    erased = find_orphans([_note("n", "c")], {
        **alive, "conversation": {"c": EntityRecord("deleted", True, "erasure")}})
    assert gone[0].only_conversation and not erased[0].only_conversation


def test_protected_and_immutable_notes_are_never_orphans() -> None:
    """R23: prune never plans to archive protected or immutable notes."""
    records = {"agent": {"a": None}}
    notes = [_note("p", protection="protected"), _note("i", protection="immutable"), _note("s")]
    assert [o.note.id for o in find_orphans(notes, records)] == ["s"]

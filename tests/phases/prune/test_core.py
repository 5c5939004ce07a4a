"""Pure prune planning: which reference states are dead and how the archive comment reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.factories import NOW
from worker.domain.types import Note, Scope
from worker.phases.prune.core import (
    ABSENT,
    REF_ORDER,
    count_by_kind,
    count_unknown,
    find_orphans,
    reference_state,
    references_of,
)
from worker.store.repositories.references import EntityRecord

ACTIVE = EntityRecord("active", False)
Records = dict[str, dict[str, EntityRecord | None]]


@pytest.mark.parametrize(("kind", "record", "expected"), [
    # No record at all: unknown, never dead (R25; an empty registry proves nothing).
    ("agent", None, "unknown"),
    # Absent from a host table whose owner declared absence means deleted: dead.
    ("agent", ABSENT, "missing"),
    ("agent", ACTIVE, None),
    ("agent", EntityRecord("disabled", False), "disabled"),
    ("user", EntityRecord("deleted", True), "deleted"),
    ("user", EntityRecord("active", True), "deleted"),  # deleted_at set, status not updated
    ("conversation", EntityRecord("deleted", True, "erasure"), "erased"),
    ("conversation", EntityRecord("deleted", True, "retention"), "deleted"),
])
def test_reference_state(kind: str, record: EntityRecord | None, expected: str | None) -> None:
    """Declared-absent, disabled and deleted are dead; an erasure is its own, stronger state;
    no record is unknown."""
    assert reference_state(kind, record) == expected


def _note(nid: str, conversation: str | None = None, protection: str = "standard") -> Note:
    return Note(id=nid, scope=Scope("a", "u", None), content="x", protection=protection,
                source_conversation_id=conversation)


def test_orphan_lists_every_dead_reference_in_order() -> None:
    """One orphan per note, naming agent, user and conversation in that order with the date."""
    records: Records = {"agent": {"a": EntityRecord("disabled", False)}, "user": {"u": ABSENT},
                        "conversation": {"c": ABSENT}}
    [orphan] = find_orphans([_note("n", "c")], records)
    assert orphan.comment(NOW) == (
        "archived by prune on 2026-06-01: referenced agent is disabled; "
        "referenced user no longer exists; source conversation no longer exists")
    assert not orphan.only_conversation
    assert count_by_kind([orphan]) == {"agent": 1, "user": 1, "company": 0, "conversation": 1}


def test_only_conversation_orphans_may_be_reviewed_unless_erased() -> None:
    """A note missing only its conversation may go to the model; an erased conversation may not."""
    alive: Records = {"agent": {"a": ACTIVE}, "user": {"u": ACTIVE}}
    gone = find_orphans([_note("n", "c")], {**alive, "conversation": {"c": ABSENT}})
    erased = find_orphans([_note("n", "c")], {
        **alive, "conversation": {"c": EntityRecord("deleted", True, "erasure")}})
    assert gone[0].only_conversation and not erased[0].only_conversation


def test_protected_and_immutable_notes_are_never_orphans() -> None:
    """R23: prune never plans to archive protected or immutable notes."""
    records: Records = {"agent": {"a": EntityRecord("deleted", True)}}
    notes = [_note("p", protection="protected"), _note("i", protection="immutable"), _note("s")]
    assert [o.note.id for o in find_orphans(notes, records)] == ["s"]


def test_unknown_references_are_counted_never_orphaned() -> None:
    """R25: a note whose agent, user and conversation have no record is no orphan; each unknown
    reference is counted per kind."""
    notes = [_note("n1", "c"), _note("n2")]
    records: dict[str, dict[str, EntityRecord | None]] = {
        "agent": {"a": None}, "user": {"u": ACTIVE}, "conversation": {"c": None}}
    assert find_orphans(notes, records) == []
    assert count_unknown(notes, records) == {"agent": 2, "user": 0, "company": 0,
                                             "conversation": 1}


@pytest.mark.parametrize(("records", "owner"), [
    # The scope's agent recorded disabled: explicit evidence about the whole scope.
    ({"agent": {"a": EntityRecord("disabled", False)}}, True),
    # The user recorded deleted: the same.
    ({"agent": {"a": ACTIVE}, "user": {"u": EntityRecord("deleted", True)}}, True),
    # The agent merely absent from a host table: evidence by absence, guarded by the share.
    ({"agent": {"a": ABSENT}}, False),
    # Only the conversation is gone: one note at a time, guarded by the share.
    ({"agent": {"a": ACTIVE}, "user": {"u": ACTIVE},
      "conversation": {"c": EntityRecord("deleted", True)}}, False),
])
def test_owner_recorded_gone(records: dict[str, dict[str, EntityRecord | None]],
                             owner: bool) -> None:
    """Which orphans the blast-radius share leaves alone (R20): only a scope owner recorded
    disabled or deleted."""
    [orphan] = find_orphans([_note("n", "c")], records)
    assert orphan.owner_recorded_gone is owner


_RECORDS = [None, ABSENT, ACTIVE, EntityRecord("disabled", False), EntityRecord("deleted", True),
            EntityRecord("suspended", False), EntityRecord("deleted", True, "erasure")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from(["c1", "c2", None]),
                          st.sampled_from(["standard", "protected", "immutable"])), max_size=8),
       st.dictionaries(st.sampled_from(["agent", "user", "company", "conversation"]),
                       st.dictionaries(st.sampled_from(["a", "b", "u", "c1", "c2"]),
                                       st.sampled_from(_RECORDS), max_size=4), max_size=4))
def test_states_read_once_per_entity_match_each_notes_own_reading(
    shape: list[tuple[str | None, str | None, str]],
    records: dict[str, dict[str, EntityRecord | None]],
) -> None:
    """Orphans and unknown counts equal what reading every reference of every note on its own
    gives, whichever ids lack a record, have None, or are dead."""
    notes = [Note(id=f"n{k}", scope=Scope(agent or "", "u", None), content="x",
                  protection=protection, source_conversation_id=conversation)
             for k, (agent, conversation, protection) in enumerate(shape)]
    expected_orphans, expected_unknown = [], dict.fromkeys(REF_ORDER, 0)
    for note in notes:
        states = {kind: reference_state(kind, records.get(kind, {}).get(entity_id))
                  for kind, entity_id in references_of(note).items()}
        dead = [(kind, references_of(note)[kind], state) for kind, state in states.items()
                if state not in (None, "unknown")]
        if dead and note.protection == "standard":
            expected_orphans.append((note.id, dead))
        for kind, state in states.items():
            expected_unknown[kind] += state == "unknown"
    orphans = [(o.note.id, [(d.kind, d.entity_id, d.state) for d in o.dead])
               for o in find_orphans(notes, records)]
    assert orphans == expected_orphans
    assert count_unknown(notes, records) == expected_unknown

"""`remember` records the conversation a note was said in.

Before, a host's note had no source conversation: `dream erase --conversation C` found none of
the notes an agent remembered in C (only `--note`, id by id, could take them). A note now
carries the conversation it was given with; an UPDATE also carries the conversations of the
note it restates. A note said in a conversation never stands in for a statement made in
another or in none (no NOOP on it, no UPDATE of it): the fact is that statement's own note,
and erasing one conversation leaves what was said elsewhere. SQLite and PostgreSQL.
"""

from __future__ import annotations

import pytest

from tests.support.safety import note_states
from worker.app import App
from worker.domain.types import Scope
from worker.host.errors import Invalid
from worker.host.remember import remember
from worker.safety.erase import erase
from worker.store.models import NoteRow

SCOPE = Scope("agent-1", "u1")
BASE = "The user deploys the billing service on Fridays after the weekly review."
LONGER = ("The user deploys the billing service on Fridays after the weekly review, and always "
          "announces the release in the team channel with the changelog first.")


def _row(app: App, note_id: str) -> NoteRow:
    with app.uow() as uow:
        row = uow.session.get(NoteRow, note_id)
        assert row is not None
        return row


def test_erasing_a_conversation_takes_the_notes_remembered_in_it(app: App) -> None:
    tea = remember(app, SCOPE, "User drinks green tea every morning", conversation_id="c1")
    bike = remember(app, SCOPE, "User cycles to the office", conversation_id="c2")
    assert _row(app, tea.id).source_conversation_id == "c1"
    result = erase(app, conversation_id="c1")
    assert result.note_ids == [tea.id]
    assert set(note_states(app)) == {bike.id}


def test_a_statement_in_no_conversation_is_its_own_note_beside_a_conversations(
        app: App) -> None:
    """Said in c1, then said longer with no conversation named: before, an UPDATE of c1's
    note, whose erasure then took the longer statement too, though it was made outside c1.
    Now its own note, an ADD; erasing c1 leaves it."""
    base = remember(app, SCOPE, BASE, conversation_id="c1")
    longer = remember(app, SCOPE, LONGER)
    assert longer.action == "ADD" and longer.superseded_id is None
    assert "was said in conversation c1 and this in no conversation" in longer.reason
    result = erase(app, conversation_id="c1")
    assert (result.note_ids, result.derived_ids) == ([base.id], [])
    assert {i: n["status"] for i, n in note_states(app).items()} == {longer.id: "active"}


def test_an_update_of_a_note_of_no_conversation_records_the_new_one(app: App) -> None:
    """Said in no conversation, then longer in c1: an UPDATE (the note of no conversation
    stands in for any statement), the longer note of c1; erasing c1 takes it and gives the
    first back."""
    base = remember(app, SCOPE, BASE)
    longer = remember(app, SCOPE, LONGER, conversation_id="c1")
    assert longer.action == "UPDATE" and longer.superseded_id == base.id
    assert _row(app, longer.id).source_conversation_id == "c1"
    result = erase(app, conversation_id="c1")
    assert result.note_ids == [longer.id]
    assert {i: n["status"] for i, n in note_states(app).items()} == {base.id: "active"}


def test_an_update_in_one_conversation_is_undone_by_erasing_it(app: App) -> None:
    """Both in c1: an UPDATE; erasing c1 takes both."""
    base = remember(app, SCOPE, BASE, conversation_id="c1")
    longer = remember(app, SCOPE, LONGER, conversation_id="c1")
    assert longer.action == "UPDATE"
    result = erase(app, conversation_id="c1")
    assert sorted(result.note_ids) == sorted([base.id, longer.id])
    assert note_states(app) == {}


@pytest.mark.parametrize("text", [BASE, LONGER, BASE.lower()])
def test_a_fact_said_in_another_conversation_is_its_own_note(app: App, text: str) -> None:
    """The same words (or longer, or differently cased) said in c2 after c1: before, a NOOP
    on c1's note (or an UPDATE of it), and erasing c1 took the fact c2 said too. Now c2's own
    note, an ADD; erasing c1 leaves it active."""
    base = remember(app, SCOPE, BASE, conversation_id="c1")
    again = remember(app, SCOPE, text, conversation_id="c2")
    assert again.action == "ADD" and again.id != base.id
    assert "was said in conversation c1 and this in conversation c2" in again.reason
    assert _row(app, again.id).source_conversation_id == "c2"
    erase(app, conversation_id="c1")
    assert {i: n["status"] for i, n in note_states(app).items()} == {again.id: "active"}


def test_within_one_conversation_a_fact_said_again_is_a_noop(app: App) -> None:
    """Said again in c1: a NOOP. Said with no conversation named: its own note (erasing c1
    must leave it); said again then, a NOOP on that one."""
    base = remember(app, SCOPE, BASE, conversation_id="c1")
    assert remember(app, SCOPE, BASE, conversation_id="c1").action == "NOOP"
    own = remember(app, SCOPE, BASE)
    assert own.action == "ADD" and own.id != base.id
    assert remember(app, SCOPE, BASE).action == "NOOP"
    assert remember(app, SCOPE, BASE, conversation_id="c2").id == own.id  # it stands in
    assert set(note_states(app)) == {base.id, own.id}


@pytest.mark.parametrize("bad", ["", " c1", "c\n1", "x" * 300])
def test_a_bad_conversation_id_is_refused_and_writes_nothing(app: App, bad: str) -> None:
    with pytest.raises(Invalid, match="^conversation id "):
        remember(app, SCOPE, "User drinks green tea every morning", conversation_id=bad)
    assert note_states(app) == {}

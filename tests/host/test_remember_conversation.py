"""`remember` records the conversation a note was said in.

Before, a host's note had no source conversation: `dream erase --conversation C` found none of
the notes an agent remembered in C (only `--note`, id by id, could take them). A note now
carries the conversation it was given with; an UPDATE also carries the conversations of the
note it restates. A note said in another conversation never stands in for a statement (no
NOOP on it, no UPDATE of it): the fact is that conversation's own note, and erasing one
conversation leaves what the other said. SQLite and PostgreSQL.
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


def test_an_update_carries_the_conversation_of_the_note_it_restates(app: App) -> None:
    """Said in c1, then said longer with no conversation named: the longer note records c1
    among the conversations it carries facts of, and erasing c1 takes both (the longer note
    repeats its text)."""
    base = remember(app, SCOPE, BASE, conversation_id="c1")
    longer = remember(app, SCOPE, LONGER)
    assert longer.action == "UPDATE" and longer.superseded_id == base.id
    row = _row(app, longer.id)
    assert (row.source_conversation_id, row.lineage_conversation_ids) == (None, ["c1"])
    result = erase(app, conversation_id="c1")
    assert (result.note_ids, result.derived_ids) == ([base.id], [longer.id])
    assert note_states(app) == {}


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
    assert "said in another conversation" in again.reason
    assert _row(app, again.id).source_conversation_id == "c2"
    erase(app, conversation_id="c1")
    assert {i: n["status"] for i, n in note_states(app).items()} == {again.id: "active"}


def test_within_one_conversation_a_fact_said_again_is_a_noop(app: App) -> None:
    base = remember(app, SCOPE, BASE, conversation_id="c1")
    assert remember(app, SCOPE, BASE, conversation_id="c1").action == "NOOP"
    assert remember(app, SCOPE, BASE).action == "NOOP"  # no conversation named: any note
    assert set(note_states(app)) == {base.id}


@pytest.mark.parametrize("bad", ["", " c1", "c\n1", "x" * 300])
def test_a_bad_conversation_id_is_refused_and_writes_nothing(app: App, bad: str) -> None:
    with pytest.raises(Invalid, match="^conversation id "):
        remember(app, SCOPE, "User drinks green tea every morning", conversation_id=bad)
    assert note_states(app) == {}

"""`remember` records the conversation a note was said in.

Before, a host's note had no source conversation: `dream erase --conversation C` found none of
the notes an agent remembered in C (only `--note`, id by id, could take them). A note now
carries the conversation it was given with; an UPDATE also carries the conversations of the
note it restates. SQLite and PostgreSQL.
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
    """Said in c1, then said longer in c2: the longer note is c2's and records c1 among the
    conversations it carries facts of. Erasing c2 gives the c1 note back; erasing c1 takes
    both (the longer note repeats its text)."""
    base = remember(app, SCOPE, BASE, conversation_id="c1")
    longer = remember(app, SCOPE, LONGER, conversation_id="c2")
    assert longer.action == "UPDATE" and longer.superseded_id == base.id
    row = _row(app, longer.id)
    assert (row.source_conversation_id, row.lineage_conversation_ids) == ("c2", ["c1"])
    result = erase(app, conversation_id="c2")
    assert (result.note_ids, result.restored_ids) == ([longer.id], [base.id])
    assert {i: n["status"] for i, n in note_states(app).items()} == {base.id: "active"}


def test_erasing_the_first_conversation_takes_the_update_with_it(app: App) -> None:
    base = remember(app, SCOPE, BASE, conversation_id="c1")
    longer = remember(app, SCOPE, LONGER, conversation_id="c2")
    result = erase(app, conversation_id="c1")
    assert (result.note_ids, result.derived_ids) == ([base.id], [longer.id])
    assert note_states(app) == {}


@pytest.mark.parametrize("bad", ["", " c1", "c\n1", "x" * 300])
def test_a_bad_conversation_id_is_refused_and_writes_nothing(app: App, bad: str) -> None:
    with pytest.raises(Invalid, match="^conversation id "):
        remember(app, SCOPE, "User drinks green tea every morning", conversation_id=bad)
    assert note_states(app) == {}

"""`remember(manual=False)`: an agent's own note, which dreams maintain.

A remembered note is a person's by default (R26: no dream retires it; a conflict it would lose
is flagged on both notes). An agent that remembers its own observations through MCP or the API
had no other kind, so a dream could never retire the value it said first: every change of a
preference stayed two active notes. ``manual=False`` (MCP and API ``manual: false``, `dream
notes add --auto`) writes an auto-generated note; an UPDATE of a person's note stays a
person's, as a fusion with a manual source does. SQLite and PostgreSQL.
"""

from __future__ import annotations

from tests.phases.contradictions.test_restate import modes
from tests.phases.contradictions.test_service import rows, with_stub
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.host.remember import remember
from worker.runs import service

SCOPE = Scope("agent-1")
DARK = "User prefers dark mode in the editor and the terminal"
LIGHT = "User prefers light mode in the editor and the terminal"
BASE = "The user deploys the billing service on Fridays after the weekly review."
LONGER = ("The user deploys the billing service on Fridays after the weekly review, and always "
          "announces the release in the team channel with the changelog first.")


def _dream(app: App) -> None:
    run_id = service.create_run(app, SCOPE, force=True, phases=["contradictions"],
                                clock=utcnow())
    assert run_id
    service.execute_run(app, run_id)


def test_an_agents_changed_value_is_retired_by_the_next_dream(app: App,
                                                               llm_stub: LLMStub) -> None:
    dark = remember(app, SCOPE, DARK, "Preference", manual=False)
    light = remember(app, SCOPE, LIGHT, "Preference", manual=False)
    assert (dark.action, light.action) == ("ADD", "ADD")
    with_stub(app, llm_stub, modes)
    _dream(app)
    notes = rows(app)
    assert notes[light.id].status == "active" and notes[light.id].is_auto_generated
    assert (notes[dark.id].status, notes[dark.id].consolidated_into_id) == ("revoked", light.id)


def test_a_persons_notes_are_only_flagged(app: App, llm_stub: LLMStub) -> None:
    """The default, as before: both stay active, each flagged for review."""
    dark = remember(app, SCOPE, DARK, "Preference")
    light = remember(app, SCOPE, LIGHT, "Preference")
    with_stub(app, llm_stub, modes)
    _dream(app)
    notes = rows(app)
    assert notes[dark.id].status == notes[light.id].status == "active"
    assert not notes[dark.id].is_auto_generated
    assert notes[dark.id].flags and notes[light.id].flags


def test_an_update_of_a_persons_note_stays_a_persons(app: App) -> None:
    base = remember(app, SCOPE, BASE)
    longer = remember(app, SCOPE, LONGER, manual=False)
    assert longer.action == "UPDATE" and longer.superseded_id == base.id
    assert rows(app)[longer.id].is_auto_generated is False
    other = Scope("agent-2")
    own = remember(app, other, BASE, manual=False)
    own_longer = remember(app, other, LONGER, manual=False)
    assert own_longer.action == "UPDATE" and own_longer.superseded_id == own.id
    assert rows(app)[own_longer.id].is_auto_generated is True

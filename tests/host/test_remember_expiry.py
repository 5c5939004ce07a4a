"""`remember` never stands a new statement in for an expired note (SQLite and PostgreSQL).

A note past its ``expires_at`` is archive's to take. Before, the host saying its text again
was a NOOP on it (identical text), or a NOOP or an UPDATE by similarity: the statement just
made went with the expired note into the next run's archive. Now it is a note of its own
(ADD), and the expired note is left to archive.
"""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import select

from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.host.remember import remember
from worker.ingest import import_notes
from worker.runs import service
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")
TEXT = "The standup starts at 11:00 in the small meeting room on the second floor"
# Seven of its eight content words: a NOOP by similarity (Jaccard ≥ 0.85) on a live note.
NEAR = "The standup starts at 11:00 in the small meeting room on the second floor today"


def _stored(app: App, expires_in: timedelta) -> None:
    import_notes(app, [json.dumps({
        "id": "old", "agent_id": "agent-1", "content": TEXT, "type": "Context",
        "created_at": (utcnow() - timedelta(days=20)).isoformat(),
        "expires_at": (utcnow() + expires_in).isoformat()})])


def _statuses(app: App) -> dict[str, str]:
    with app.uow() as uow:
        return {r.id: r.status for r in uow.session.scalars(select(NoteRow))}


def test_the_same_text_said_again_after_its_note_expired_is_a_note_of_its_own(app: App) -> None:
    _stored(app, timedelta(days=-1))
    said = remember(app, SCOPE, TEXT, manual=False)
    assert said.action == "ADD" and said.id != "old"
    run_id = service.create_run(app, SCOPE, force=True, clock=utcnow(), phases=["archive"])
    assert run_id
    service.execute_run(app, run_id)
    assert _statuses(app) == {"old": "archived", said.id: "active"}


def test_a_similar_statement_neither_noops_on_nor_updates_an_expired_note(app: App) -> None:
    _stored(app, timedelta(days=-1))
    said = remember(app, SCOPE, NEAR, manual=False)
    assert said.action == "ADD", said.reason
    assert "expired" in said.reason
    assert _statuses(app) == {"old": "active", said.id: "active"}


def test_a_note_still_live_takes_the_statement_as_before(app: App) -> None:
    _stored(app, timedelta(days=3))
    assert (remember(app, SCOPE, TEXT, manual=False).action, remember(app, SCOPE, TEXT, manual=False).id) == ("NOOP", "old")
    assert remember(app, SCOPE, NEAR, manual=False).action in ("NOOP", "UPDATE")

"""A note said again is the same note: a keep-apart (a reviewer's declined merge) that bound it
still holds. Saying it again (a NOOP `remember`, an import line of its text dated later) dates
it at the new statement, a new version; before, that version ended the decision, the next dream
merged the notes, `fusion_candidates` offered them again and the export left the set out
(SQLite and PostgreSQL)."""

from __future__ import annotations

import json

from tests.review.test_service import _cli, _merge, _propose
from tests.support.factories import NOW, add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.export import export_notes
from worker.host.candidates import fusion_candidates
from worker.host.fusion import keep_apart
from worker.host.remember import remember
from worker.runs import service

SCOPE = Scope("agent-1")
TEXT = "User owns a red bicycle"
TWINS = [{"id": "t1", "content": TEXT, "created_at": "2020-01-01T10:00:00+00:00"},
         {"id": "t2", "content": TEXT, "created_at": "2020-01-02T10:00:00+00:00"},
         {"id": "t3", "content": "User drinks green tea"}]
AGAIN = {"content": TEXT, "created_at": "2020-03-01T10:00:00+00:00"}


def _consolidate(app: App) -> dict[str, str]:
    run_id = service.create_run(app, SCOPE, force=True, phases=["consolidate"], clock=NOW)
    assert run_id
    service.execute_run(app, run_id)
    return {n["id"]: n["status"] for n in map(json.loads, export_notes(app))}


def _kept_apart(app: App) -> list[list[str]]:
    return [s for line in export_notes(app) for s in json.loads(line)["kept_apart"]]


def _versions(app: App) -> dict[str, int]:
    with app.uow() as uow:
        return {n.id: n.version for n in uow.notes.get_many(["t1", "t2"])}


def test_a_note_remembered_again_stays_kept_apart(app: App) -> None:
    """The host says the text again (NOOP): the note it matched is a version up, the keep-apart
    still exported, never offered, and the rule judge leaves the identical twins apart."""
    add_notes(app, *TWINS)
    keep_apart(app, ["t1", "t2"])
    assert remember(app, SCOPE, TEXT).action == "NOOP"
    assert sorted(_versions(app).values()) == [1, 2]
    assert _kept_apart(app) == [["t1", "t2"]]
    assert [c for c in fusion_candidates(app, SCOPE, threshold=0.5) if c["type"] == "pair"] == []
    assert _consolidate(app) == {"t1": "active", "t2": "active", "t3": "active"}


def test_a_note_an_import_states_again_stays_kept_apart(app: App) -> None:
    """A later-dated line of the same text ("import: stated again") dates both at it."""
    add_notes(app, *TWINS)
    keep_apart(app, ["t1", "t2"])
    add_notes(app, AGAIN)
    assert _versions(app) == {"t1": 2, "t2": 2}  # each note holding the text
    assert _kept_apart(app) == [["t1", "t2"]]
    assert _consolidate(app) == {"t1": "active", "t2": "active", "t3": "active"}


def test_a_declined_merge_holds_for_a_note_stated_again(app: App) -> None:
    """Sibling: a reviewer declined merging the twins; a note said again (import, then
    remember) keeps the no."""
    add_notes(app, *TWINS)
    item = _propose(app, _merge(["t1", "t2"], TEXT))
    assert _cli(app, "review", "decline", str(item), "--agent", "agent-1").exit_code == 0
    add_notes(app, AGAIN)
    assert remember(app, SCOPE, TEXT).action == "NOOP"
    assert _kept_apart(app) == [["t1", "t2"]]
    assert _consolidate(app) == {"t1": "active", "t2": "active", "t3": "active"}

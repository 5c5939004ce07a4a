"""An export taken after a run was undone and the scope dreamt again imports into an empty
store (SQLite and PostgreSQL as the source).

Undo keeps every lineage edge (erasure still follows them afterwards), and the run after it
records the same retirement again: the export listed that edge twice, and the import of the
store's own export refused it ("lineage names parent 'n1' twice"), so the store could no longer
be moved. An edge is exported once, whatever number of runs recorded it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.factories import NOW
from worker.app import App
from worker.cli import main
from worker.domain.types import RunStatus, Scope
from worker.ingest import import_notes
from worker.runs import service
from worker.safety.undo import undo_run

SCOPE = Scope("a1", "u1")
NOTES = [
    {"id": "n1", "agent_id": "a1", "user_id": "u1", "content": "User prefers metric units",
     "created_at": (NOW - timedelta(days=90)).isoformat()},
    {"id": "n2", "agent_id": "a1", "user_id": "u1",
     "content": "User prefers metric units every day", "protection": "immutable",
     "created_at": (NOW - timedelta(days=30)).isoformat()},
]


def _dream(app: App) -> str:
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW, allow_retire=10)
    assert run_id
    assert service.execute_run(app, run_id) == RunStatus.SUCCEEDED.value
    return run_id


def _export(app: App, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    result = CliRunner().invoke(main, ["notes", "export"])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def _by_id(lines: list[str]) -> dict[str, dict[str, Any]]:
    return {o["id"]: o for o in map(json.loads, lines)}


def test_a_store_dreamt_again_after_an_undo_moves_whole(
        app: App, other: App, monkeypatch: pytest.MonkeyPatch) -> None:
    import_notes(app, map(json.dumps, NOTES))
    undo_run(app, _dream(app))
    undone = _export(app, monkeypatch)  # n1 active again, its edge kept
    assert _by_id(undone)["n1"]["status"] == "active"
    _dream(app)
    lines = _export(app, monkeypatch)
    notes = _by_id(lines)
    assert (notes["n1"]["status"], notes["n1"]["consolidated_into_id"]) == ("revoked", "n2")
    (edge,) = notes["n2"]["lineage"]  # recorded by both dreams, written once
    assert (edge["parent_id"], edge["relation"]) == ("n1", "subsumed")
    assert import_notes(other, lines).inserted == 2
    assert _export(other, monkeypatch) == lines


def test_an_export_taken_right_after_the_undo_moves_whole(
        app: App, other: App, monkeypatch: pytest.MonkeyPatch) -> None:
    import_notes(app, map(json.dumps, NOTES))
    undo_run(app, _dream(app))
    lines = _export(app, monkeypatch)
    assert import_notes(other, lines).inserted == 2
    assert _export(other, monkeypatch) == lines

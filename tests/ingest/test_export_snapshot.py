"""A document read in several queries is read from one snapshot (SQLite and PostgreSQL): a
host write or a run committing in another connection between those queries shows in none of
them. Before, `dream notes export` read its notes in one query and their lineage and
keep-apart sets in later ones, so a keep-apart recorded meanwhile named a note the file lacks
and the import of that export was refused; `dream runs show` paired a run's row with steps
written after it was read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.export import export_notes
from worker.host.fusion import keep_apart
from worker.ingest import import_notes
from worker.reporting import run_tree
from worker.runs import service
from worker.store.repositories.notes import NoteRepository
from worker.store.repositories.runs import RunRepository


def test_a_keep_apart_recorded_mid_export_is_not_half_exported(
        app: App, other: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host adds a note and keeps it apart from an exported one after the export read its
    notes: the export is the store as it was before (that import is refused otherwise)."""
    add_notes(app, {"id": "t1", "content": "User owns a red bicycle"},
              {"id": "t3", "content": "User drinks green tea"})
    quiet = list(export_notes(app))
    original = NoteRepository.export_rows

    def racing(self: NoteRepository, *args: Any, **kwargs: Any) -> Iterator[Any]:
        yield from original(self, *args, **kwargs)
        monkeypatch.setattr(NoteRepository, "export_rows", original)  # once
        add_notes(app, {"id": "t2", "content": "User owns a blue bicycle"})
        keep_apart(app, ["t1", "t2"])

    monkeypatch.setattr(NoteRepository, "export_rows", racing)
    lines = list(export_notes(app))
    assert lines == quiet
    assert import_notes(other, lines).inserted == 2
    after = {r["id"]: r["kept_apart"] for r in map(json.loads, export_notes(app))}
    assert after == {"t1": [["t1", "t2"]], "t2": [], "t3": []}


def test_run_show_never_pairs_a_queued_run_with_steps_written_after(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run executes (in another connection) after `runs show` read its row as queued: the
    tree shows the queued run without the steps it wrote since."""
    add_notes(app, {"id": "t1", "content": "User owns a red bicycle"},
              {"id": "t2", "content": "User owns a red bicycle"})
    run_id = service.create_run(app, Scope("agent-1"), force=True)
    assert run_id
    original = RunRepository.steps

    def racing(self: RunRepository, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(RunRepository, "steps", original)  # once
        service.execute_run(app, run_id)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RunRepository, "steps", racing)
    tree = run_tree(app, run_id)
    assert (tree["status"], tree["steps"]) == ("queued", [])
    assert run_tree(app, run_id)["status"] == "succeeded"

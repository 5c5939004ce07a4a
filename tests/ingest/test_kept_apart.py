"""A host's keep-apart travels with `dream notes export` → `dream notes import`: a dream on the
imported store leaves those notes apart, as one on the exporting store does (SQLite and
PostgreSQL); a `kept_apart` entry that names a note it cannot bind is refused, naming the line."""

from __future__ import annotations

import json

import pytest

from tests.support.factories import NOW, add_notes
from tests.support.host_writes import host_sets
from worker.app import App
from worker.domain.types import Scope
from worker.export import export_notes
from worker.host.fusion import keep_apart
from worker.ingest import import_notes
from worker.ingest.jsonl import InputError
from worker.runs import service

SCOPE = Scope("agent-1")
TWINS = [{"id": "t1", "content": "User owns a red bicycle"},
         {"id": "t2", "content": "User owns a red bicycle"},
         {"id": "t3", "content": "User drinks green tea"}]



def _consolidate(app: App) -> dict[str, str]:
    run_id = service.create_run(app, SCOPE, force=True, phases=["consolidate"], clock=NOW)
    assert run_id
    service.execute_run(app, run_id)
    return {n["id"]: n["status"] for n in map(json.loads, export_notes(app))}


def test_a_keep_apart_survives_export_and_import(app: App, other: App) -> None:
    """Identical twins the host kept apart: the rule judge would merge them. Imported, they stay
    apart (before: the imported store's first dream merged them), and the import's own export
    gives the same lines back."""
    add_notes(app, *TWINS)
    keep_apart(app, ["t1", "t2"])
    lines = list(export_notes(app))
    assert json.loads(lines[0])["kept_apart"] == [["t1", "t2"]]
    import_notes(other, lines)
    assert list(export_notes(other)) == lines
    assert _consolidate(other) == {"t1": "active", "t2": "active", "t3": "active"}
    assert _consolidate(app) == {"t1": "active", "t2": "active", "t3": "active"}


def test_a_keep_apart_that_no_longer_binds_is_not_exported(app: App) -> None:
    """A note changed since the keep-apart (a host edit bumps its version): the decision was
    about the old text, so the export writes no set."""
    add_notes(app, *TWINS)
    keep_apart(app, ["t1", "t2"])
    host_sets(app, "t2", version=2)
    assert all(json.loads(line)["kept_apart"] == [] for line in export_notes(app))


@pytest.mark.parametrize(("entry", "error"), [
    ([["t1", "ghost"]], "line 1: kept_apart names note 'ghost', which is neither in this file"),
    ([["t2", "t3"]], "line 1: each kept_apart entry lists distinct note ids, this note's own"),
    ([["t1", "t1"]], "line 1: each kept_apart entry lists distinct note ids"),
    ([["t1"]], "line 1: each kept_apart entry must be an array of 2 to 100 note ids"),
    ("t2", "line 1: kept_apart must be an array"),
    ([["t1", "elsewhere"]], "line 1: kept_apart names note 'elsewhere' of another scope"),
])
def test_a_kept_apart_entry_that_cannot_bind_is_refused(app: App, entry: object,
                                                        error: str) -> None:
    """One line naming the problem; nothing of the file is written."""
    add_notes(app, {"id": "elsewhere", "agent_id": "agent-2", "content": "Another scope"},
              {"id": "gone", "content": "Old fact", "status": "revoked"})
    lines = [json.dumps({"agent_id": "agent-1", **TWINS[0], "kept_apart": entry}),
             json.dumps({"agent_id": "agent-1", **TWINS[1]})]
    with pytest.raises(InputError, match=error):
        import_notes(app, lines)
    assert {json.loads(line)["id"] for line in export_notes(app)} == {"elsewhere", "gone"}


def test_a_file_imported_again_after_a_dream_retired_a_kept_apart_note_still_imports(
        app: App, other: App) -> None:
    """The set's note was archived in the importing store since: the set binds nothing there,
    and the file, imported again, adds nothing and fails nothing."""
    add_notes(app, *TWINS)
    keep_apart(app, ["t1", "t2"])
    lines = list(export_notes(app))
    import_notes(other, lines)
    host_sets(other, "t1", status="archived", version=2)
    again = import_notes(other, lines)
    assert (again.inserted, again.duplicates) == (0, 3)

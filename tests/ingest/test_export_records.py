"""`dream examples export`, `dream sessions export` and `dream entities export` (SQLite and
PostgreSQL): what a store needs beside its notes comes back whole through export → import into
an empty store. Before, only notes could be exported: a moved store lost its examples, the
sessions its gate counts, the users and conversations marked deleted (what prune acts on) and
each agent's retention, gate and apply mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from worker.app import App
from worker.cli import main
from worker.ingest import import_notes
from worker.ingest.entities import import_entities
from worker.ingest.examples import import_examples
from worker.ingest.sessions import import_sessions

ENTITIES = [
    {"kind": "agent", "id": "bot", "name": "Bot", "note_retention_days": 30, "gate_hours": 2.5,
     "gate_sessions": 3, "apply_mode": "propose", "auto_archive_enabled": None},
    {"kind": "user", "id": "alice", "status": "deleted", "deleted_at": "2026-02-01T00:00:00Z"},
    {"kind": "company", "id": "acme", "status": "disabled"},
    {"kind": "conversation", "id": "c1", "status": "deleted", "deleted_reason": "gdpr"},
]
EXAMPLES = [{"id": "x1", "agent_id": "bot", "user_id": "alice", "input": "q\tone",
             "output": "a\nline", "success_score": 42.5, "status": "archived",
             "access_count": 3, "created_at": "2026-01-01T00:00:00Z"}]
SESSIONS = [{"id": "s1", "agent_id": "bot", "user_id": "alice",
             "started_at": "2026-01-01T00:00:00Z", "ended_at": "2026-01-01T01:00:00Z"},
            {"agent_id": "bot", "company_id": "acme", "started_at": "2026-01-02T00:00:00Z"}]



def _export(app: App, monkeypatch: pytest.MonkeyPatch, what: str) -> list[str]:
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    result = CliRunner().invoke(main, [what, "export"])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_examples_sessions_and_entities_come_back_through_export_and_import(
        app: App, other: App, monkeypatch: pytest.MonkeyPatch) -> None:
    import_notes(app, [json.dumps({"agent_id": "bot", "content": "User likes tea"})])
    import_entities(app, map(json.dumps, ENTITIES))
    import_examples(app, map(json.dumps, EXAMPLES))
    import_sessions(app, map(json.dumps, SESSIONS))
    importers = {"entities": import_entities, "examples": import_examples,
                 "sessions": import_sessions}
    for what, importer in importers.items():
        lines = _export(app, monkeypatch, what)
        assert importer(other, lines).inserted == len(lines)
        assert _export(other, monkeypatch, what) == lines
    entities = {(e["kind"], e["id"]): e for e in map(json.loads, _export(other, monkeypatch,
                                                                         "entities"))}
    assert entities[("user", "alice")]["status"] == "deleted"
    assert entities[("conversation", "c1")]["deleted_reason"] == "gdpr"
    agent = entities[("agent", "bot")]
    assert (agent["note_retention_days"], agent["gate_hours"], agent["apply_mode"]) == (
        30, 2.5, "propose")
    (example,) = map(json.loads, _export(other, monkeypatch, "examples"))
    assert (example["output"], example["status"], example["success_score"]) == (
        "a\nline", "archived", 42.5)
    assert len(_export(other, monkeypatch, "sessions")) == 2


@pytest.mark.parametrize("what", ["notes", "examples", "sessions", "entities"])
def test_an_export_with_no_record_imports_as_nothing(
        app: App, other: App, tmp_path: Path, what: str) -> None:
    """An export of a kind the store holds none of writes an empty file and says so on stderr;
    its import imports nothing and says so, exit 0, and changes nothing. Before, the export was
    silent and its import refused the file as a wrong path (exit 2): a store without examples
    could not be moved with the four exports."""
    path = tmp_path / f"{what}.jsonl"
    exported = CliRunner().invoke(main, [what, "export"],
                                  env={"DREAM_DATABASE_URL": app.settings.database_url})
    assert (exported.exit_code, exported.stdout) == (0, ""), exported.output
    assert exported.stderr == (f"no {what} to export: the output is empty (its import imports "
                               "nothing)\n")
    path.write_text(exported.stdout)
    imported = CliRunner().invoke(main, [what, "import", str(path)],
                                  env={"DREAM_DATABASE_URL": other.settings.database_url})
    assert (imported.exit_code, imported.stderr) == (0, ""), imported.output
    assert imported.stdout == (f"nothing to import: no {what} in the input (an export with no "
                               f"{what} writes none)\n")
    again = CliRunner().invoke(main, [what, "export"],
                               env={"DREAM_DATABASE_URL": other.settings.database_url})
    assert (again.exit_code, again.stdout) == (0, ""), again.output

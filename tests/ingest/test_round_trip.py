"""Every export (`dream notes|sessions|examples|entities export`) imported into an empty store of
the same backend gives back the rows it came from, column for column, but the columns an export
leaves out on purpose (``NOT_EXPORTED``); exported again it gives the same file, and importing
the file a second time adds nothing. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from tests.conftest import app_on
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.demo import AGENT, USER, demo_notes
from worker.domain.types import Scope
from worker.host.fusion import fuse, keep_apart
from worker.ingest.entities import import_entities
from worker.ingest.examples import import_examples
from worker.ingest.notes import import_notes
from worker.ingest.sessions import import_sessions
from worker.runs import service
from worker.store.models import (
    AgentRow,
    CompanyRow,
    ConversationRow,
    ExampleRow,
    NoteLineageRow,
    NoteRow,
    SessionRow,
    UserRow,
)

# Columns no export writes, and why: each named here is a choice, any other lost is a bug.
NOT_EXPORTED: dict[str, frozenset[str]] = {
    "notes": frozenset({"version"}),  # this store's count of its writes to the note
    "note_lineage": frozenset({"id", "run_id"}),  # a row number; runs are not exported
    "examples": frozenset({"version"}),
}
TABLES: dict[str, tuple[type[Any], ...]] = {
    "notes": (NoteRow, NoteLineageRow),
    "sessions": (SessionRow,),
    "examples": (ExampleRow,),
    "entities": (AgentRow, UserRow, CompanyRow, ConversationRow),
}
IMPORTERS = {"notes": import_notes, "sessions": import_sessions, "examples": import_examples,
             "entities": import_entities}


@pytest.fixture
def empty(app: App, tmp_path: Path) -> Iterator[App]:
    """A second, empty store on the backend of ``app``: where its exports are imported."""
    target = tmp_path / "target"
    target.mkdir()
    with app_on("sqlite" if app.engine.dialect.name == "sqlite" else "postgres", target) as a:
        yield a


def _iso(days: float, **more: float) -> str:
    return (utcnow() - timedelta(days=days, **more)).isoformat()


def _seed(app: App) -> None:
    """A store with what each column can hold: sub-second and non-UTC times, manual and pinned
    notes, expiry, metadata, flags, lineage of a dream and of a host's fusion, kept-apart sets,
    sessions recorded after they started, examples of every field, entities with settings."""
    import_entities(app, map(json.dumps, [
        {"kind": "agent", "id": AGENT, "name": "Demo", "note_retention_days": 30,
         "example_retention_days": 7, "auto_archive_enabled": False, "gate_hours": 2.5,
         "gate_sessions": 3, "gate_notes": 4, "gate_idle_minutes": 1.5,
         "gate_max_stale_hours": 48.25, "apply_mode": "auto"},
        {"kind": "user", "id": USER, "status": "active"},
        {"kind": "user", "id": "bob", "status": "deleted", "deleted_at": _iso(3, microseconds=7)},
        {"kind": "company", "id": "acme", "status": "disabled"},
        {"kind": "conversation", "id": "c1", "status": "deleted", "deleted_reason": "gdpr",
         "deleted_at": "2026-01-02T03:04:05.123456+02:00"},
    ]))
    scope = {"agent_id": AGENT, "user_id": USER}
    notes = demo_notes(lambda days: _iso(days))
    notes += [
        {"id": "rt-manual", **scope, "content": "User's dog is called Rex",
         "is_auto_generated": False, "protection": "immutable", "importance": 0.123456789,
         "created_at": "2026-03-01T10:00:00.654321+05:30", "expires_at": _iso(-30),
         "valid_to": _iso(-60), "last_accessed_at": _iso(1, microseconds=1),
         "access_count": 7, "source_conversation_id": "c1", "comments": "said twice",
         "metadata": {"tags": ["pets", "ü"], "nested": {"n": 1.5, "none": None}},
         "flags": ["injection"], "last_checked_at": _iso(2)},
        {"id": "rt-pending", **scope, "content": "User may move to Oslo", "status": "pending",
         "protection": "protected", "importance": 1.0, "created_at": _iso(4)},
        {"id": "apart-1", **scope, "content": "Deploys go out on Tuesdays", "created_at": _iso(9)},
        {"id": "apart-2", **scope, "content": "Deploys go out on Thursdays", "created_at": _iso(8)},
    ]
    import_notes(app, map(json.dumps, notes))
    with app.engine.begin() as conn:  # a host's own write, without the optional column
        conn.execute(update(NoteRow).where(NoteRow.id == "apart-1").values(valid_from=None))
    run_id = service.create_run(app, Scope(AGENT, USER), trigger="test", force=True)
    assert run_id is not None
    service.execute_run(app, run_id)
    fuse(app, ["units-old", "units-new"], "Customer uses metric and imperial units in reports")
    keep_apart(app, ["apart-1", "apart-2"])
    import_examples(app, map(json.dumps, [
        {"id": "x1", **scope, "input": "q\tone", "output": "a\nline", "success_score": 42.5,
         "is_auto_generated": False, "status": "archived", "access_count": 3,
         "last_accessed_at": _iso(1, microseconds=3), "created_at": "2026-01-01T00:00:00.5-07:00",
         "expires_at": _iso(-3)},
        {**scope, "input": "q2", "output": "a2"},
    ]))
    import_sessions(app, map(json.dumps, [
        {"id": "s1", **scope, "started_at": _iso(10, microseconds=11),
         "ended_at": _iso(9, microseconds=13)},
        {"agent_id": AGENT, "company_id": "acme", "started_at": "2026-01-02T00:00:00+01:00"},
        {**scope, "started_at": _iso(0, hours=1)},
    ]))


def _cli(app: App, *args: str) -> str:
    result = CliRunner().invoke(main, list(args),
                                env={"DREAM_DATABASE_URL": app.settings.database_url})
    assert result.exit_code == 0, result.output
    return result.stdout


def _rows(app: App, model: type[Any]) -> list[dict[str, Any]]:
    """The table's rows as plain values, but the columns no export writes, in a stable order."""
    table = model.__table__
    skip = NOT_EXPORTED.get(table.name, frozenset())
    columns = [c for c in table.columns if c.name not in skip]
    with app.engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(select(*columns))]
    for r in rows:
        for key, value in r.items():
            if isinstance(value, np.ndarray):
                r[key] = value.astype(np.float32).tobytes()
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


@pytest.mark.parametrize("what", ["notes", "sessions", "examples", "entities"])
def test_an_export_imported_into_an_empty_store_gives_back_its_rows(
        app: App, empty: App, tmp_path: Path, what: str) -> None:
    """Each export kind, through the CLI both ways: the target's rows equal the source's but
    for ``NOT_EXPORTED``, its export equals the source's, and a second import of the file adds
    nothing and changes nothing. Before, sessions lost ``recorded_at`` (the import stamped its
    own time: sessions a dream had counted counted again for the next one) and a lineage edge
    its date (the child's creation, not the fusion's)."""
    _seed(app)
    export = [what, "export"] + (["--with-embedding"] if what == "notes" else [])
    if what != "entities":  # entities first: a note or session names no entity it needs
        path = tmp_path / "entities.jsonl"
        path.write_text(_cli(app, "entities", "export"))
        _cli(empty, "entities", "import", str(path))
    path = tmp_path / f"{what}.jsonl"
    path.write_text(exported := _cli(app, *export))
    assert exported.count("\n") >= 2
    _cli(empty, what, "import", str(path))
    for model in TABLES[what]:
        assert _rows(empty, model) == _rows(app, model), model.__tablename__
    assert _cli(empty, *export) == exported
    before = {m.__tablename__: _rows(empty, m) for m in TABLES[what]}
    again = IMPORTERS[what](empty, path.read_text().splitlines())
    assert again.inserted == (again.read if what == "entities" else 0)  # entities upsert
    assert {m.__tablename__: _rows(empty, m) for m in TABLES[what]} == before

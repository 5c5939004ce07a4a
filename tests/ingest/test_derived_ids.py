"""Lines without an id (sessions, examples) get one made from what identifies the record, so a
file imported again adds nothing: before, each import gave each line a new UUID, and a sessions
file imported twice counted every session twice towards the gate."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import func, select

from tests.conftest import make_sqlite_app
from worker.ingest import import_examples, import_sessions
from worker.store.models import ExampleRow, SessionRow


def test_a_sessions_file_without_ids_imported_twice_counts_each_session_once(
        tmp_path: Path) -> None:
    app = make_sqlite_app(tmp_path)
    lines = [json.dumps({"agent_id": "a", "started_at": f"2026-11-0{d}T09:00:00Z"})
             for d in (1, 2, 3)]
    lines.append(json.dumps({"agent_id": "a", "user_id": "u", "started_at": "2026-11-01T09:00Z"}))
    first = import_sessions(app, lines)
    again = import_sessions(app, lines)
    # The same session twice in one file, its start written another way: one session.
    twice = import_sessions(app, [json.dumps({"agent_id": "a",
                                              "started_at": "2026-11-01T10:00:00+01:00"})])
    assert (first.inserted, again.inserted, again.duplicates, twice.inserted) == (4, 0, 4, 0)
    with app.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(SessionRow)) == 4
    app.dispose()


def test_an_examples_file_without_ids_imported_twice_adds_each_example_once(
        tmp_path: Path) -> None:
    app = make_sqlite_app(tmp_path)
    lines = [json.dumps({"agent_id": "a", "input": f"q{i}", "output": "a"}) for i in range(3)]
    lines.append(json.dumps({"agent_id": "b", "input": "q0", "output": "a"}))  # another scope
    first = import_examples(app, lines)
    again = import_examples(app, [*lines, lines[0]])
    assert (first.inserted, again.inserted, again.duplicates) == (4, 0, 5)
    with app.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(ExampleRow)) == 4
    app.dispose()

"""The same file imported twice at once (a retried cron job, two operators) adds its rows once:
notes, examples and sessions. Both imports read the store before either writes; the write then
holds the store and looks again (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.support.at_once import both_at_once
from worker.app import App
from worker.ingest import import_examples, import_notes, import_sessions
from worker.ingest.jsonl import ImportResult
from worker.store.models import ExampleRow, NoteRow, SessionRow

Importer = Callable[[App, Iterable[str]], ImportResult]

NOTES = [json.dumps({"agent_id": "agent-1", "content": f"User owns bike number {i}"})
         for i in range(20)]  # no ids: found again by their text
NAMED_NOTES = [json.dumps({"id": f"n{i}", "agent_id": "agent-1", "content": f"Fact {i} here"})
               for i in range(20)]
EXAMPLES = [json.dumps({"id": f"e{i}", "agent_id": "agent-1", "input": f"q{i}", "output": "a"})
            for i in range(20)]
SESSIONS = [json.dumps({"id": f"s{i}", "agent_id": "agent-1",
                        "started_at": "2026-01-01T00:00:00Z"}) for i in range(20)]


def _both_at_once(app: App, importer: Importer, lines: list[str]) -> list[Any]:
    """Two threads import ``lines``; each waits for the other before its first statement, so
    both have started before either has written."""
    return both_at_once(app, lambda: importer(app, lines))


@pytest.mark.parametrize(("importer", "lines", "table"), [
    (import_notes, NOTES, NoteRow),  # before: 40 notes, every line twice
    (import_notes, NAMED_NOTES, NoteRow),
    (import_examples, EXAMPLES, ExampleRow),  # before: an IntegrityError traceback
    (import_sessions, SESSIONS, SessionRow),  # the same
])
def test_one_file_imported_twice_at_once_adds_its_rows_once(
        app: App, importer: Importer, lines: list[str], table: Any) -> None:
    """Both imports succeed; one adds the 20 rows, the other finds them already present."""
    outcomes = _both_at_once(app, importer, lines)
    assert all(isinstance(o, ImportResult) for o in outcomes), outcomes
    assert sorted(o.inserted for o in outcomes) == [0, 20]
    with app.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(table)) == 20

"""`dream examples import`: all-or-nothing JSONL import of examples, idempotent by id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from worker.app import App
from worker.cli import main
from worker.store.models import ExampleRow


def _count(app: App) -> int:
    with app.uow() as uow:
        return int(uow.session.scalar(select(func.count()).select_from(ExampleRow)) or 0)


def test_cli_imports_examples_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two imports of the same file add the rows once; the command reports what it did."""
    from tests.conftest import make_sqlite_app

    app = make_sqlite_app(tmp_path)
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    path = tmp_path / "ex.jsonl"
    path.write_text("\n".join(json.dumps(
        {"id": f"e{i}", "agent_id": "a", "input": "q", "output": "a", "success_score": 40})
        for i in range(3)))
    first = CliRunner().invoke(main, ["examples", "import", str(path)])
    again = CliRunner().invoke(main, ["examples", "import", str(path)])
    assert first.exit_code == 0, first.output
    assert "3 added" in first.output and "3 already present" in again.output
    assert _count(app) == 3
    app.dispose()


def test_bad_line_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R22: a score out of range on line 2 → one-line error naming the line, exit 2, no rows."""
    from tests.conftest import make_sqlite_app

    app = make_sqlite_app(tmp_path)
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    path = tmp_path / "ex.jsonl"
    path.write_text(json.dumps({"agent_id": "a", "input": "q", "output": "a"}) + "\n"
                    + json.dumps({"agent_id": "a", "input": "q", "output": "a",
                                  "success_score": 140}) + "\n")
    result = CliRunner().invoke(main, ["examples", "import", str(path)])
    assert result.exit_code == 2
    assert "line 2: success_score must be between 0.0 and 100.0" in result.output
    assert _count(app) == 0
    app.dispose()


@pytest.mark.parametrize(("key", "text"), [
    ("input", "\u200b\u2060"),  # zero-width space, word joiner
    ("output", "\u3164 \u2800"),  # a Hangul filler and a blank braille cell
    ("output", " \ufeff\t"),  # a byte-order mark between whitespace
])
def test_an_example_with_nothing_visible_is_refused_and_nothing_written(
        sqlite_app: App, key: str, text: str) -> None:
    """An example is shown to a model and to a reviewer: one whose input or output shows
    nothing was imported (before: only an empty or all-whitespace one was refused). Now the
    line is refused, named with its field, and no example of the file is written."""
    from worker.ingest import InputError, import_examples

    lines = [json.dumps({"agent_id": "a", "input": "q", "output": "a"}),
             json.dumps({"agent_id": "a", "input": "q2", "output": "a2", key: text})]
    with pytest.raises(InputError) as refused:
        import_examples(sqlite_app, lines)
    assert str(refused.value).startswith(f"line 2: {key} has no visible text")
    assert _count(sqlite_app) == 0


def test_an_example_that_expires_before_it_was_written_is_refused(sqlite_app: App) -> None:
    """``created_at`` 2026-01-02 with ``expires_at`` 2020-01-01 (swapped, a wrong year) was
    imported, and the next dream archived the example as expired; a note's line is refused
    for it. Now the example's is too, one line naming both dates, nothing written; a line
    without ``created_at`` (recorded at the import's time) may still come already expired."""
    from worker.ingest import InputError, import_examples

    lines = [json.dumps({"agent_id": "a", "input": "q", "output": "a"}),
             json.dumps({"agent_id": "a", "input": "q2", "output": "a2",
                         "created_at": "2026-01-02T00:00:00Z", "expires_at": "2020-01-01"})]
    with pytest.raises(InputError) as refused:
        import_examples(sqlite_app, lines)
    assert str(refused.value) == (
        "line 2: expires_at 2020-01-01T00:00:00+00:00 is before created_at "
        "2026-01-02T00:00:00+00:00; an example cannot expire before it was written: fix "
        "expires_at or created_at, or drop expires_at")
    assert _count(sqlite_app) == 0
    undated = json.dumps({"agent_id": "a", "input": "q3", "output": "a3",
                          "expires_at": "2020-01-01"})
    assert import_examples(sqlite_app, [undated]).inserted == 1

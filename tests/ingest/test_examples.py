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

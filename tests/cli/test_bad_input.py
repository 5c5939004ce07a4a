"""R22 through the `dream` command: bad input is one line naming the problem; nothing written."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.support.factories import add_notes
from tests.support.safety import all_rows_text
from worker.app import App
from worker.cli import main
from worker.errors import NotFound

GOOD = json.dumps({"agent_id": "a", "user_id": "u", "content": "User likes tea"})


@pytest.mark.parametrize(("args", "stdin", "says"), [
    (["notes", "import", "-"],
     GOOD + "\n" + json.dumps({"agent_id": "a", "content": "x", "created_at": "31/02/2026"}),
     "line 2: created_at"),
    (["notes", "import", "-"],
     GOOD + "\n" + json.dumps({"agent_id": "a", "content": "x", "expires_at": "2026-02-30"}),
     "line 2: expires_at"),
    (["notes", "import", "-"],
     GOOD + "\n" + json.dumps({"agent_id": "a", "content": "x", "embedding": [0.5] * 7}),
     "line 2"),
    (["run", "--agent", "ghost", "--force"], None, "unknown scope"),
    # the key shows null, and so does the hint (it said None)
    (["run", "--agent", "a", "--user", "nobody", "--force"], None,
     'unknown scope ["a","nobody",null]: it has no notes, sessions or runs; check '
     "agent/user/company (null is a value, not a wildcard)"),
    (["undo", "no-such-run"], None, "no run with id no-such-run"),
    (["erase", "--note", "no-such-note", "--yes"], None, "no note with id no-such-note"),
])
def test_r22_bad_input_is_one_line_and_writes_nothing(
    app: App, monkeypatch: pytest.MonkeyPatch, args: list[str], stdin: str | None, says: str,
) -> None:
    """R22: a bad date, a wrong embedding size, an unknown scope or id → exit 2 (3: not found),
    one 'error:' line naming it (and the line number for files), and the database is
    byte-for-byte as before."""
    add_notes(app, {"agent_id": "a", "content": "An existing note"})
    before = all_rows_text(app)
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    result = CliRunner().invoke(main, args, input=stdin)
    lines = [line for line in result.output.splitlines() if line.strip()]
    # Input mistakes exit 2; an unknown scope, run or note is not found (worker.errors).
    not_found = says.startswith(("unknown scope", "no run with id", "no note with id"))
    assert result.exit_code == (NotFound.exit_code if not_found else 2), result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.output
    assert all_rows_text(app) == before


@pytest.mark.parametrize(("args", "where"), [
    (["notes", "add", "--agent", "a", "--content"], "dream notes add"),  # raised without context
    (["run", "--agent"], "dream run"),
    (["notes", "add", "--agent", "a", "--bogus"], "dream notes add"),
    (["bogus"], "dream"),
])
def test_a_usage_error_points_to_its_own_commands_help(args: list[str], where: str) -> None:
    result = CliRunner().invoke(main, args, prog_name="dream",
                                env={"DREAM_DATABASE_URL": "sqlite:///:memory:"})
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(f"(see `{where} --help`)"), result.stderr

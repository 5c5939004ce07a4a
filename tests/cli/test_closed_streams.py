"""Commands started with standard input or output closed (a service manager's default for some
units): Python finds no stream and the next file opened takes its descriptor. Each command that
needs the stream says so in one line (exit 2), where it died with an AttributeError traceback
(`dream mcp`: two, from the event loop), and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.support.factories import add_notes
from worker.app import App

DREAM = str(Path(sys.executable).with_name("dream"))
STDIN = "FILE - reads standard input, which is closed; pipe the lines in, or give the file's path"
CASES = [
    (["notes", "import", "-"], 0, STDIN),
    (["sessions", "import", "-"], 0, STDIN),
    (["examples", "import", "-"], 0, STDIN),
    (["notes", "export"], 1, "notes export writes to standard output, which is closed; redirect "
                             "it to a file (> notes.jsonl)"),
    (["erase", "--user", "alice"], 0, "erase asks for confirmation but stdin is not a terminal; "
                                      "pass --yes to erase without asking"),
    *((["mcp", "--agent", "bot"], fd, f"--transport stdio speaks over {name}, which is closed; "
       "start `dream mcp` from an MCP client (it pipes both), or use --transport http")
      for fd, name in ((0, "standard input"), (1, "standard output"))),
]


@pytest.mark.parametrize(("args", "closed", "line"), CASES,
                         ids=[f"{' '.join(a[:2])}-fd{fd}" for a, fd, _ in CASES])
def test_a_command_whose_stream_is_closed_says_so_in_one_line(
        sqlite_app: App, args: list[str], closed: int, line: str) -> None:
    if args[0] == "mcp":
        pytest.importorskip("mcp", reason="the mcp extra is not installed")
    add_notes(sqlite_app, {"id": "n1", "agent_id": "bot", "user_id": "alice",
                           "content": "User prefers tea"})
    env = {**os.environ, "DREAM_DATABASE_URL": sqlite_app.settings.database_url}
    done = subprocess.run([DREAM, *args], env=env, timeout=60, capture_output=True, text=True,
                          preexec_fn=lambda: os.close(closed))
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"error: {line}"])
    with sqlite_app.uow() as uow:
        assert uow.session.execute(text("SELECT id, status FROM notes")).all() == [("n1", "active")]

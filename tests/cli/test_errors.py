"""How a `dream` command fails (worker.cli.errors): a database failure is one `error:` line
whose remedy fits the backend (worker.store.errors, tests/store/test_errors.py)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_commands import dream, one_error_line
from tests.conftest import make_sqlite_app
from tests.support.factories import add_notes
from worker.errors import Unavailable


@pytest.mark.slow
def test_a_locked_sqlite_file_says_to_retry(tmp_path: Path) -> None:
    """An open sqlite3 session holds the write lock past the busy timeout: `dream sessions add`
    is one line saying the file is busy and to retry, and records nothing."""
    app = make_sqlite_app(tmp_path)
    url = app.settings.database_url
    app.dispose()
    holder = sqlite3.connect(tmp_path / "dream.db", isolation_level=None,
                             check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        line = one_error_line(dream(url, "sessions", "add", "--agent", "a1"),
                              Unavailable.exit_code)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "the SQLite database is busy" in line and "retry" in line
    assert sqlite3.connect(tmp_path / "dream.db").execute(
        "SELECT count(*) FROM sessions").fetchone() == (0,)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("args", [["runs", "list"], ["notes", "export"], ["--version"],
                                  ["runs", "--help"]], ids=" ".join)
def test_output_to_a_full_disk_is_one_error_line(tmp_path: Path, args: list[str]) -> None:
    """stdout on a full disk (/dev/full): one line saying the output could not be written and
    what to do, exit 5, instead of a 40-line OSError traceback."""
    app = make_sqlite_app(tmp_path)
    add_notes(app, {"id": "n1", "agent_id": "a1", "content": "Prefers tea."})
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DREAM_")},
           "DREAM_DATABASE_URL": app.settings.database_url,
           "PYTHONPATH": str(Path(__file__).parents[2])}
    app.dispose()
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "worker.cli", *args], stdout=full,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert done.returncode == Unavailable.exit_code, done.stderr
    assert done.stderr.splitlines() == [
        "error: cannot write the output (No space left on device); free space where it goes, "
        "or send it elsewhere"], done.stderr

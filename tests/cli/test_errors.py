"""How a `dream` command fails (worker.cli.errors): a database failure is one `error:` line
whose remedy fits the backend (worker.store.errors, tests/store/test_errors.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.cli.test_commands import dream, one_error_line
from tests.conftest import make_sqlite_app
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

"""How a database failure becomes one `error:` line (worker.cli.errors.database_error): the
remedy fits the backend (an SQLite file has no server to start)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from tests.cli.test_commands import dream, one_error_line
from tests.conftest import make_sqlite_app
from worker.cli.errors import database_error
from worker.errors import Unavailable


def _operational(orig: Exception) -> OperationalError:
    return OperationalError("SELECT 1", {}, orig)


@pytest.mark.parametrize(("orig", "says", "not_said"), [
    # Another writer held the SQLite file past the busy timeout: wait for it, not "the server".
    (sqlite3.OperationalError("database is locked"),
     "the SQLite database is busy (database is locked): another process kept writing to it "
     "for 30 s", "server"),
    # A path SQLite cannot open (a directory it may not write, /proc): the path is the problem.
    (sqlite3.OperationalError("unable to open database file"),
     "check the path in DREAM_DATABASE_URL: its directory must exist and be writable", "server"),
    # A server that does not answer: as before.
    (OSError("connection to server at \"127.0.0.1\", port 1 failed: Connection refused"),
     "check DREAM_DATABASE_URL and that the server is running", "SQLite"),
], ids=["sqlite-locked", "sqlite-unopenable", "server-refused"])
def test_the_remedy_fits_the_backend(orig: Exception, says: str, not_said: str) -> None:
    error = database_error(_operational(orig))
    assert isinstance(error, Unavailable)
    assert says in str(error) and not_said not in str(error)


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

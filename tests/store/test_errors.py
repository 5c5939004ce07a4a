"""What a database failure means to a user (worker.store.errors.database_error): the remedy
fits the backend (an SQLite file has no server to start)."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.exc import OperationalError

from worker.errors import Unavailable
from worker.store.errors import database_error


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
    # The disk under the SQLite file is full: free space, not "the server".
    (sqlite3.OperationalError("database or disk is full"),
     "free space on its disk and retry", "server"),
    # A server that does not answer: as before.
    (OSError("connection to server at \"127.0.0.1\", port 1 failed: Connection refused"),
     "check DREAM_DATABASE_URL and that the server is running", "SQLite"),
], ids=["sqlite-locked", "sqlite-unopenable", "sqlite-full", "server-refused"])
def test_the_remedy_fits_the_backend(orig: Exception, says: str, not_said: str) -> None:
    error = database_error(_operational(orig))
    assert isinstance(error, Unavailable)
    assert says in str(error) and not_said not in str(error)

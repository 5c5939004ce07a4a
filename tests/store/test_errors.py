"""What a database failure means to a user (worker.store.errors.database_error): the remedy
fits the backend (an SQLite file has no server to start)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import psycopg.errors
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from tests.support.factories import add_notes
from worker.app import App
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


# ---- a PostgreSQL server that was busy, or that lost the connection, is no setting to fix ----
def _raised(app: App, body: Callable[[Connection], object]) -> OperationalError:
    """The OperationalError ``body`` raises on a connection of its own."""
    with pytest.raises(OperationalError) as caught, app.engine.connect() as conn:
        body(conn)
    return caught.value


def _busy(app: App, setting: str, statement: str) -> OperationalError:
    """``statement`` under ``setting`` while another transaction holds every note."""
    with app.engine.connect() as holder:
        holder.execute(text("SELECT id FROM notes FOR UPDATE"))

        def wait(conn: Connection) -> None:
            conn.execute(text(setting))
            conn.execute(text(statement))

        try:
            return _raised(app, wait)
        finally:
            holder.rollback()


def _terminated(app: App, conn: Connection) -> None:
    """Another session ends ``conn``'s backend (an operator's pg_terminate_backend)."""
    pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    with app.engine.connect() as other:
        other.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})


def _lost_mid_transaction(app: App) -> OperationalError:
    def body(conn: Connection) -> None:
        conn.execute(text("UPDATE notes SET importance = importance"))
        _terminated(app, conn)
        conn.execute(text("UPDATE notes SET importance = importance"))
    return _raised(app, body)


def _lost_at_commit(app: App) -> OperationalError:
    def body(conn: Connection) -> None:
        conn.execute(text("UPDATE notes SET importance = importance"))
        _terminated(app, conn)
        conn.commit()
    return _raised(app, body)


@pytest.mark.postgres
@pytest.mark.parametrize(("provoke", "says"), [
    (lambda app: _busy(app, "SET lock_timeout = '50ms'", "SELECT id FROM notes FOR UPDATE"),
     "the database was busy (a lock wait timed out: canceling statement due to lock timeout); "
     "its transaction was rolled back; try again"),
    (lambda app: _busy(app, "SET statement_timeout = 50", "SELECT pg_sleep(2)"),
     "the database was busy (a statement timed out or was cancelled: canceling statement due "
     "to statement timeout); its transaction was rolled back; try again"),
    (_lost_mid_transaction,
     "the connection to the database was lost (terminating connection due to administrator "
     "command); its transaction was rolled back; try again, and if it keeps happening check that the "
     "server is running"),
    (_lost_at_commit,
     "the connection to the database was lost as the transaction committed (terminating "
     "connection due to administrator command): it may or may not have been written; check "
     "before trying again"),
], ids=["lock-timeout", "statement-timeout", "terminated", "terminated-at-commit"])
def test_a_busy_server_or_a_lost_connection_says_try_again(
        pg_app: App, provoke: Callable[[App], OperationalError], says: str) -> None:
    """Provoked for real: a lock held past lock_timeout, a statement past statement_timeout,
    the session's backend terminated mid-transaction and before its commit (which the worker
    cannot tell from one lost during the commit's round trip). Before, each said "cannot use the
    database (…); check DREAM_DATABASE_URL and that the server is running"."""
    add_notes(pg_app, {"id": "n-1", "content": "User keeps a note"})
    error = database_error(provoke(pg_app))
    assert isinstance(error, Unavailable)
    assert str(error) == says
    assert "DREAM_DATABASE_URL" not in str(error)


@pytest.mark.parametrize(("orig", "which"), [
    (psycopg.errors.DeadlockDetected("deadlock detected"), "a deadlock between two writers"),
    (psycopg.errors.SerializationFailure("could not serialize access due to concurrent update"),
     "a serialization failure"),
    (psycopg.errors.TooManyConnections("sorry, too many clients already"),
     "too many connections"),
], ids=["deadlock", "serialization", "too-many-connections"])
def test_each_busy_state_is_named(orig: Exception, which: str) -> None:
    error = database_error(_operational(orig))
    assert isinstance(error, Unavailable)
    assert str(error) == (f"the database was busy ({which}: {orig}); its transaction was rolled back; "
                          "try again")


def test_a_connection_ended_by_the_server_is_lost_not_misconfigured() -> None:
    """Class 08 and the server's own ends of a session, without SQLAlchemy's disconnect flag."""
    for orig in (psycopg.errors.AdminShutdown("terminating connection due to administrator "
                                              "command"),
                 psycopg.errors.ConnectionFailure("server closed the connection unexpectedly"),
                 psycopg.errors.IdleInTransactionSessionTimeout("terminating connection due to "
                                                                "idle-in-transaction timeout")):
        assert str(database_error(_operational(orig))).startswith(
            "the connection to the database was lost (")

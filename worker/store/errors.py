"""What a database failure means to the person who can fix it: one line with the remedy, as a
worker.errors class (the CLI's exit code, the API's status), or None for a bug."""

from __future__ import annotations

from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    DBAPIError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)

from worker.errors import ConfigError, DreamError, Unavailable
from worker.store.db import SQLITE_BUSY_SECONDS


def database_error(exc: SQLAlchemyError) -> DreamError | None:
    """A database that is missing, unreachable, not ours or damaged; None for a bug."""
    orig = str(getattr(exc, "orig", None) or "")
    if isinstance(exc, OperationalError):
        return _operational(exc, orig.splitlines()[0] if exc.orig else "connection failed")
    if isinstance(exc, ProgrammingError) and "does not exist" in orig:
        # A missing table or column; any other ProgrammingError (a value the driver cannot
        # adapt) is a validation bug and keeps its traceback rather than misleading advice.
        return ConfigError(f"the database schema is missing or out of date "
                           f"({orig.splitlines()[0]}); run `dream db upgrade`")
    if isinstance(exc, ProgrammingError) and getattr(exc, "statement", None) is None:
        # Raised while connecting, before any statement: the URL's options (libpq's
        # `invalid connection option "foo"`, `bad value for connect_timeout`).
        return ConfigError(f"DREAM_DATABASE_URL: {orig.splitlines()[0] if orig else exc}; fix "
                           "the URL's options (after `?`)")
    if isinstance(exc, ProgrammingError) and "already exists" in orig:
        return not_ours(orig.splitlines()[0])
    if isinstance(exc, DatabaseError) and "file is not a database" in orig:
        return ConfigError("DREAM_DATABASE_URL points at a file that is not an SQLite database; "
                           "point it at a dream-worker database or a new path")
    if isinstance(exc, DatabaseError) and "malformed" in orig:
        return Unavailable("the SQLite database file is damaged (database disk image is "
                           "malformed); restore it from a backup or export what `sqlite3 FILE "
                           ".recover` finds")
    if isinstance(exc, ArgumentError):  # an unparsable DREAM_DATABASE_URL
        return ConfigError(f"invalid DREAM_DATABASE_URL ({exc}); use sqlite:///PATH or "
                           "postgresql://USER@HOST/DB")
    return None


def _operational(exc: OperationalError, reason: str) -> DreamError:
    """A driver's OperationalError: a schema that is missing, old or not ours, a database or
    role that does not exist, or one that cannot be reached."""
    if "no such table" in reason:  # SQLite; PostgreSQL's missing tables are ProgrammingError
        return ConfigError(
            f"the database has no dream-worker schema ({reason}); run `dream db upgrade`")
    if "no such column" in reason:  # SQLite: a schema older than the code
        return ConfigError(f"the database schema is out of date ({reason}); run "
                           "`dream db upgrade`")
    if "already exists" in reason:
        return not_ours(reason)
    if "does not exist" in reason:  # PostgreSQL: the database or role named in the URL
        return ConfigError(f"cannot connect: {reason.rpartition('FATAL:')[2].strip()}; create "
                           "it or fix DREAM_DATABASE_URL, then run `dream db upgrade`")
    if type(exc.orig).__module__.startswith("sqlite3"):
        return _sqlite_unavailable(reason)
    return _server_unavailable(exc, reason)


# SQLSTATEs of a server that gave up on a statement it was too busy for: what each says.
_BUSY = {
    "55P03": "a lock wait timed out",  # lock_not_available: lock_timeout, NOWAIT
    "57014": "a statement timed out or was cancelled",  # query_canceled: statement_timeout
    "40P01": "a deadlock between two writers",  # deadlock_detected
    "40001": "a serialization failure",  # serialization_failure
    "53300": "too many connections",  # too_many_connections
    "57P03": "the server is starting up or shutting down",  # cannot_connect_now
}
# SQLSTATEs of a session the server ended (an operator's pg_terminate_backend, a shutdown, a
# crash, an idle timeout); any other of class 08 (a connection exception) too, but the two of
# a connection never made, which are the URL's or the server's to fix.
_ENDED = frozenset({"57P01", "57P02", "57P05", "25P03"})
_NEVER_MADE = frozenset({"08001", "08004"})


def _server_unavailable(exc: OperationalError, reason: str) -> DreamError:
    """A server that was busy, or that lost the connection, is met again by a retry; only one
    that cannot be reached at all is the URL's or the server's to fix. Lost at a statement,
    the transaction was rolled back; lost at the commit (no statement), nobody can tell."""
    state = str(getattr(exc.orig, "sqlstate", None) or "")
    if state in _BUSY:
        return Unavailable(f"the database was busy ({_BUSY[state]}: {reason}); its "
                           "transaction was rolled back; try again")
    lost = exc.connection_invalidated or state in _ENDED or (
        state.startswith("08") and state not in _NEVER_MADE)
    if lost and exc.statement is not None:
        return Unavailable(f"the connection to the database was lost ({reason}); its "
                           "transaction was rolled back; try again, and if it keeps happening "
                           "check that the server is running")
    if lost:
        return Unavailable(f"the connection to the database was lost as the transaction "
                           f"committed ({reason}): it may or may not have been written; check "
                           "before trying again")
    return Unavailable(f"cannot use the database ({reason}); check DREAM_DATABASE_URL and "
                       "that the server is running")


def interruption(exc: BaseException) -> str | None:
    """What cut the work short, when ``exc`` (or what it was raised from) is a database error
    the same work may well not meet again: the server was busy (a lock or statement timeout, a
    deadlock, too many connections; SQLite's write lock held past its busy timeout) or the
    connection was lost (the backend terminated, the server restarting, the network). Words of
    ours only (never the driver's text, which may quote a value). None for anything else: a
    bug, a schema or a setting to fix, a server never reached."""
    seen = 0
    while exc is not None and seen < 4:
        if isinstance(exc, DBAPIError):
            return _cut_short(exc)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1  # type: ignore[assignment]
    return None


def _cut_short(exc: DBAPIError) -> str | None:
    state = str(getattr(exc.orig, "sqlstate", None) or "")
    if state in _BUSY:
        return f"the database was busy ({_BUSY[state]}, SQLSTATE {state})"
    if exc.connection_invalidated or state in _ENDED or (
            state.startswith("08") and state not in _NEVER_MADE):
        return f"the connection to the database was lost{f' (SQLSTATE {state})' if state else ''}"
    reason = str(exc.orig or "")
    if type(exc.orig).__module__.startswith("sqlite3") and ("locked" in reason or "busy" in reason):
        return (f"the SQLite database was busy (another process kept writing to it for "
                f"{SQLITE_BUSY_SECONDS:g} s)")
    return None


def not_ours(reason: str) -> DreamError:
    """A migration met a table it creates (`dream db upgrade` of a database whose tables were
    made without a recorded revision): another application's, or built without the migrations."""
    return ConfigError(f"the database already holds a table the migrations create ({reason}) "
                       "but records no dream-worker revision: it is another application's or "
                       "was built without the migrations; point DREAM_DATABASE_URL at a new "
                       "database")


def _sqlite_unavailable(reason: str) -> DreamError:
    """An SQLite file has no server to be running: say what to do about the file."""
    if "locked" in reason or "busy" in reason:
        return Unavailable(f"the SQLite database is busy ({reason}): another process kept "
                           f"writing to it for {SQLITE_BUSY_SECONDS:g} s (a dream run, an "
                           "import, an open sqlite3 session); retry once it has finished")
    if "full" in reason:
        return Unavailable(f"cannot write the SQLite database ({reason}); free space on its disk "
                           "and retry")
    return Unavailable(f"cannot use the SQLite database ({reason}); check the path in "
                       "DREAM_DATABASE_URL: its directory must exist and be writable")

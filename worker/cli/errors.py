"""How a `dream` command fails: every DreamError (and each database, settings or path problem
a user can cause) becomes one ``error:`` line with the exit code of its class (worker.errors);
anything else is a bug and keeps its traceback."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)

from worker.errors import (
    EXIT_CODES,
    ConfigError,
    DreamError,
    InvalidInput,
    Unavailable,
    UnknownScope,
)
from worker.store.db import SQLITE_BUSY_SECONDS

F = TypeVar("F", bound=Callable[..., Any])


class UserError(InvalidInput):
    """A command line no command can use (conflicting or missing options): exit 2."""


class ErrorLine(click.ClickException):
    """A DreamError as click shows it: one ``error:`` line; ``error_line`` picks the subclass
    whose exit code is the error's class's (click reads ``exit_code`` from the class)."""

    def show(self, file: Any = None) -> None:
        # The message may quote an argument with a lone surrogate (invalid UTF-8 in argv):
        # printed escaped, never as a UnicodeEncodeError traceback.
        line = " ".join(f"error: {self.message}".split())
        click.echo(line.encode("utf-8", "backslashreplace").decode("utf-8"), err=True)


_LINES: dict[int, type[ErrorLine]] = {
    code: type(f"ErrorLine{code}", (ErrorLine,), {"exit_code": code})
    for code in {1, *EXIT_CODES.values()}}


def error_line(error: DreamError) -> ErrorLine:
    return _LINES.get(error.exit_code, _LINES[1])(str(error))


def user_error(exc: BaseException) -> DreamError | None:
    """The DreamError for an error the user can cause (input, settings, a database that is
    missing, unreachable or not ours), or None for a bug, which keeps its traceback."""
    if isinstance(exc, UnknownScope):  # the shell says where the known scopes are listed
        return UnknownScope(f"{exc}; `dream gate --explain` lists the known scopes")
    if isinstance(exc, DreamError):
        return exc
    if isinstance(exc, SQLAlchemyError):
        return database_error(exc)
    if isinstance(exc, OSError) and exc.filename is not None:  # a path the user named
        return InvalidInput(f"cannot use {exc.filename}: {exc.strerror or type(exc).__name__}")
    return None


def database_error(exc: SQLAlchemyError) -> DreamError | None:
    """A database that is missing, unreachable, not ours or damaged; None for a bug."""
    orig = str(getattr(exc, "orig", None) or "")
    if isinstance(exc, OperationalError):
        reason = orig.splitlines()[0] if exc.orig else "connection failed"
        if "no such table" in reason:  # SQLite; PostgreSQL's missing tables are ProgrammingError
            return ConfigError(
                f"the database has no dream-worker schema ({reason}); run `dream db upgrade`")
        if "does not exist" in reason:  # PostgreSQL: the database or role named in the URL
            return ConfigError(f"cannot connect: {reason.rpartition('FATAL:')[2].strip()}; create "
                               "it or fix DREAM_DATABASE_URL, then run `dream db upgrade`")
        if type(exc.orig).__module__.startswith("sqlite3"):
            return _sqlite_unavailable(reason)
        return Unavailable(f"cannot use the database ({reason}); check DREAM_DATABASE_URL and "
                           "that the server is running")
    if isinstance(exc, ProgrammingError) and "does not exist" in orig:
        # A missing table or column; any other ProgrammingError (a value the driver cannot
        # adapt) is a validation bug and keeps its traceback rather than misleading advice.
        return ConfigError(f"the database schema is missing or out of date "
                           f"({orig.splitlines()[0]}); run `dream db upgrade`")
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


def _sqlite_unavailable(reason: str) -> DreamError:
    """An SQLite file has no server to be running: say what to do about the file."""
    if "locked" in reason or "busy" in reason:
        return Unavailable(f"the SQLite database is busy ({reason}): another process kept "
                           f"writing to it for {SQLITE_BUSY_SECONDS:g} s (a dream run, an "
                           "import, an open sqlite3 session); retry once it has finished")
    return Unavailable(f"cannot use the SQLite database ({reason}); check the path in "
                       "DREAM_DATABASE_URL: its directory must exist and be writable")


def user_errors(fn: F) -> F:
    """Turn every error a user can cause into one clear line (stack traces are for bugs).
    The `dream` group does the same for every command; this keeps direct callers safe."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except Exception as exc:
            raise_as_user_error(exc)

    return wrapper  # type: ignore[return-value]


def raise_as_user_error(exc: Exception) -> NoReturn:
    """Re-raise ``exc`` as its one-line user error, or unchanged when it is a bug."""
    translated = user_error(exc)
    if translated is None:
        raise exc
    raise error_line(translated) from None

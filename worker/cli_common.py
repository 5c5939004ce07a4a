"""Shared by every `dream` command module: the one-line user error, the process's App,
input readers and the parameter types."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

import click
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)

from worker.app import App, build_app
from worker.clock import parse_timestamp
from worker.config import load_settings
from worker.domain.limits import ident_problem
from worker.errors import EXIT_CODES, ConfigError, DreamError, InvalidInput, NotFound, Unavailable
from worker.logging import configure_logging
from worker.telemetry import configure_telemetry

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
            translated = user_error(exc)
            if translated is None:
                raise
            raise error_line(translated) from None

    return wrapper  # type: ignore[return-value]


def cli_app(ctx: click.Context, create: bool = False) -> App:
    """The process's App; ``create`` only for commands that may create a missing SQLite file."""
    obj = ctx.ensure_object(dict)
    if "app" not in obj:
        settings = load_settings()
        configure_logging(settings.log_format, obj.get("log_level") or settings.log_level)
        obj["app"] = build_app(settings, create_database=create)
        configure_telemetry(obj["app"])
        ctx.call_on_close(obj["app"].dispose)
    app: App = obj["app"]
    return app


def read_lines(path: str) -> Iterable[bytes]:
    """Raw lines of FILE or stdin; ingest decodes them and names a line that is not UTF-8."""
    if path == "-":
        return sys.stdin.buffer if hasattr(sys.stdin, "buffer") else sys.stdin  # type: ignore[return-value]
    try:
        with open(path, "rb") as fh:
            return fh.readlines()
    except FileNotFoundError:
        raise NotFound(f"file not found: {path}") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}; expected a UTF-8 JSONL file") from None


def parse_option_timestamp(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise UserError(f"{name}: {exc}") from None


class FiniteRange(click.FloatRange):
    """A float option that also refuses nan and inf (FloatRange lets nan through every bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


# ParamType is generic from click 8.2 on; 8.1 (still supported) cannot be subscripted.
class Ident(click.ParamType):  # type: ignore[type-arg]
    """An id or scope part: what both database backends can store (no NUL, ≤ 64 characters)."""

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        problem = ident_problem(value) if isinstance(value, str) else None
        if problem:
            self.fail(problem, param, ctx)
        return value


IDENT = Ident()

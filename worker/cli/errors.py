"""How a `dream` command fails: every DreamError (and each database, settings or path problem
a user can cause) becomes one ``error:`` line with the exit code of its class (worker.errors);
anything else is a bug and keeps its traceback."""

from __future__ import annotations

import errno
import functools
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
from sqlalchemy.exc import SQLAlchemyError

from worker.errors import EXIT_CODES, DreamError, InvalidInput, Unavailable, UnknownScope
from worker.store.errors import database_error

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
    if isinstance(exc, OSError) and exc.errno in _OUTPUT_FULL:
        # Writing the answer failed (stdout on a full disk or over quota); a broken pipe
        # (`| head`) is click's: it ends quietly.
        return Unavailable(f"cannot write the output ({exc.strerror}); free space where it "
                           "goes, or send it elsewhere")
    return None


_OUTPUT_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class StopLine(click.ClickException):
    """A command stopped by Ctrl-C or SIGTERM outside what it reports itself (a run's or an
    approval's stop): one line on stderr naming the command, the signal and what its stop
    leaves, and the exit code of an interrupted run, 13 (worker.cli.common.Outcome)."""

    exit_code = 13

    def show(self, file: Any = None) -> None:
        click.echo(self.message.encode("utf-8", "backslashreplace").decode("utf-8"), err=True)


# What a stop of a command that only reads leaves.
READ_ONLY = "it changes nothing; run it again"
# Where a command says what a stop leaves (``stop_says``); the group reads it for its line.
STOP_STATE = "dream_stop_state"


def stop_says(state: str) -> Callable[[F], F]:
    """Declare what a stop of the command leaves and what to do next, for the one line a
    Ctrl-C or SIGTERM prints (``stopped by SIGINT: <state>``); every command declares it
    (tests/cli/test_stops.py). Put it under ``@click.command``."""

    def declare(fn: F) -> F:
        setattr(fn, STOP_STATE, state)
        return fn

    return declare


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

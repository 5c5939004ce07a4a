"""Shared by every `dream` command module: the process's App, input readers and the parameter
types (errors are in worker.cli.errors)."""

from __future__ import annotations

import getpass
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from enum import IntEnum
from functools import partial
from typing import Any, TypeVar

import click

from worker.app import App, build_app, settle_process
from worker.cli.errors import UserError
from worker.clock import SKEW, parse_timestamp, utcnow
from worker.config import Settings, load_settings
from worker.domain.limits import ident_problem, stored_ident_problem, user_problem
from worker.errors import NotFound
from worker.logging import configure_logging
from worker.store.schema import require_current_schema
from worker.telemetry import configure_telemetry

F = TypeVar("F", bound=Callable[..., Any])


class Outcome(IntEnum):
    """How a command that applies changes ended, for cron and scripts: outcomes, not user
    errors (whose codes are 2-8, worker.errors), and they print no ``error:`` line."""

    DONE = 0
    BLOCKED = 10  # a guard held changes back (the blast-radius limit, the model budget, ...)
    PARTIAL = 11  # a run's phase failed, the others applied
    FAILED = 12
    INTERRUPTED = 13  # or cancelled, or the command was stopped by SIGINT or SIGTERM
    STALE = 14  # what a review item was decided on changed: nothing written for it


def cli_app(ctx: click.Context, create: bool = False, serving: bool = False,
            running: bool = False) -> App:
    """The process's App; ``create`` only for commands that may create a missing SQLite file
    (`dream db upgrade`), ``serving`` for the servers (`dream api`, `dream mcp`), which log as
    the worker does, ``running`` for `dream run` executing here (the process settled as a
    worker process is, ``settle_process``). Any other command refuses a database whose schema
    is not at the newest migration before it reads or writes a row (the servers answer 503,
    see /healthz)."""
    obj = ctx.ensure_object(dict)
    if "app" not in obj:
        settings = load_settings()
        configure_logging(*log_setup(settings, obj.get("log_level"), serving))
        obj["app"] = build_app(settings, create_database=create)
        ctx.call_on_close(obj["app"].dispose)
        if not (create or serving):
            require_current_schema(obj["app"].engine)
        configure_telemetry(obj["app"])
        if running:
            settle_process()
    app: App = obj["app"]
    return app


def log_setup(settings: Settings, flag_level: str | None, serving: bool) -> tuple[str, str]:
    """(format, level) of a command's logs on stderr. A server logs as the worker does
    (DREAM_LOG_FORMAT, DREAM_LOG_LEVEL: INFO, JSON off a terminal). Any other command prints
    its own answer on stdout; its stderr is for what needs a person: WARNING and up, one
    readable line each, unless ``--log-level`` or an explicitly set DREAM_LOG_LEVEL asks for
    more (and DREAM_LOG_FORMAT, when set, for another format)."""
    explicit = settings.model_fields_set
    level = flag_level or (settings.log_level if serving or "log_level" in explicit
                           else "WARNING")
    fmt = settings.log_format if serving or "log_format" in explicit else "console"
    return fmt, level


# A JSONL line longer than this is no note, session, example or entity (a note's text is at
# most 100,000 characters): refused as it is read, never held whole (a file with no line break,
# a dump or a binary, would otherwise be read into memory entire).
LINE_BYTES_MAX = 16 << 20


def standard_stream(stream: Any, use: str, fix: str) -> Any:
    """``sys.stdin`` or ``sys.stdout`` when open. Python sets one to None when its descriptor
    was closed at start-up (a service manager's default), and the next file opened takes the
    number: ``use`` says what the command does with it ("FILE - reads standard input"), ``fix``
    what to do instead."""
    if stream is None:
        raise UserError(f"{use}, which is closed; {fix}")
    return stream


def export_records(ctx: Any, what: str) -> None:
    """`dream examples|sessions|entities export`: every row as the JSONL its import reads."""
    from worker.export import export_records as lines

    out = standard_stream(sys.stdout, f"{what} export writes to standard output",
                          f"redirect it to a file (> {what}.jsonl)")
    write_export(out, lines(cli_app(ctx), what), what)


def write_export(out: Any, lines: Iterable[str], what: str) -> None:
    """Every line on ``out``; an export without one says so on stderr, since its output (an
    empty file) is easily taken for a failed export: its import imports nothing."""
    written = 0
    for line in lines:
        out.write(line + "\n")
        written += 1
    if not written:
        click.echo(f"no {what} to export: the output is empty (its import imports nothing)",
                   err=True)


def read_lines(path: str) -> Iterable[bytes]:
    """Raw lines of FILE or stdin, read as the import asks for them; ingest decodes them and
    names a line that is not UTF-8. A FILE or stdin without a line to import (an export that
    had nothing to export, a pipeline with nothing to pass on) imports nothing, and the import
    says so (``echo_imported``)."""
    if path == "-":
        stdin = standard_stream(sys.stdin, "FILE - reads standard input",
                                "pipe the lines in, or give the file's path")
        stdin = stdin.buffer if hasattr(stdin, "buffer") else stdin
        return _bounded(stdin, close=False)
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed by _bounded once read)
    except FileNotFoundError:
        raise NotFound(f"file not found: {path}") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}; expected a UTF-8 JSONL file") from None
    return _bounded(fh, close=True)


def _line(fh: Any, number: int) -> bytes:
    line: bytes = fh.readline(LINE_BYTES_MAX + 1)
    if len(line) > LINE_BYTES_MAX:
        raise UserError(f"line {number}: longer than {LINE_BYTES_MAX >> 20} MiB without a line "
                        "break; a JSONL file holds one JSON object per line")
    return line


def _bounded(fh: Any, *, close: bool) -> Iterator[bytes]:
    try:
        number = 0
        while line := _line(fh, number + 1):
            number += 1
            yield line
    finally:
        if close:
            fh.close()


def echo_imported(result: Any, noun: str) -> None:
    """The one summary line of every JSONL import (an ingest result: read, inserted, duplicates),
    then its warnings on stderr."""
    if not result.read:
        click.echo(f"nothing to import: no {noun} in the input (an export with no {noun} "
                   "writes none)")
        return
    restated = getattr(result, "restated", 0)
    ended = getattr(result, "ended", 0)
    click.echo(f"read {result.read} {noun}: {result.inserted} added, "
               + (f"{ended} stored without an end given it, " if ended else "")
               + f"{result.duplicates} already present"
               + (f" ({restated} stored {'note' if restated == 1 else 'notes'} said again "
                  "later: dated at the later statement)" if restated else ""))
    for warning in getattr(result, "warnings", ()):
        click.echo(f"warning: {warning}", err=True)


def echo_batch_releases(releases: Iterable[Any], indent: str = "") -> None:
    """What a stop did to its runs' provider batches (``RunBatchRelease``): a line each, one
    left at the provider as a warning on stderr (the stop itself stands)."""
    for done in releases:
        if done.release.complete:
            click.echo(f"{indent}{done.line()}")
        else:
            click.echo(f"warning: {done.line()}", err=True)


def parse_option_timestamp(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise UserError(f"{name}: {exc}") from None


def parse_run_clock(value: str | None, instead: str) -> datetime | None:
    """``--now`` of a command whose runs write: a time that has come (within ``SKEW``). A run
    dated later stamps its new notes and its decisions with a time that has not happened, and
    every later run reads them so (never the newer fact, never idle): ``instead`` says how to
    look at that time without writing."""
    return parse_past_timestamp(value, "--now", "a run that writes would date its notes and "
                                f"decisions then; {instead}")


def parse_past_timestamp(value: str | None, name: str, problem: str) -> datetime | None:
    """A timestamp option that records something that happened: at most ``SKEW`` past the
    present time, else one line naming it and ``problem``."""
    when = parse_option_timestamp(value, name)
    present = utcnow()
    if when is not None and when > present + SKEW:
        raise UserError(f"{name} {value} is later than the present time "
                        f"({present.isoformat(timespec='seconds')}): {problem}")
    return when


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
    problem = staticmethod(ident_problem)  # why a value cannot be one, or None

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        problem = self.problem(value) if isinstance(value, str) else None
        if problem:
            self.fail(problem, param, ctx)
        return value


IDENT = Ident()


def json_option(fn: F) -> F:
    """``--json``: the answer as one JSON document on stdout, for scripts."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON instead of text (for scripts).")(fn)


class UserIdent(Ident):
    """A user id a scope may have: an id, not the erased users' placeholder."""

    problem = staticmethod(user_problem)


USER_IDENT = UserIdent()


class StoredIdent(Ident):
    """An id as it may be stored (erasure): no look-alike rule, which came after some ids."""

    problem = staticmethod(stored_ident_problem)


class StoredUserIdent(Ident):
    """A stored user id (erasure), not the erased users' placeholder."""

    problem = staticmethod(partial(user_problem, ident=stored_ident_problem))


STORED_IDENT, STORED_USER_IDENT = StoredIdent(), StoredUserIdent()


def operator(by: str | None = None) -> str:
    """``cli:<by>``, or ``cli:<login name>``: who decided a review item or undid a run."""
    if by is None:
        try:
            by = getpass.getuser()[:64] or "unknown"
        except (OSError, KeyError):  # no login name for this uid (a container)
            by = "unknown"
    return f"cli:{by}"


def scope_options(fn: F) -> F:
    """``--agent`` (required), ``--user``, ``--company``: the scope a command acts on."""
    fn = click.option("--company", default=None, type=IDENT, help="Scope: company id.")(fn)
    fn = click.option("--user", default=None, type=USER_IDENT, help="Scope: user id.")(fn)
    return click.option("--agent", required=True, type=IDENT, help="Scope: agent id.")(fn)

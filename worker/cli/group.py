"""The `dream` group: usage mistakes and every user error a command raises become one line
(worker.cli.errors); the command modules register themselves on it (worker.cli)."""

from __future__ import annotations

import codecs
import io
import re
import sys
from typing import Any

import click

from worker.cli.errors import STOP_STATE, StopLine, UserError, error_line, raise_as_user_error
from worker.config import LOG_LEVELS
from worker.domain.limits import text_problem
from worker.runs.stops import signal_of, stop_signals


def _argument_problem(args: list[str]) -> str | None:
    """Arguments a shell can pass but no command can use: invalid UTF-8 (decoded by Python as
    lone surrogates) or NUL characters (only possible from code)."""
    for position, arg in enumerate(args, start=1):
        if problem := text_problem(arg):
            return f"{_argument_named(args, position)} {problem}; pass UTF-8 text"
    return None


_OPTION = re.compile(r"--[a-z][a-z0-9-]{0,38}")


def _argument_named(args: list[str], position: int) -> str:
    """``argument 4 (--agent)``: the option an argument is the value of, when the one before
    it (or its own ``--name=``) names one; the position alone said not which field to fix."""
    arg, before = args[position - 1], args[position - 2] if position > 1 else ""
    if arg.startswith("--") and "=" in arg:
        option = arg.partition("=")[0]
    elif before.startswith("--") and "=" not in before and not arg.startswith("-"):
        option = before
    else:
        option = ""
    if not _OPTION.fullmatch(option):  # (only an option's name: no text the user typed)
        return f"argument {position}"
    return f"argument {position} ({option})"


def _repeated_option(group: click.Group, args: list[str]) -> str | None:
    """An option of one value given twice (``--note n1 --note n2``), named with the command's
    help: click keeps the last value silently, so `dream erase --note n1 --note n2 --yes`
    erased n2 alone, as a JSON key given twice is refused by every importer, the API and MCP.
    Options that add up (``--phase``, ``--judged``) and flags may repeat; a value is skipped
    as such (``--content --agent`` is text), and nothing after ``--`` is an option."""
    cmd: click.Command = group
    path, seen, waiting = ["dream"], set[str](), False
    for arg in args:
        if waiting:
            waiting = False
            continue
        if arg == "--":
            return None
        name, eq, _ = arg.partition("=")
        option = _options(cmd).get(name) if arg.startswith("--") else None
        if option is not None:
            waiting = not eq and not option.is_flag and not option.count
            if option.multiple or option.is_flag or option.count:
                continue
            if option.name in seen:
                return (f"{name} is given twice; give it once (the command would take the last "
                        f"value alone) (see `{' '.join(path)} --help`)")
            seen.add(option.name or name)
        elif isinstance(cmd, click.Group) and (sub := cmd.commands.get(arg)) is not None:
            cmd, seen = sub, set()
            path.append(arg)
    return None


def _options(cmd: click.Command) -> dict[str, click.Option]:
    return {name: p for p in cmd.params if isinstance(p, click.Option)
            for name in (*p.opts, *p.secondary_opts)}


def _utf8_output() -> None:
    """stdout is UTF-8 whatever the locale: what `dream notes export` writes is a UTF-8 file
    (the importers read nothing else), and under an ASCII or Latin-1 locale (or
    PYTHONIOENCODING) the first note with another character was a UnicodeEncodeError
    traceback after a partial export. stderr keeps the terminal's encoding and escapes what it
    cannot show."""
    for stream, change in ((sys.stdout, {"encoding": "utf-8"}),
                           (sys.stderr, {"errors": "backslashreplace"})):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        if isinstance(stream, io.TextIOWrapper) and codecs.lookup(encoding).name != "utf-8":
            stream.reconfigure(**change)  # type: ignore[arg-type]


class DreamGroup(click.Group):
    """Usage mistakes (unknown option, bad choice, missing argument) and every DreamError a
    command raises are one line with the exit code of its class (usage: 2). Asking for help (a bare group) still prints the help."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        if parent is None:
            _utf8_output()
        if parent is None and (problem := _argument_problem(args) or _repeated_option(self, args)):
            raise error_line(UserError(problem))
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
        except KeyboardInterrupt as stop:  # before any command ran: nothing was done
            raise StopLine(f"`dream` stopped by {signal_of(stop)} as it read its arguments: "
                           "nothing was done") from None
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise error_line(_usage_error(exc)) from None
        except click.ClickException:
            raise
        except OSError as exc:  # --help or --version could not be written
            raise_as_user_error(exc)
        ctx.meta["dream.argv"] = list(args)  # the subcommand a usage error belongs to
        return ctx

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # SIGINT and SIGTERM raise a stop in every command (worker.runs.stops), each
        # translated below into its one line, never click's "Aborted!" (exit 1) nor SIGTERM's
        # silent kill.
        with stop_signals():
            return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as stop:
            raise _stop_line(ctx, stop) from None
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise error_line(_usage_error(exc, _command_path(ctx))) from None
        except click.ClickException:
            raise
        except Exception as exc:
            raise_as_user_error(exc)


def _command_path(ctx: click.Context) -> str:
    """The command the arguments name (``dream notes add``): the leading words that are
    subcommands; what a usage error the parser raised without its context points to."""
    return _command(ctx)[0]


def _command(ctx: click.Context) -> tuple[str, click.Command]:
    cmd, path = ctx.command, [ctx.command_path]
    for word in ctx.meta.get("dream.argv", []):
        sub = cmd.get_command(ctx, word) if isinstance(cmd, click.Group) else None
        if sub is None:
            break
        cmd, path = sub, [*path, word]
    return " ".join(path), cmd


def _stop_line(ctx: click.Context, stop: KeyboardInterrupt) -> StopLine:
    """The one line of a command a signal stopped: which, by what, and what its stop leaves
    (declared with ``stop_says``)."""
    path, cmd = _command(ctx)
    state = getattr(cmd.callback, STOP_STATE, None) or "see `dream --help`"
    return StopLine(f"`{path}` stopped by {signal_of(stop)}: {state}")


def _usage_error(exc: click.UsageError, fallback: str = "dream") -> UserError:
    where = exc.ctx.command_path if exc.ctx is not None else fallback
    message = " ".join(exc.format_message().split())
    return UserError(f"{message} (see `{where} --help`)")


@click.group(cls=DreamGroup)
@click.version_option(package_name="dream-worker", prog_name="dream")
@click.option("--log-level", default=None, type=click.Choice(LOG_LEVELS, case_sensitive=False),
              help="Log events on stderr at this level and above (default: WARNING, or "
                   "DREAM_LOG_LEVEL when set; `info` shows what a run did).")
@click.pass_context
def main(ctx: click.Context, log_level: str | None) -> None:
    """dream-worker: keeps an agent's long-term memory healthy between sessions."""
    ctx.ensure_object(dict)["log_level"] = log_level

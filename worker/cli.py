"""The `dream` command: thin translation of arguments into service calls."""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

import click
from sqlalchemy.exc import OperationalError, ProgrammingError

from worker.app import App, build_app
from worker.clock import parse_timestamp, utcnow
from worker.config import ConfigError, load_settings
from worker.domain.limits import ident_problem, text_problem
from worker.domain.types import PHASES, RunStatus, Scope
from worker.logging import configure_logging
from worker.telemetry import configure_telemetry

F = TypeVar("F", bound=Callable[..., Any])


class UserError(click.ClickException):
    """Printed as one line, exit status 2, no traceback."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        # The message may quote an argument with a lone surrogate (invalid UTF-8 in argv):
        # printed escaped, never as a UnicodeEncodeError traceback.
        line = " ".join(f"error: {self.message}".split())
        click.echo(line.encode("utf-8", "backslashreplace").decode("utf-8"), err=True)


def user_error(exc: BaseException) -> UserError | None:
    """The one line for an error the user can cause (input, settings, a database that is missing,
    unreachable or not ours), or None for a bug, which keeps its traceback."""
    from sqlalchemy.exc import ArgumentError, DatabaseError

    from worker.embeddings.openai_compat import EmbeddingError
    from worker.host import HostError
    from worker.ingest.jsonl import InputError
    from worker.llm.base import LLMError
    from worker.runs.service import RunError

    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, ConfigError | InputError | RunError | LLMError | EmbeddingError | HostError):
        return UserError(str(exc))
    if isinstance(exc, OperationalError):
        reason = str(exc.orig).splitlines()[0] if exc.orig else "connection failed"
        if "no such table" in reason:  # SQLite; PostgreSQL's missing tables are ProgrammingError
            return UserError(
                f"the database has no dream-worker schema ({reason}); run `dream db upgrade`")
        if "does not exist" in reason:  # PostgreSQL: the database or role named in the URL
            return UserError(f"cannot connect: {reason.rpartition('FATAL:')[2].strip()}; create "
                             "it or fix DREAM_DATABASE_URL, then run `dream db upgrade`")
        return UserError(f"cannot use the database ({reason}); check DREAM_DATABASE_URL and that "
                         "the server is running")
    if isinstance(exc, ProgrammingError) and "does not exist" in str(exc.orig):
        # A missing table or column; any other ProgrammingError (a value the driver cannot
        # adapt) is a validation bug and keeps its traceback rather than misleading advice.
        reason = str(exc.orig).splitlines()[0]
        return UserError(
            f"the database schema is missing or out of date ({reason}); run `dream db upgrade`")
    if isinstance(exc, DatabaseError) and "file is not a database" in str(exc.orig):
        return UserError("DREAM_DATABASE_URL points at a file that is not an SQLite database; "
                         "point it at a dream-worker database or a new path")
    if isinstance(exc, DatabaseError) and "malformed" in str(exc.orig):
        return UserError("the SQLite database file is damaged (database disk image is malformed); "
                         "restore it from a backup or export what `sqlite3 FILE .recover` finds")
    if isinstance(exc, ArgumentError):  # an unparsable DREAM_DATABASE_URL
        return UserError(f"invalid DREAM_DATABASE_URL ({exc}); use sqlite:///PATH or "
                         "postgresql://USER@HOST/DB")
    if isinstance(exc, OSError) and exc.filename is not None:  # a path the user named
        return UserError(f"cannot use {exc.filename}: {exc.strerror or type(exc).__name__}")
    return None


def user_errors(fn: F) -> F:
    """Turn every error a user can cause into one clear line (stack traces are for bugs).
    The `dream` group does the same for every command; this keeps direct callers safe."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            translated = user_error(exc)
            if translated is None:
                raise
            raise translated from None

    return wrapper  # type: ignore[return-value]


def _app(ctx: click.Context, create: bool = False) -> App:
    """The process's App; ``create`` only for commands that may create a missing SQLite file."""
    obj = ctx.ensure_object(dict)
    if "app" not in obj:
        settings = load_settings()
        configure_logging(settings.log_format, obj.get("log_level") or settings.log_level)
        obj["app"] = build_app(settings, create_database=create)
        configure_telemetry(obj["app"])
        ctx.call_on_close(obj["app"].dispose)
    return obj["app"]


def _lines(path: str) -> Iterable[bytes]:
    """Raw lines of FILE or stdin; ingest decodes them and names a line that is not UTF-8."""
    if path == "-":
        return sys.stdin.buffer if hasattr(sys.stdin, "buffer") else sys.stdin  # type: ignore[return-value]
    try:
        with open(path, "rb") as fh:
            return fh.readlines()
    except FileNotFoundError:
        raise UserError(f"file not found: {path}") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}; expected a UTF-8 JSONL file") from None


def _timestamp(value: str | None, name: str) -> datetime | None:
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


class Ident(click.ParamType):
    """An id or scope part: what both database backends can store (no NUL, ≤ 64 characters)."""

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        problem = ident_problem(value) if isinstance(value, str) else None
        if problem:
            self.fail(problem, param, ctx)
        return value


IDENT = Ident()


def _argument_problem(args: list[str]) -> str | None:
    """Arguments a shell can pass but no command can use: invalid UTF-8 (decoded by Python as
    lone surrogates) or NUL characters (only possible from code)."""
    for position, arg in enumerate(args, start=1):
        if problem := text_problem(arg):
            return f"argument {position} {problem}; pass UTF-8 text"
    return None


class DreamGroup(click.Group):
    """Usage mistakes (unknown option, bad choice, missing argument) and every user error a
    command raises are one line, exit 2. Asking for help (a bare group) still prints the help."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        if parent is None and (problem := _argument_problem(args)):
            raise UserError(problem)
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _usage_error(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _usage_error(exc) from None
        except click.ClickException:
            raise
        except Exception as exc:
            translated = user_error(exc)
            if translated is None:
                raise
            raise translated from None


def _usage_error(exc: click.UsageError) -> UserError:
    where = exc.ctx.command_path if exc.ctx is not None else "dream"
    message = " ".join(exc.format_message().split())
    return UserError(f"{message} (see `{where} --help`)")


@click.group(cls=DreamGroup)
@click.option("--log-level", default=None, help="DEBUG, INFO, WARNING (default from DREAM_LOG_LEVEL).")
@click.pass_context
def main(ctx: click.Context, log_level: str | None) -> None:
    """dream-worker: keeps an agent's long-term memory healthy between sessions."""
    ctx.ensure_object(dict)["log_level"] = log_level


# ---- db -------------------------------------------------------------------------------------
@main.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@click.pass_context
@user_errors
def db_upgrade(ctx: click.Context) -> None:
    """Apply all migrations (creates the SQLite file or the pgvector extension as needed)."""
    from worker.store.migrate import upgrade

    app = _app(ctx, create=True)
    upgrade(app.engine)
    click.echo(f"database at head: {app.engine.url.render_as_string(hide_password=True)}")


@db.command("check")
@click.pass_context
@user_errors
def db_check(ctx: click.Context) -> None:
    """Fail if the models differ from what the migrations build."""
    from alembic.util.exc import AutogenerateDiffsDetected

    from worker.store.migrate import check

    try:
        check(_app(ctx).engine)
    except AutogenerateDiffsDetected as exc:
        raise UserError(f"models and migrations differ: {exc}") from None
    click.echo("models match migrations")


# ---- notes ----------------------------------------------------------------------------------
@main.group()
def notes() -> None:
    """Import, export and add notes."""


@notes.command("import")
@click.argument("file")
@click.pass_context
@user_errors
def notes_import(ctx: click.Context, file: str) -> None:
    """Import notes from a JSONL FILE (- for stdin); all-or-nothing and idempotent."""
    from worker.ingest.notes import import_notes

    result = import_notes(_app(ctx), _lines(file))
    click.echo(f"read {result.read} notes: {result.inserted} added, {result.duplicates} already present")


@notes.command("export")
@click.option("--status", default=None, help="active, pending, revoked or archived")
@click.option("--agent", default=None, type=IDENT)
@click.option("--user", default=None, type=IDENT)
@click.option("--company", default=None, type=IDENT)
@click.option("--with-embedding", is_flag=True, help="Include the stored vectors.")
@click.pass_context
@user_errors
def notes_export(ctx: click.Context, status: str | None, agent: str | None, user: str | None,
                 company: str | None, with_embedding: bool) -> None:
    """Write notes as JSONL to stdout, with status, pointers, comments and lineage."""
    from worker.export import export_notes

    if status is not None and status not in ("active", "pending", "revoked", "archived"):
        raise UserError(f"unknown status {status!r}; use active, pending, revoked or archived")
    out = sys.stdout
    for line in export_notes(_app(ctx), status=status, agent_id=agent, user_id=user,
                             company_id=company, with_embedding=with_embedding):
        out.write(line + "\n")


# ---- sessions and entities -----------------------------------------------------------------
@main.group()
def sessions() -> None:
    """Record agent sessions (what the gate counts)."""


@sessions.command("import")
@click.argument("file")
@click.pass_context
@user_errors
def sessions_import(ctx: click.Context, file: str) -> None:
    """Import sessions from JSONL: agent_id, started_at required; user_id, company_id, ended_at."""
    from worker.ingest.sessions import import_sessions

    result = import_sessions(_app(ctx), _lines(file))
    click.echo(f"read {result.read} sessions: {result.inserted} added, {result.duplicates} already present")


@sessions.command("add")
@click.option("--agent", required=True, type=IDENT)
@click.option("--user", default=None, type=IDENT)
@click.option("--company", default=None, type=IDENT)
@click.option("--at", "at", default=None, help="Start time (ISO-8601); default now.")
@click.pass_context
@user_errors
def sessions_add(ctx: click.Context, agent: str, user: str | None, company: str | None,
                 at: str | None) -> None:
    """Record one session for a scope."""
    from worker.ingest.sessions import import_sessions

    started = _timestamp(at, "--at") or utcnow()
    line = json.dumps({"agent_id": agent, "user_id": user, "company_id": company,
                       "started_at": started.isoformat()})
    import_sessions(_app(ctx), [line])
    click.echo(f"session recorded for {Scope(agent, user, company).key} at {started.isoformat()}")


@main.group()
def entities() -> None:
    """The reference registry used by stale-reference pruning."""


@entities.command("import")
@click.argument("file")
@click.pass_context
@user_errors
def entities_import(ctx: click.Context, file: str) -> None:
    """Import JSONL lines {kind: agent|user|company|conversation, id, status, ...}; upserts."""
    from worker.ingest.entities import import_entities

    result = import_entities(_app(ctx), _lines(file))
    click.echo(f"read {result.read} entities: {result.inserted} upserted")


# ---- runs -----------------------------------------------------------------------------------
@main.command("run")
@click.option("--agent", default=None, type=IDENT)
@click.option("--user", default=None, type=IDENT)
@click.option("--company", default=None, type=IDENT)
@click.option("--due", is_flag=True, help="Run every scope the gate finds due.")
@click.option("--force", is_flag=True,
              help="Bypass the gate (never the lease, never the blast-radius guard).")
@click.option("--allow-retire", type=click.IntRange(0, 10_000_000), default=None, metavar="N",
              help="Let this run retire up to N notes past the blast-radius guard's share "
                   "(the count a blocked run's reason names).")
@click.option("--dry-run", is_flag=True, help="Record proposed changes as steps; apply nothing.")
@click.option("--phase", "phases", multiple=True, type=click.Choice(PHASES), help="Only these phases.")
@click.option("--now", default=None, help="Clock for the gate and the archive rules (ISO-8601).")
@click.option("--via-celery", is_flag=True, help="Enqueue on the broker instead of running here.")
@click.pass_context
@user_errors
def run_cmd(ctx: click.Context, agent: str | None, user: str | None, company: str | None,
            due: bool, force: bool, allow_retire: int | None, dry_run: bool,
            phases: tuple[str, ...], now: str | None, via_celery: bool) -> None:
    """Run a dream for one scope (in-process by default) or for every due scope.

    --due also resumes every queued or interrupted run (a killed run, a lost broker message)."""
    from worker.runs import service

    if bool(agent) == due:
        raise UserError("give either --agent (with optional --user/--company) or --due")
    if (user or company) and not agent:
        raise UserError("--user and --company need --agent")
    clock = _timestamp(now, "--now")
    app = _app(ctx)
    if via_celery and not app.settings.broker_url:
        raise UserError("--via-celery needs a broker: set DREAM_BROKER_URL (e.g. redis://127.0.0.1:6379/0)")
    if via_celery:
        from worker.tasks import check_broker

        check_broker(app.settings.broker_url)  # before any run row is written
    if due:
        if force or allow_retire is not None:
            raise UserError("--due runs what the gate allows; use --agent ... --force (and "
                            "--allow-retire N) for one scope")
        result = service.gate_check(app, now=clock)
        run_ids = result.created + result.retried + result.requeued
        if not via_celery:
            # In-process, every waiting run is ours to resume: a claim is atomic, so a Celery
            # worker that holds the same message simply finds it taken (R4).
            run_ids += [r for r in service.unclaimed_runs(app) if r not in run_ids]
        if not run_ids:
            click.echo(f"no scope is due ({len(result.skipped)} checked)")
    else:
        assert agent is not None
        scope = Scope(agent, user, company)
        service.ensure_scope_known(app, scope)
        if not force:
            decision = service.scope_gate(app, scope, now=clock)
            if not decision.due:
                click.echo(f"not due for {scope.key}: {decision.reason}; use --force to run anyway")
                return
        run_id = service.create_run(app, scope, trigger="cli", force=force, dry_run=dry_run,
                                    phases=list(phases) or None, clock=clock,
                                    allow_retire=allow_retire)
        if run_id is None:
            raise UserError(service.busy_message(app, scope))
        run_ids = [run_id]
    for run_id in run_ids:
        if via_celery:
            from worker.tasks import enqueue_run

            enqueue_run(run_id, app)
            click.echo(f"run {run_id} queued on the broker; follow it with `dream runs show {run_id}`")
            continue
        status = service.execute_run(app, run_id)
        _print_summary(app, run_id, status)
        if status == RunStatus.INTERRUPTED.value:
            click.echo(f"run {run_id} lost its lease to another executor or the gate check; "
                       "resume it with `dream run --due`")


def _print_summary(app: App, run_id: str, status: str) -> None:
    from worker.reporting import run_tree

    tree = run_tree(app, run_id)
    click.echo(f"run {run_id} {status}  scope={tree['scope']}")
    if tree.get("status_reason"):
        click.echo(f"  {status}: {tree['status_reason']}")
    for step in tree["steps"]:
        counters = ", ".join(f"{k}={v}" for k, v in (step["output"] or {}).items()
                             if isinstance(v, int | float | str) and k != "reason")
        reason = (step["output"] or {}).get("reason") or step.get("error") or ""
        click.echo(f"  {step['phase']:<15} {step['status']:<10} {step['duration_ms'] or 0:>8.1f} ms  "
                   f"{counters}{'  (' + reason + ')' if reason else ''}")


@main.group()
def runs() -> None:
    """Inspect dream runs and their steps."""


@runs.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000))
@click.pass_context
@user_errors
def runs_list(ctx: click.Context, as_json: bool, limit: int) -> None:
    """Most recent runs first."""
    from worker.reporting import list_runs

    rows = list_runs(_app(ctx), limit=limit)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no runs yet; start one with `dream run --agent A --force` or `dream demo`")
    for r in rows:
        why = r["status_reason"] or (r["error"] if r["status"] == RunStatus.FAILED.value else None)
        click.echo(f"{r['id']}  {r['status']:<11} {r['created_at'][:19]}  {r['scope']}"
                   + (f"  ({why})" if why else ""))


@runs.command("cancel")
@click.argument("run_id")
@click.option("--reason", default="cancelled by the operator", show_default=True,
              help="Recorded on the run (ids and words, no note text).")
@click.pass_context
@user_errors
def runs_cancel(ctx: click.Context, run_id: str, reason: str) -> None:
    """Cancel a queued, interrupted or running run and free its scope."""
    from worker.runs.service import cancel_run

    was = cancel_run(_app(ctx), run_id, reason)
    click.echo(f"run {run_id} cancelled (was {was})")
    if was == RunStatus.RUNNING.value:
        click.echo("its executor stops at its next write; what it applied stays recorded: "
                   f"`dream undo {run_id}` reverts it")


@runs.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@user_errors
def runs_show(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """The step tree of one run with timings and counts."""
    from worker.reporting import render_tree, run_tree

    tree = run_tree(_app(ctx), run_id)
    click.echo(json.dumps(tree, indent=2) if as_json else render_tree(tree))


@main.command("gate")
@click.option("--now", default=None, help="Clock for the gate (ISO-8601).")
@click.option("--explain", is_flag=True,
              help="Only show each scope's decision and why; create no run.")
@click.option("--json", "as_json", is_flag=True, help="With --explain: one JSON object.")
@click.option("--agent", default=None, help="With --explain: only this scope (agent id).")
@click.option("--user", default=None)
@click.option("--company", default=None)
@click.pass_context
@user_errors
def gate_cmd(ctx: click.Context, now: str | None, explain: bool, as_json: bool,
             agent: str | None, user: str | None, company: str | None) -> None:
    """What Celery beat does: recover lost runs, create a run for every due scope, and hand
    them to the broker (DREAM_BROKER_URL); without a broker they wait for `dream run --due`."""
    from worker.runs.service import decide_scopes, gate_check, scope_known

    if (as_json or agent) and not explain:
        raise UserError(f"{'--json' if as_json else '--agent'} goes with --explain")
    if (user or company) and not agent:
        raise UserError("--user and --company need --agent")
    app = _app(ctx)
    clock = _timestamp(now, "--now")
    if explain:
        only = None
        if agent:
            only = [Scope(agent, user, company)]
            if not scope_known(app, only[0]):
                raise UserError(f"unknown scope {only[0].key}: it has no notes and no sessions; "
                                "check --agent/--user/--company (None is a value, not a wildcard)")
        decisions = decide_scopes(app, clock or utcnow(), only)
        if as_json:
            click.echo(json.dumps({"scopes": [{"scope": scope.key, **d.as_dict()}
                                              for scope, d in decisions.items()]}, indent=2))
            return
        if not decisions:
            click.echo("no scopes yet: import notes or record sessions first")
        for scope, d in decisions.items():
            click.echo(f"{'due' if d.due else 'not due':<8} {d.rule.value:<20} {scope.key}  "
                       f"{d.reason}")
        return
    if app.settings.broker_url:
        from worker.tasks import check_broker

        check_broker(app.settings.broker_url)  # before any run row is written
    result = gate_check(app, now=clock)
    click.echo(f"created {len(result.created)} runs, {len(result.skipped)} scopes not due, "
               f"{len(result.retried)} interrupted runs to retry, {len(result.requeued)} "
               f"unclaimed runs handed out again, {len(result.failed)} given up")
    handed_out = result.created + result.retried + result.requeued
    if not handed_out:
        return
    if app.settings.broker_url:
        from worker.tasks import enqueue_run

        for run_id in handed_out:
            enqueue_run(run_id, app)
        click.echo(f"{len(handed_out)} runs sent to the broker")
    else:
        click.echo(f"no broker (DREAM_BROKER_URL unset): execute them here with `dream run "
                   f"--due`; unclaimed runs are failed after {app.settings.max_attempts} "
                   f"hand-overs of {app.settings.queued_timeout_seconds} s")


@main.command("demo")
@click.option("--database", default=None, help="SQLite file for the demo (default: a fresh demo.db).")
@click.pass_context
@user_errors
def demo_cmd(ctx: click.Context, database: str | None) -> None:
    """Load a small built-in store that shows every phase, dream on it, and explain the result."""
    from worker.demo import run_demo

    run_demo(database, echo=click.echo)


def _register_optional() -> None:
    """Commands owned by other modules register themselves here (keeps this file a thin shell)."""
    import importlib

    for module in ("worker.cli_host", "worker.cli_safety", "worker.cli_api", "worker.cli_bench",
                   "worker.cli_examples", "worker.cli_mcp"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        mod.register(main)


_register_optional()

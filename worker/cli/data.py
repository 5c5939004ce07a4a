"""`dream notes`, `dream sessions` and `dream entities`: JSONL import and export of the store."""

from __future__ import annotations

import json
import sys

import click

from worker.cli.common import (
    IDENT,
    cli_app,
    echo_imported,
    export_records,
    parse_past_timestamp,
    read_lines,
    scope_options,
    standard_stream,
    write_export,
)
from worker.cli.errors import UserError, stop_says, user_errors
from worker.clock import utcnow
from worker.domain.types import Scope


def register(main: click.Group) -> None:
    main.add_command(notes)
    main.add_command(sessions)
    main.add_command(entities)


@click.group()
def notes() -> None:
    """Import, export and add notes."""


@notes.command("import")
@stop_says("the import is one transaction, stored whole or not at all; run it again (lines "
           "already stored are skipped)")
@click.argument("file")
@click.pass_context
@user_errors
def notes_import(ctx: click.Context, file: str) -> None:
    """Import notes from a JSONL FILE (- for stdin); all-or-nothing and idempotent."""
    from worker.ingest.notes import import_notes

    result = import_notes(cli_app(ctx), read_lines(file))
    echo_imported(result, "notes")


@notes.command("export")
@stop_says("the output holds only the notes written before the stop; export again")
@click.option("--status", default=None,
              help="Only notes with this status: active, pending, revoked or archived.")
@click.option("--agent", default=None, type=IDENT,
              help="Only this agent's notes (of every user and company unless given).")
@click.option("--user", default=None, type=IDENT, help="Only this user's notes.")
@click.option("--company", default=None, type=IDENT, help="Only this company's notes.")
@click.option("--with-embedding", is_flag=True, help="Include the stored vectors.")
@click.pass_context
@user_errors
def notes_export(ctx: click.Context, status: str | None, agent: str | None, user: str | None,
                 company: str | None, with_embedding: bool) -> None:
    """Write notes as JSONL to stdout, with status, pointers, comments and lineage.

    Without options: every note of every scope. A scope option no note, session or run
    matches is an error (exit 3)."""
    from worker.export import export_notes

    if status is not None and status not in ("active", "pending", "revoked", "archived"):
        raise UserError(f"unknown status {status!r}; use active, pending, revoked or archived")
    out = standard_stream(sys.stdout, "notes export writes to standard output",
                          "redirect it to a file (> notes.jsonl)")
    write_export(out, export_notes(cli_app(ctx), status=status, agent_id=agent, user_id=user,
                                   company_id=company, with_embedding=with_embedding), "notes")


# ---- sessions and entities -----------------------------------------------------------------
@click.group()
def sessions() -> None:
    """Record agent sessions (what the gate counts)."""


@sessions.command("import")
@stop_says("the import is one transaction, stored whole or not at all; run it again (sessions "
           "already stored are skipped)")
@click.argument("file")
@click.pass_context
@user_errors
def sessions_import(ctx: click.Context, file: str) -> None:
    """Import sessions from JSONL (- for stdin): agent_id, started_at required; id, user_id,
    company_id, ended_at, recorded_at optional; all-or-nothing and idempotent by id."""
    from worker.ingest.sessions import import_sessions

    result = import_sessions(cli_app(ctx), read_lines(file), present=utcnow())
    echo_imported(result, "sessions")


@sessions.command("export")
@stop_says("the output holds only the sessions written before the stop; export again")
@click.pass_context
@user_errors
def sessions_export(ctx: click.Context) -> None:
    """Write every session as JSONL to stdout, in the form `dream sessions import` reads."""
    export_records(ctx, "sessions")


@sessions.command("add")
@stop_says("the session is one write, recorded whole or not at all")
@scope_options
@click.option("--at", "at", default=None, help="Start time (ISO-8601); default now.")
@click.option("--ended-at", "ended_at", default=None,
              help="End time (ISO-8601), once it has ended: the same --at again records the end "
                   "of a session added without one.")
@click.pass_context
@user_errors
def sessions_add(ctx: click.Context, agent: str, user: str | None, company: str | None,
                 at: str | None, ended_at: str | None) -> None:
    """Record one session for a scope (or the end of one recorded without it)."""
    from worker.ingest.sessions import EndRecorded, import_sessions

    started = parse_past_timestamp(
        at, "--at", "a session is recorded once it has started (the gate would not count it "
        "until then); give the time it started, or leave --at out for now") or utcnow()
    ended = parse_past_timestamp(
        ended_at, "--ended-at", "a session's end is recorded once it has ended (the gate's idle "
        "wait would take it for activity); leave --ended-at out while it goes on")
    key = Scope(agent, user, company).key
    # The importer's words are a file's (a line number, its fields, the id it derives): the
    # refusals this one line can meet are said here with the options the user typed.
    if ended is not None and ended < started:
        raise UserError(f"--ended-at {ended.isoformat()} is before --at {started.isoformat()}; "
                        "give the time the session ended, or leave --ended-at out")
    line = json.dumps({"agent_id": agent, "user_id": user, "company_id": company,
                       "started_at": started.isoformat(),
                       "ended_at": ended.isoformat() if ended else None})
    try:
        result = import_sessions(cli_app(ctx), [line], present=utcnow())
    except EndRecorded as exc:
        raise UserError(f"the session of {key} that started at {started.isoformat()} (--at) "
                        f"already ended at {exc.was.isoformat()}, not {exc.end.isoformat()} "
                        "(--ended-at); give the end it has, or leave --ended-at out") from None
    if result.inserted:
        click.echo(f"session recorded for {key} at {started.isoformat()}"
                   + (f", ended {ended.isoformat()}" if ended else ""))
    elif result.ended:
        click.echo(f"session end recorded for {key} at {started.isoformat()}: ended "
                   f"{ended.isoformat() if ended else ''}")
    else:
        click.echo(f"session already present for {key} at {started.isoformat()}; nothing "
                   "added")


@click.group()
def entities() -> None:
    """The reference registry used by stale-reference pruning."""


@entities.command("import")
@stop_says("the import is one transaction, stored whole or not at all; run it again (it upserts)")
@click.argument("file")
@click.pass_context
@user_errors
def entities_import(ctx: click.Context, file: str) -> None:
    """Import JSONL lines {kind: agent|user|company|conversation, id, status, ...}; upserts."""
    from worker.ingest.entities import import_entities

    result = import_entities(cli_app(ctx), read_lines(file))
    if not result.read:
        echo_imported(result, "entities")
        return
    click.echo(f"read {result.read} entities: {result.inserted} upserted")
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)


@entities.command("export")
@stop_says("the output holds only the entities written before the stop; export again")
@click.pass_context
@user_errors
def entities_export(ctx: click.Context) -> None:
    """Write every agent, user, company and conversation as JSONL to stdout, with its status
    and settings, in the form `dream entities import` reads."""
    export_records(ctx, "entities")

"""`dream undo` and `dream erase`: thin shells over worker.safety.undo / worker.safety.erase."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from worker.cli.common import (
    IDENT,
    STORED_IDENT,
    STORED_USER_IDENT,
    cli_app,
    echo_batch_releases,
    json_option,
    operator,
)
from worker.cli.errors import UserError, stop_says, user_errors
from worker.errors import Conflict, InvalidInput, NotFound

if TYPE_CHECKING:
    from worker.safety.erase import EraseResult


def register(main: click.Group) -> None:
    main.add_command(undo_cmd)
    main.add_command(erase_cmd)


@click.command("undo")
@stop_says("the undo is one transaction, applied whole or not at all; `dream runs show RUN_ID` "
           "says which; run it again if it was not")
@click.argument("run_id", type=IDENT)
@click.option("--force-cascade", is_flag=True,
              help="Also undo later runs that changed the same notes, then overwrite host edits "
                   "to the fields this run changed.")
@json_option
@click.pass_context
@user_errors
def undo_cmd(ctx: click.Context, run_id: str, force_cascade: bool, as_json: bool) -> None:
    """Revert every change RUN_ID made, in one transaction (refuses if a note changed since).

    RUN_ID is a run's id, or the `fuse-…`, `remember-…` or `erase-…` id that `dream fuse`,
    `dream notes add` (an UPDATE) or `dream erase` printed. --json prints what became of each
    note (`notes`); every refusal prints `"undone": false`, the notes that refuse it and why
    (`refused`, empty when none does) and its `error`, then fails with its one error line."""
    from worker.safety.undo import LOGGED_WITHOUT_RUN, UndoRefused, undo_run

    try:
        result = undo_run(cli_app(ctx), run_id, force_cascade=force_cascade, by=operator())
    except (InvalidInput, NotFound, Conflict) as refused:
        # Every refusal, not only a note's (an unknown id, one already undone, a run still
        # going): a script reading --json gets its object. The list on stdout (empty when no
        # note refuses); the error line and its exit code as without --json.
        if as_json:
            notes = refused.details() if isinstance(refused, UndoRefused) else {"refused": []}
            click.echo(json.dumps({"run_id": run_id, "undone": False, **notes,
                                   "error": str(refused)}, indent=2))
        raise
    if as_json:
        click.echo(json.dumps({"undone": True, **result.as_dict()}, indent=2))
        return
    for rid in result.run_ids:  # a fuse, remember or erase id names no run
        click.echo(f"undone {rid}" if rid.startswith(LOGGED_WITHOUT_RUN) else f"undone run {rid}")
    click.echo(result.summary())
    if result.outcomes and not run_id.startswith(LOGGED_WITHOUT_RUN):
        click.echo(f"each note: `dream runs show {run_id}`")


@click.command("erase")
@stop_says("the erasure is one transaction, done whole or not at all; run it again to be sure "
           "(it erases what is left; `dream runs cancel RUN_ID` releases a stopped run's "
           "provider batches)")
@click.option("--user", "user_id", default=None, type=STORED_USER_IDENT,
              help="Erase every note of this user.")
@click.option("--conversation", "conversation_id", default=None, type=STORED_IDENT,
              help="Erase every note taken from this conversation.")
@click.option("--note", "note_id", default=None, type=STORED_IDENT, help="Erase one note.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@user_errors
def erase_cmd(ctx: click.Context, user_id: str | None, conversation_id: str | None,
              note_id: str | None, yes: bool) -> None:
    """Hard-delete notes and everything derived from them (the only deleting command)."""
    from worker.safety.erase import erase

    if sum(v is not None for v in (user_id, conversation_id, note_id)) != 1:
        raise UserError("give exactly one of --user, --conversation or --note")
    if not yes:
        if sys.stdin is None or not sys.stdin.isatty():
            raise UserError("erase asks for confirmation but stdin is not a terminal; pass --yes "
                            "to erase without asking")
        if not click.confirm("Erase permanently, including derived notes?", default=False):
            raise UserError("aborted; nothing erased")
    _print_erased(erase(cli_app(ctx), user_id=user_id, conversation_id=conversation_id,
                        note_id=note_id))


def _print_erased(result: EraseResult) -> None:
    if not result.note_ids and not result.counts.get("examples") and not result.redated_ids:
        click.echo(f"nothing to erase: no notes or examples of {result.subject}")
    else:
        click.echo(f"erased {result.subject}: {len(result.note_ids)} notes, "
                   f"{len(result.derived_ids)} derived notes")
    for ids, line in (
        (result.note_ids, "removed note {}"),
        (result.derived_ids, "removed derived note {}"),
        (result.restored_ids, "restored note {} (it was merged into an erased note; active again)"),
        (result.held_ids, "kept note {} retired for review (an erased note had superseded it or "
                          "had been retired itself, or had dated the note that superseded it)"),
        (result.redated_ids, "dated note {} back to the latest statement of its fact left (the "
                             "later one it was dated at was erased)"),
        (result.lived_ids, "gave note {} its own expiry back (an erased note retired into it "
                           "had made it live longer)"),
    ):
        for nid in ids:
            click.echo("  " + line.format(nid))
    for rid in result.interrupted_runs:
        click.echo(f"  interrupted run {rid} (it had read the erased notes; `dream run --due` "
                   "resumes it from a fresh read)")
    for rid in result.cancelled_runs:
        click.echo(f"  cancelled run {rid} (its user was erased; nothing is left in its scope)")
    echo_batch_releases(result.batches, "  ")  # the stopped runs' batches quoted the text
    if result.erase_id is not None:
        click.echo(f"  to revert the restorations, holds and datings above: dream undo "
                   f"{result.erase_id}")
    counted = ", ".join(f"{k}={v}" for k, v in sorted(result.counts.items()) if v)
    if counted:  # like the run and undo summaries: only what was done
        click.echo("  " + counted)
    if result.checkpoint is not None and result.checkpoint != "done":
        click.echo(f"warning: SQLite checkpoint {result.checkpoint}", err=True)

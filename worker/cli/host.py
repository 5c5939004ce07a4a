"""`dream candidates`, `dream fuse`, `dream keep-apart`, `dream notes add`: thin shells over
worker.host (the same functions the HTTP API calls)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from contextlib import contextmanager

import click

from worker.cli.common import IDENT, FiniteRange, cli_app, json_option, scope_options
from worker.cli.errors import stop_says, user_errors
from worker.domain.limits import INT_MAX, ident_problem
from worker.domain.types import NoteType, Scope
from worker.errors import InvalidInput, NotFound


@contextmanager
def _ids_hint() -> Iterator[None]:
    """worker.host's "unknown note id X" (the API's 404 too) with where the shell finds ids."""
    try:
        yield
    except NotFound as exc:
        raise NotFound(f"{exc}; `dream candidates --agent …` lists the ids of a scope's similar "
                       "notes, `dream notes export` every id") from None


# What worker.host calls a fused note's fields (the API's and MCP's names), as options here.
_FUSE_OPTIONS = (("fused_content", "--content"), ("fused_importance", "--importance"))


@contextmanager
def _fuse_options() -> Iterator[None]:
    """worker.host's refusal of a fused text or importance, naming the option that gave it."""
    try:
        yield
    except InvalidInput as exc:
        said = str(exc)
        for field, option in _FUSE_OPTIONS:
            if said.startswith(field):
                raise InvalidInput(option + said.removeprefix(field)) from None
        raise


def _scope(agent: str, user: str | None, company: str | None) -> Scope:
    return Scope(agent, user, company)


@click.command("candidates")
@stop_says("nothing was changed (vectors it stored for notes without one are kept for the next "
           "look); run it again")
@scope_options
@click.option("--threshold", default=0.88, show_default=True, type=FiniteRange(0, 1),
              help="Cosine similarity a pair of notes needs to be listed.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 500),
              help="List at most this many candidates.")
@json_option
@click.pass_context
@user_errors
def candidates_cmd(ctx: click.Context, agent: str, user: str | None, company: str | None,
                   threshold: float, limit: int, as_json: bool) -> None:
    """Fusion candidates of one scope: similar pairs, the pairs a dream would ask a model about
    (pairs chained by shared notes as one topic), the open items of its latest run, then, in a
    small scope, its short notes as one topic (fuse the notes of one attribute, keep the rest
    apart).

    A note an open review item would change is left out until the item is decided; the last
    line names those items."""
    from worker.host import fusion_candidates, held_for_review
    from worker.runs.service import ensure_scope_known

    app, scope = cli_app(ctx), _scope(agent, user, company)
    ensure_scope_known(app, scope)
    items = fusion_candidates(app, scope, threshold, limit)
    if as_json:
        click.echo(json.dumps({"candidates": items}, indent=2))
        return
    if not items:
        click.echo("no candidates")
    for item in items:
        sim = item.get("similarity")
        found = item.get("sources") or ["cosine"]  # a pair below the threshold: what found it
        click.echo(f"{item['type']:<13} {'' if sim is None else f'{sim:.3f}':>6}  "
                   + "  ".join(item["note_ids"])
                   + ("" if found == ["cosine"] else f"  ({', '.join(found)})"))
    if held := held_for_review(app, scope):
        click.echo(_held_line(held, scope))


def _held_line(held: dict[str, int], scope: Scope) -> str:
    """Which open review items keep notes out of the list, and where to see them."""
    item_ids = sorted(set(held.values()))
    options = " ".join(f"--{name} {shlex.quote(value)}" for name, value in
                       (("agent", scope.agent_id), ("user", scope.user_id),
                        ("company", scope.company_id)) if value is not None)
    notes = f"{len(held)} note{'s' if len(held) != 1 else ''}"
    if len(item_ids) == 1:
        return (f"left out: {notes} that open review item {item_ids[0]} would change "
                f"(`dream review show {item_ids[0]} {options}`)")
    return (f"left out: {notes} that open review items {', '.join(map(str, item_ids))} would "
            f"change (`dream review list {options}`)")


def _judged(_ctx: click.Context, _param: click.Parameter,
            given: tuple[str, ...]) -> dict[str, int] | None:
    """``--judged ID=VERSION`` options as the host API's ``source_versions``: an id as any
    option takes one, a version in the range the API takes (no version is larger: a larger one
    would read as a note changed since)."""
    out: dict[str, int] = {}
    for item in given:
        nid, sep, version = item.rpartition("=")
        if not sep or not nid or not (version.isascii() and version.isdigit()) \
                or not 1 <= int(version) <= INT_MAX:
            raise click.BadParameter(f"{item[:80]!r} is not ID=VERSION (a version is a whole "
                                     f"number from 1 to {INT_MAX}, as `dream candidates "
                                     "--json` shows it)")
        if problem := ident_problem(nid):
            raise click.BadParameter(f"{item[:80]!r}: the note id {problem}")
        if nid in out:  # the last one was taken silently
            raise click.BadParameter(f"note {nid!r} is named twice; give each source's version "
                                     "once")
        out[nid] = int(version)
    return out or None


judged_option = click.option(
    "--judged", multiple=True, metavar="ID=VERSION", callback=_judged,
    help="The version of a source your model judged (`dream candidates --json`); a source "
         "changed since is refused and nothing is written. Repeat per source.")


@click.command("fuse")
@stop_says("the fusion is one transaction, applied whole or not at all (`dream candidates` still"
           " lists the sources if not); run it again if it was not")
@click.argument("source_ids", nargs=-1, required=True, type=IDENT)
@click.option("--content", required=True, help="The fused text (your model's answer).")
@click.option("--importance", type=FiniteRange(0, 1), default=None,
              help="The fused note's importance (0-1; default: the sources' highest).")
@click.option("--strict", is_flag=True, help="Refuse text with facts no source states.")
@judged_option
@click.pass_context
@user_errors
def fuse_cmd(ctx: click.Context, source_ids: tuple[str, ...], content: str,
             importance: float | None, strict: bool, judged: dict[str, int] | None) -> None:
    """Replace SOURCE_IDS with one fused note (sources revoked, pointer and lineage kept)."""
    from worker.host import fuse

    with _ids_hint(), _fuse_options():
        result = fuse(cli_app(ctx), list(source_ids), content, importance, strict,
                      source_versions=judged)
    click.echo(f"fused {len(result.superseded)} notes into {result.note['id']}; undo it with "
               f"`dream undo {result.undo_id}`")
    if result.review_items_stale:
        click.echo(_stale_line(result.review_items_stale, "a source"))
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)


@click.command("keep-apart")
@stop_says("the mark is one write, recorded whole or not at all; run it again (it is idempotent)")
@click.argument("source_ids", nargs=-1, required=True, type=IDENT)
@judged_option
@click.pass_context
@user_errors
def keep_apart_cmd(ctx: click.Context, source_ids: tuple[str, ...],
                   judged: dict[str, int] | None) -> None:
    """Never offer SOURCE_IDS as a candidate again until one of them changes."""
    from worker.host import keep_apart

    with _ids_hint():
        result = keep_apart(cli_app(ctx), list(source_ids), source_versions=judged)
    click.echo(f"kept apart: {' '.join(result['note_ids'])}")
    if result["review_items_stale"]:
        click.echo(_stale_line(result["review_items_stale"], "two of these notes"))


def _stale_line(item_ids: list[int], named: str) -> str:
    """The open review items a host write made stale (recorded so: they can never apply)."""
    items = (f"review item {item_ids[0]}" if len(item_ids) == 1 else
             f"review items {', '.join(map(str, item_ids))}")
    return (f"{items}, proposed over {named}, now stale (recorded: it can never apply; "
            "`dream review list --status stale --agent …` shows it)")


@click.command("add")
@stop_says("the note is one write, stored whole or not at all; run it again (write-time dedup "
           "answers NOOP if it was stored)")
@scope_options
@click.option("--content", required=True, help="The note's text.")
@click.option("--type", "note_type", default="Context", show_default=True,
              type=click.Choice([t.value for t in NoteType], case_sensitive=False),
              help="The note's type; only notes of this type are compared.")
@click.option("--importance", type=FiniteRange(0, 1), default=0.5, show_default=True,
              help="How much the note matters (0-1).")
@click.option("--conversation", "conversation_id", default=None, type=IDENT,
              help="The conversation it was said in, recorded as its source.")
@click.option("--auto", is_flag=True,
              help="An agent's own note, not a person's: dreams may retire it (R26 keeps a "
                   "person's).")
@click.pass_context
@user_errors
def notes_add_cmd(ctx: click.Context, agent: str, user: str | None, company: str | None,
                  content: str, note_type: str, importance: float,
                  conversation_id: str | None, auto: bool) -> None:
    """Remember one note with write-time dedup; prints NOOP, UPDATE or ADD, the id and why."""
    from worker.host import remember

    result = remember(cli_app(ctx), _scope(agent, user, company), content, note_type, importance,
                      conversation_id, manual=not auto)
    click.echo(f"{result.action} {result.id}  ({result.reason})")
    if result.undo_id:
        click.echo(f"superseded {result.superseded_id}; undo it with `dream undo {result.undo_id}`")


def register(main: click.Group) -> None:
    main.add_command(candidates_cmd)
    main.add_command(fuse_cmd)
    main.add_command(keep_apart_cmd)
    notes = main.commands.get("notes")
    if isinstance(notes, click.Group):
        notes.add_command(notes_add_cmd)

"""`dream review list|show|approve|decline`: thin shells over worker.review.service (the same
functions the API, the dashboard and the MCP tools call)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from worker.cli.common import (
    IDENT,
    Outcome,
    cli_app,
    json_option,
    operator,
    scope_options,
)
from worker.cli.errors import READ_ONLY, UserError, stop_says, user_errors
from worker.domain.limits import INT_MAX, REASON_MAX, shown
from worker.domain.types import Scope
from worker.errors import NotFound
from worker.review.items import (
    STALE_MARKERS,
    WITHDRAWN_BY,
    BatchOutcome,
    ItemStatus,
    batch_outcome,
    decided_body,
)

F = TypeVar("F", bound=Callable[..., Any])


class ItemId(click.IntRange):
    """A review item id: a whole number from 1 (click's own message called it a "range")."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"{value!r} is not an item id: the item id must be an integer from 1 to "
                      f"{INT_MAX}, as `dream review list` shows it", param, ctx)


ITEM_ID = ItemId(1, INT_MAX)
STATUSES = ("open", "approved", "declined", "stale", "undone", "any")


def register(main: click.Group) -> None:
    main.add_command(review)


@click.group()
def review() -> None:
    """Changes a run proposed instead of applying (DREAM_APPLY_MODE=propose or safe_auto)."""


def _known_scope(ctx: click.Context, agent: str, user: str | None, company: str | None) -> Any:
    from worker.runs.service import ensure_scope_known

    app, scope = cli_app(ctx), Scope(agent, user, company)
    ensure_scope_known(app, scope)
    return app, scope


def _selector(app: Any, scope: Scope, item_id: int | None, run_id: str | None,
              all_: bool) -> Any:
    """The items to decide; a ``--run`` that names no run of the scope is refused first, as
    `dream review list --run` refuses it (``_check_run`` names the scope of another's run)."""
    from worker.review.service import Selector

    selector = Selector(item_id, run_id, all_)
    if sum((item_id is not None, run_id is not None, all_)) != 1:
        raise UserError("name one ITEM_ID, or --run RUN_ID (that run's open items), or --all "
                        "(every open item of the scope)")
    if run_id is not None:
        _check_run(app, scope, run_id)
    return selector


def _summary(item: dict[str, Any]) -> str:
    confidence = "" if item["confidence"] is None else f" confidence {item['confidence']:.2f}"
    relation = f" {item['relation']}" if item["relation"] else ""
    return (f"{item['id']:>6}  {item['status']:<8} {item['phase']:<14} {item['kind']:<7}"
            f"{relation}{confidence}  notes {' '.join(item['note_ids'])}")


@review.command("list")
@stop_says(READ_ONLY)
@scope_options
@click.option("--run", "run_id", default=None, type=IDENT, help="Only this run's items.")
@click.option("--status", type=click.Choice(STATUSES), default="open", show_default=True,
              help="Only items with this status (any: all).")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000),
              help="List at most this many items.")
@json_option
@click.pass_context
@user_errors
def list_cmd(ctx: click.Context, agent: str, user: str | None, company: str | None,
             run_id: str | None, status: str, limit: int, as_json: bool) -> None:
    """The scope's review items, oldest first (ids, phase, kind, the notes each would change)."""
    from worker.review.service import list_items

    app, scope = _known_scope(ctx, agent, user, company)
    items = list_items(app, scope, status=None if status == "any" else status, run_id=run_id,
                       limit=limit)
    if not items and run_id is not None:
        _check_run(app, scope, run_id)
    if as_json:
        click.echo(json.dumps({"items": items}, indent=2))
        return
    if not items:
        click.echo(f"no {'' if status == 'any' else status + ' '}review items")
    for item in items:
        click.echo(_summary(item))


def _check_run(app: Any, scope: Scope, run_id: str) -> None:
    """A --run that names no run of the scope is a mistake, not an empty list."""
    from worker.review.service import check_run_of

    check_run_of(app, scope, run_id, NotFound(
        f"run {run_id} is not a run of scope {scope.key}; list the scope's runs with "
        "`dream runs list`"))


@review.command("show")
@stop_says(READ_ONLY)
@click.argument("item_id", type=ITEM_ID)
@scope_options
@json_option
@click.pass_context
@user_errors
def show_cmd(ctx: click.Context, item_id: int, agent: str, user: str | None,
             company: str | None, as_json: bool) -> None:
    """One item: what it would write, why, and the current text of each note it names."""
    from worker.review.service import show_item

    app, scope = _known_scope(ctx, agent, user, company)
    item = show_item(app, scope, item_id)
    if as_json:
        click.echo(json.dumps(item, indent=2))
        return
    click.echo(_summary(item))
    click.echo(f"  proposed by run {item['run_id']} at {item['created_at']}")
    if item["reason"]:
        click.echo(f"  reason: {shown(item['reason'])}")
    if item["content"]:
        click.echo(f"  fused text: {shown(item['content'])}")
    for note in item["notes"]:
        mark = "  (changed since)" if note["changed"] else ""
        click.echo(f"  note {note['id']} v{note['version']} {note['status']}{mark}: "
                   f"{shown(note['content'])}")
    for example in item["examples"]:
        mark = "  (changed since)" if example["changed"] else ""
        click.echo(f"  example {example['id']} v{example['version']} {example['status']}{mark}")
    for line in decision_lines(item):  # who decided and why, as stored (an older row's too)
        click.echo(f"  {shown(line)}")


def decision_lines(item: dict[str, Any]) -> list[str]:
    """What became of a decided item, in words: who approved or declined it and when, and
    what happened since. ``decided_by`` is who decided, never who undid the approval's run
    (not recorded): an undone item's line names its approver as the approver."""
    status, by, at = item["status"], item["decided_by"], item["decided_at"]
    applied, outcome = item["applied_run_id"], item["outcome"]
    if status == ItemStatus.OPEN:
        return []
    if status == ItemStatus.DECLINED and by == WITHDRAWN_BY:
        return [f"withdrawn at {at}: run {item['run_id']}, which proposed it, was undone"]
    if status == ItemStatus.APPROVED:
        return [f"approved by {by} at {at}, applied in run {applied}; `dream undo {applied}` "
                "reverts it"]
    if status == ItemStatus.UNDONE:
        return [f"approved by {by} at {at}, applied in run {applied}",
                f"undone: run {applied} was undone since; the next dream proposes it afresh"]
    if status == ItemStatus.DECLINED:
        reason = f": {outcome}" if outcome and outcome != "declined" else ""
        return [f"declined by {by} at {at}{reason}"]
    found = f" (found when {by} approved it)" if by and by not in STALE_MARKERS else ""
    return [f"{status} since {at}{found}: {outcome}"]


def _decision_options(fn: F) -> F:
    fn = json_option(fn)
    fn = click.option("--by", default=None, type=IDENT,
                      help="Who decides (recorded on the item as cli:<by>; default: your login "
                           "name).")(fn)
    fn = click.option("--all", "all_", is_flag=True, help="Every open item of the scope.")(fn)
    fn = click.option("--run", "run_id", default=None, type=IDENT,
                      help="Every open item this run proposed.")(fn)
    fn = scope_options(fn)
    return click.argument("item_id", type=ITEM_ID, required=False)(fn)


REVIEW_EXIT_CODES = {BatchOutcome.DONE: Outcome.DONE, BatchOutcome.BLOCKED: Outcome.BLOCKED,
                     BatchOutcome.STALE: Outcome.STALE}


def review_exit_code(statuses: list[str]) -> int:
    """0 when every item was decided as asked; else blocked (10) before stale (14): an item the
    guard left open waits for you, a stale one (or one decided meanwhile) only for the next
    run (``batch_outcome``)."""
    return int(REVIEW_EXIT_CODES[batch_outcome(statuses)])


def _echo(ctx: click.Context, results: list[Any], as_json: bool) -> None:
    """Print each item's answer, then exit with ``review_exit_code`` of them."""
    if as_json:
        click.echo(json.dumps(decided_body(results), indent=2))
    else:
        for r in results:
            click.echo(r.line)
        if not results:
            click.echo("no open review items")
    ctx.exit(review_exit_code([r.status for r in results]))


@review.command("approve")
@stop_says("items decided before the stop stay decided, each with its run; `dream review list` "
           "shows what is still open")
@_decision_options
@click.pass_context
@user_errors
def approve_cmd(ctx: click.Context, item_id: int | None, agent: str, user: str | None,
                company: str | None, run_id: str | None, all_: bool, by: str,
                as_json: bool) -> None:
    """Apply ITEM_ID (or a run's items, or all) in its own run; `dream undo RUN` reverts it.

    A note changed since the proposal makes the item stale: refused, nothing written. A batch
    exits 10 when the blast-radius guard left an item open, else 14 when an item was stale."""
    from worker.review.approval import ApprovalStopped
    from worker.review.service import approve

    app, scope = _known_scope(ctx, agent, user, company)
    try:
        decided = approve(app, scope, _selector(app, scope, item_id, run_id, all_),
                          operator(by))
    except ApprovalStopped as stop:
        click.echo(stop.line)
        ctx.exit(int(Outcome.INTERRUPTED))
    _echo(ctx, decided, as_json)


@review.command("decline")
@stop_says("items declined before the stop stay declined; `dream review list` shows what is "
           "still open")
@_decision_options
@click.option("--reason", default=None, help="Why (recorded; no note text needed).")
@click.pass_context
@user_errors
def decline_cmd(ctx: click.Context, item_id: int | None, agent: str, user: str | None,
                company: str | None, run_id: str | None, all_: bool, by: str, as_json: bool,
                reason: str | None) -> None:
    """Decline ITEM_ID (or a run's items, or all): not proposed again until a note changes.

    Exits 14 when an item of a batch was decided meanwhile by someone else."""
    from worker.review.service import decline

    if reason is not None and (len(reason) > REASON_MAX or "\x00" in reason):
        raise UserError(f"--reason must be at most {REASON_MAX} characters, without NUL")
    app, scope = _known_scope(ctx, agent, user, company)
    _echo(ctx, decline(app, scope, _selector(app, scope, item_id, run_id, all_), operator(by),
                       reason), as_json)

"""`dream run`, `dream runs` and `dream gate`: start dream runs, inspect or cancel them, and
run the gate check that Celery beat runs."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

import click

from worker.app import App
from worker.cli.common import (
    IDENT,
    USER_IDENT,
    Outcome,
    cli_app,
    echo_batch_releases,
    json_option,
    parse_option_timestamp,
    parse_run_clock,
)
from worker.cli.errors import READ_ONLY, UserError, stop_says, user_errors
from worker.domain.limits import shown
from worker.domain.types import PHASES, RunStatus, Scope
from worker.runs.outcome import TAKEN_OVER
from worker.text.plural import counted

if TYPE_CHECKING:
    from worker.runs.engine import RunStopped
    from worker.runs.scheduling import GateResult


def register(main: click.Group) -> None:
    main.add_command(run_cmd)
    main.add_command(runs)
    main.add_command(gate_cmd)


@click.command("run")
@stop_says("every run it started ended as printed, was given back as interrupted, or waits "
           "as queued (`dream runs list` shows them); `dream run --due` runs what is left")
@click.option("--agent", default=None, type=IDENT, help="Scope: agent id (or give --due).")
@click.option("--user", default=None, type=USER_IDENT, help="Scope: user id.")
@click.option("--company", default=None, type=IDENT, help="Scope: company id.")
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
    from worker.runs.engine import RunStopped
    from worker.runs.start import NotDue, RunRequest, Via, start_run

    if bool(agent) == due:
        raise UserError("give either --agent (with optional --user/--company) or --due")
    if (user or company) and not agent:
        raise UserError("--user and --company need --agent")
    if due and (force or allow_retire is not None):
        raise UserError("--due runs what the gate allows; use --agent ... --force (and "
                        "--allow-retire N) for one scope")
    # --due executes the gate's runs (and resumes waiting ones) whole and for real, as beat
    # does: ignoring these would apply what a user asked only to see.
    if due and (dry_run or phases):
        option = "--dry-run" if dry_run else "--phase"
        raise UserError(f"{option} goes with --agent (one scope); --due runs every due scope's "
                        "whole dream for real, as beat does")
    clock = parse_option_timestamp(now, "--now") if dry_run else parse_run_clock(
        now, "add --dry-run to see what the run would do then" if agent else
        "`dream gate --explain --now TS` shows which scopes would be due then")
    app = cli_app(ctx, running=not via_celery)
    via = Via.CELERY if via_celery else Via.HERE
    if not agent:
        ctx.exit(_run_due(app, clock, via))
    request = RunRequest(Scope(agent, user, company), trigger="cli", force=force,
                         dry_run=dry_run, allow_retire=allow_retire, phases=phases,
                         clock=clock)
    try:
        started = start_run(app, request, via)
    except NotDue as exc:
        click.echo(str(exc))  # not an error: the gate did its job (exit 0, no run)
        return
    except RunStopped as stop:
        ctx.exit(_stopped(stop))
    _report(app, started.run_id, started.status, via)
    ctx.exit(run_exit_code(started.status))


def _stopped(stop: RunStopped) -> int:
    """The line of a run a signal stopped; the exit code of an interrupted run."""
    if stop.given_back:
        click.echo(f"run {stop.run_id} interrupted by {stop.signal_name}: the write in progress "
                   "was rolled back, what its phases applied before is kept (`dream undo "
                   f"{stop.run_id}` reverts it); `dream run --due` resumes it")
    else:
        click.echo(f"run {stop.run_id} stopped by {stop.signal_name}; it had already been "
                   f"cancelled or taken over (`dream runs show {stop.run_id}`)")
    return int(Outcome.INTERRUPTED)


# How a run ended: 0 succeeded (or queued on the broker, or not due); a run that stopped itself
# or did not finish says so.
RUN_EXIT_CODES = {RunStatus.BLOCKED.value: Outcome.BLOCKED,
                  RunStatus.PARTIAL.value: Outcome.PARTIAL, RunStatus.FAILED.value: Outcome.FAILED,
                  RunStatus.INTERRUPTED.value: Outcome.INTERRUPTED,
                  RunStatus.CANCELLED.value: Outcome.INTERRUPTED,
                  # This process's execution was cut short: another executor took the run over.
                  TAKEN_OVER: Outcome.INTERRUPTED}


def run_exit_code(status: str) -> int:
    return int(RUN_EXIT_CODES.get(status, Outcome.DONE))


def _run_due(app: App, clock: datetime | None, via: str) -> int:
    """`dream run --due`: the runs the gate hands out, executed here one after the other, or
    sent to the broker over one producer as the gate check task sends them (a "queued" line
    for each run sent; a broker that fails mid-way is one error line saying what was sent and
    what stays queued). The exit code of the worst run."""
    from worker.runs.start import Via, require_broker

    if via == Via.CELERY:
        from worker.tasks import send_runs

        require_broker(app)  # before any run row is written
        for run_id in send_runs(_due_runs(app, clock), app):
            _report(app, run_id, RunStatus.QUEUED.value, via)
        return int(Outcome.DONE)
    # Here: only the runs this invocation claims (a second `--due` at the same time runs and
    # reports its own); a claim is atomic, so a Celery worker holding the same message finds
    # it taken (R4).
    from worker.runs.due import execute_due, find_due
    from worker.runs.engine import RunStopped

    work = find_due(app, clock)
    if work.empty:
        click.echo(f"no scope is due ({len(work.check.skipped)} checked)")
    codes = [int(Outcome.DONE)]
    try:
        for run_id, status in execute_due(app, work, clock):
            _report(app, run_id, status, via)
            codes.append(run_exit_code(status))
    except RunStopped as stop:  # the due scopes after it get no run: nothing else is held
        codes.append(_stopped(stop))
        return max(codes)
    if not work.empty and len(codes) == 1:
        click.echo("no run left to execute here: another executor took every due scope and "
                   "waiting run")
    return max(codes)


def _due_runs(app: App, clock: datetime | None) -> list[str]:
    """What `--due --via-celery` sends: the runs the gate created or handed out again (each
    check's own: creation and recovery are compare-and-set)."""
    from worker.runs import service
    from worker.tasks import queue_backlog

    # Sent to the broker: runs behind its backlog are waiting, not lost.
    result = service.gate_check(app, now=clock, backlog=queue_backlog(app))
    run_ids = result.created + result.retried + result.requeued
    if not run_ids:
        from worker.runs.due import nothing_sent

        click.echo(nothing_sent(result))
    return run_ids


def _report(app: App, run_id: str, status: str, via: str) -> None:
    if via == "celery":
        click.echo(f"run {run_id} queued on the broker; follow it with `dream runs show {run_id}`")
        return
    if status == TAKEN_OVER:  # its steps and status are the other executor's, not ours
        click.echo(f"run {run_id}: this process lost the run's lease and another executor "
                   f"took it over; nothing more was written here; `dream runs show {run_id}` "
                   "says how it ended")
        return
    reason = _print_summary(app, run_id, status)
    # A run interrupted with a reason (an erasure in its scope) printed it; only one whose
    # lease lapsed under it carries none (it used to be told so after any reason too).
    if status == RunStatus.INTERRUPTED.value and not reason:
        click.echo(f"run {run_id} lost its lease to another executor or the gate check; "
                   "resume it with `dream run --due`")


def _print_summary(app: App, run_id: str, status: str) -> str | None:
    """Print the run's header, reason and phase lines; the reason it printed, if any."""
    from worker.reporting import duration_cell, run_tree, said_counters

    tree = run_tree(app, run_id)
    click.echo(f"run {run_id} {status}  scope={tree['scope']}")
    if tree.get("status_reason"):
        click.echo(f"  {status}: {shown(tree['status_reason'])}")
    for step in tree["steps"]:
        counters = said_counters(step["output"])
        reason = (step["output"] or {}).get("reason") or step.get("error") or ""
        said = "  ".join(part for part in (counters, f"({reason})" if reason else "") if part)
        click.echo(f"  {step['phase']:<15} {step['status']:<10} {duration_cell(step)}  "
                   f"{said}".rstrip())
    why: str | None = tree.get("status_reason")
    return why


@click.group()
def runs() -> None:
    """Inspect dream runs and their steps."""


@runs.command("list")
@stop_says(READ_ONLY)
@json_option
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000),
              help="List at most this many runs.")
@click.option("--agent", default=None, type=IDENT,
              help="Only runs of this agent's scopes (any user and company unless given).")
# Any id, the erased users' placeholder included: their runs are kept under it (a filter).
@click.option("--user", default=None, type=IDENT, help="Only runs of scopes of this user.")
@click.option("--company", default=None, type=IDENT,
              help="Only runs of scopes of this company.")
@click.option("--status", default=None, type=click.Choice([s.value for s in RunStatus]),
              help="Only runs in this status.")
@click.option("--after", default=None, type=IDENT, metavar="RUN_ID",
              help="The next page: the runs listed after this one (the last id shown).")
@click.pass_context
@user_errors
def runs_list(ctx: click.Context, as_json: bool, limit: int, agent: str | None,
              user: str | None, company: str | None, status: str | None,
              after: str | None) -> None:
    """Most recent runs first."""
    from worker.reporting import check_filter_known, list_runs_page

    within = {k: v for k, v in (("agent_id", agent), ("user_id", user),
                                 ("company_id", company)) if v is not None}
    page = list_runs_page(cli_app(ctx), limit=limit, status=status, within=within, after=after)
    rows = page["runs"]
    if not rows and after is None:
        check_filter_known(cli_app(ctx), None, within)
    if page["next"] is not None:  # on stderr: --json stays one document
        click.echo(f"more runs: add --after {page['next']}", err=True)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows and (within or status):
        click.echo("no runs match; `dream runs list` without filters shows the latest")
    elif not rows:
        click.echo("no runs yet; start one with `dream run --agent A --force` or `dream demo`")
    for r in rows:
        why = r["status_reason"] or (r["error"] if r["status"] == RunStatus.FAILED.value else None)
        click.echo(f"{r['id']}  {r['status']:<11} {r['created_at'][:19]}  {r['scope']}"
                   + (f"  ({shown(why)})" if why else ""))


@runs.command("cancel")
@stop_says("`dream runs show RUN_ID` says whether the run is cancelled; `dream runs cancel "
           "RUN_ID` again cancels it or releases the provider batches left")
@click.argument("run_id", type=IDENT)
@click.option("--reason", default="cancelled by the operator", show_default=True,
              help="Recorded on the run (ids and words, no note text).")
@click.pass_context
@user_errors
def runs_cancel(ctx: click.Context, run_id: str, reason: str) -> None:
    """Cancel a queued, interrupted or running run and free its scope; cancel its provider
    batches and delete their files (again, for a stopped run whose release left some)."""
    from worker.runs.service import cancel_run

    done = cancel_run(cli_app(ctx), run_id, reason)
    if done.was in (RunStatus.CANCELLED.value, RunStatus.FAILED.value):
        click.echo(f"run {run_id} was {done.was} already; releasing its provider batches again")
    else:
        click.echo(f"run {run_id} cancelled (was {done.was})")
    if done.was == RunStatus.RUNNING.value:
        click.echo("its executor stops at its next write; what it applied stays recorded: "
                   f"`dream undo {run_id}` reverts it")
    echo_batch_releases(done.batches)  # a failure here never undoes the cancel


@runs.command("show")
@stop_says(READ_ONLY)
@click.argument("run_id", type=IDENT)
@json_option
@click.pass_context
@user_errors
def runs_show(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """The step tree of one run with timings and counts."""
    from worker.reporting import render_tree, run_tree

    tree = run_tree(cli_app(ctx), run_id)
    click.echo(json.dumps(tree, indent=2) if as_json else render_tree(tree))


@click.command("gate")
@stop_says("runs it created wait as queued, handed out again by the next gate check (or `dream "
           "run --due`); nothing else was changed")
@click.option("--now", default=None,
              help="Clock for the gate and the runs it creates (ISO-8601).")
@click.option("--explain", is_flag=True,
              help="Only show each scope's decision and why; create no run.")
@click.option("--json", "as_json", is_flag=True, help="With --explain: one JSON object.")
@click.option("--agent", default=None, type=IDENT,
              help="With --explain: only this scope (agent id).")
@click.option("--user", default=None, type=USER_IDENT, help="With --agent: scope user id.")
@click.option("--company", default=None, type=IDENT, help="With --agent: scope company id.")
@click.pass_context
@user_errors
def gate_cmd(ctx: click.Context, now: str | None, explain: bool, as_json: bool,
             agent: str | None, user: str | None, company: str | None) -> None:
    """What Celery beat does: recover lost runs, create a run for every due scope, and hand
    them to the broker (DREAM_BROKER_URL); without a broker they wait for `dream run --due`."""
    if (as_json or agent) and not explain:
        raise UserError(f"{'--json' if as_json else '--agent'} goes with --explain")
    if (user or company) and not agent:
        raise UserError("--user and --company need --agent")
    clock = parse_option_timestamp(now, "--now") if explain else parse_run_clock(
        now, "`dream gate --explain --now TS` shows which scopes would be due then")
    app = cli_app(ctx)
    if explain:
        _explain(app, clock, Scope(agent, user, company) if agent else None, as_json)
    else:
        _gate_and_hand_out(app, clock)


def _explain(app: App, clock: datetime | None, scope: Scope | None, as_json: bool) -> None:
    """Each scope's gate decision and why (only ``scope``'s when given); creates no run."""
    from worker.runs.service import ensure_scope_known, explain_scopes

    if scope is not None:
        ensure_scope_known(app, scope)
    # No --now: the present, every dream and session counted (a worker's clock a little ahead
    # may stamp them after this process's present).
    decisions = explain_scopes(app, clock, None if scope is None else [scope])
    if as_json:
        click.echo(json.dumps({"scopes": [{"scope": s.key, **d.as_dict()}
                                          for s, d in decisions.items()]}, indent=2))
        return
    if not decisions:
        click.echo("no scopes yet: import notes or record sessions first")
    for s, d in decisions.items():
        click.echo(f"{'due' if d.due else 'not due':<8} {d.rule.value:<20} {s.key}  {d.reason}")


def _gate_summary(result: GateResult, backlog: int | None, patience: int) -> str:
    """`dream gate`'s line: what the check created, skipped, recovered and gave up."""
    from worker.runs.gate import GateRule

    # A due scope whose run is still queued or running is skipped too, but is not "not due".
    busy = sum(d.rule is GateRule.ALREADY_ACTIVE for d in result.decisions.values())
    held = f"{counted(busy, 'due scope')} already {'has' if busy == 1 else 'have'} a run, "
    waiting = sum(d.rule is GateRule.BACKING_OFF for d in result.decisions.values())
    backing_off = f" ({waiting} backing off after failed runs)" if waiting else ""
    return (f"created {counted(len(result.created), 'run')}, "
            f"{counted(len(result.skipped) - busy, 'scope')} not due{backing_off}, "
            f"{held if busy else ''}"
            f"{counted(len(result.retried), 'interrupted run')} to retry, "
            f"{counted(len(result.requeued), 'unclaimed run')} handed out again, "
            f"{len(result.failed)} given up"
            + (f" ({backlog} messages still queued: waiting runs get {patience} s)"
               if backlog else ""))


def _gate_and_hand_out(app: App, clock: datetime | None) -> None:
    """What beat runs: the gate check, then every created or recovered run to the broker."""
    from worker.runs.service import gate_check
    from worker.runs.start import require_broker

    backlog = None
    if app.settings.broker_url:
        from worker.tasks import queue_backlog

        require_broker(app)  # before any run row is written
        backlog = queue_backlog(app)
    result = gate_check(app, now=clock, backlog=backlog)
    click.echo(_gate_summary(result, backlog, app.settings.backlog_patience_seconds))
    handed_out = result.created + result.retried + result.requeued
    if not handed_out:
        return
    if app.settings.broker_url:
        from worker.tasks import enqueue_runs

        enqueue_runs(handed_out, app)  # over one producer, as the beat's gate_check task
        click.echo(f"{counted(len(handed_out), 'run')} sent to the broker")
    else:
        from worker.runs.service import hand_overs_before_failing

        hand_overs = counted(hand_overs_before_failing(app.settings), "hand-over")
        click.echo(f"no broker (DREAM_BROKER_URL unset): execute them here with `dream run "
                   f"--due`; unclaimed runs are failed after {hand_overs} of "
                   f"{app.settings.queued_timeout_seconds} s")

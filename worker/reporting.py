"""Read models for runs and steps: the shapes the CLI, the API and dashboards print."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.app import App
from worker.domain.limits import shown
from worker.domain.types import ERASED_USER, Scope
from worker.errors import InvalidInput, RunNotFound, UnknownScope
from worker.store.db import read_one_snapshot
from worker.store.models import DreamRunRow, RunStepRow
from worker.store.repositories.dashboard import NOTE_STATUSES, DashboardQueries, ScopeFilter


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def run_summary(run: DreamRunRow) -> dict[str, Any]:
    return {
        "id": run.id, "scope": run.scope_key, "agent_id": run.agent_id, "user_id": run.user_id,
        "company_id": run.company_id, "status": run.status, "trigger": run.trigger,
        "force": run.force, "dry_run": run.dry_run, "phases": run.phases,
        "attempts": run.attempts, "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at), "finished_at": _iso(run.finished_at),
        "clock": _iso(run.clock), "totals": run.totals or {}, "error": run.error,
        "status_reason": run.status_reason, "allow_retire": run.allow_retire,
        "requeues": run.requeues,
    }


def step_dict(step: RunStepRow) -> dict[str, Any]:
    return {
        "id": step.id, "phase": step.phase, "name": step.name, "status": step.status,
        "input": step.input, "output": step.output, "error": step.error,
        "prompt_name": step.prompt_name, "template_hash": step.template_hash,
        "model": step.model, "tokens_in": step.tokens_in, "tokens_out": step.tokens_out,
        "started_at": _iso(step.started_at), "finished_at": _iso(step.finished_at),
        "duration_ms": step.duration_ms,
    }


def list_runs(app: App, *, scope: Scope | None = None, status: str | None = None,
              since: Any = None, limit: int = 50,
              within: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``within``: agent_id / user_id / company_id every listed run's scope has."""
    runs: list[dict[str, Any]] = list_runs_page(app, scope=scope, status=status, since=since,
                                                limit=limit, within=within)["runs"]
    return runs


def list_runs_page(app: App, *, scope: Scope | None = None, status: str | None = None,
                   since: Any = None, limit: int = 50, within: dict[str, str] | None = None,
                   after: str | None = None) -> dict[str, Any]:
    """One page of ``list_runs``: ``{"runs", "next"}``, ``next`` the id to pass as ``after``
    for the following page (None on the last). ``after`` must be a run of the same listing
    (its scope, or one ``within`` names): another scope's run id tells nothing, not even that
    it exists."""
    with app.uow() as uow:
        cursor = uow.runs.get(after) if after is not None else None
        if after is not None and not _in_listing(cursor, scope, within):
            raise InvalidInput(f"after: {after!r} is no run of this listing; pass the last run "
                               "id of the page before (the one it named to go on with), with "
                               "the same filters")
        rows = uow.runs.list(scope, status, since, limit + 1, within=within, after=cursor)
    more = len(rows) > limit
    return {"runs": [run_summary(r) for r in rows[:limit]],
            "next": rows[limit - 1].id if more else None}


def check_filter_known(app: App, scope: Scope | None, within: dict[str, str] | None) -> None:
    """A runs filter someone typed (``dream runs list --agent``, an admin's ``GET /api/runs``)
    that no note, session or run has is a typo: UnknownScope, as `dream notes export` says it,
    never an empty list that reads as "no runs yet". A scoped caller's own scope is not typed."""
    from worker.runs.service import ensure_scope_known

    if scope is not None:
        ensure_scope_known(app, scope)  # one exact scope: the words of every other command
    elif within:
        with app.uow() as uow:
            known = uow.sessions.any_scope_matches(
                within.get("agent_id"), within.get("user_id"), within.get("company_id"))
        if not known:
            named = ", ".join(f"{k} {v!r}" for k, v in within.items())
            raise UnknownScope(f"unknown scope {named}: no note, session or run has it")


def _in_listing(run: DreamRunRow | None, scope: Scope | None,
                within: dict[str, str] | None) -> bool:
    if run is None or (scope is not None and run.scope_key != scope.key):
        return False
    return all(getattr(run, column) == value for column, value in (within or {}).items())


def run_tree(app: App, run_id: str) -> dict[str, Any]:
    """The run, its steps (parents with their children) and, once it is undone, ``undo``:
    what its undo did to each note (``worker.safety.undo_result.undo_record``)."""
    from worker.safety.undo_result import undo_record

    with app.uow() as uow:
        read_one_snapshot(uow.session)  # the run's row, steps and undo as of one moment
        run = uow.runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        out = run_summary(run)
        steps = uow.runs.steps(run_id)
        undo = undo_record(uow, run)
    if undo is not None:
        out["undo"] = undo
    parents = [step_dict(s) | {"children": []} for s in steps if s.parent_id is None]
    by_id = {p["id"]: p for p in parents}
    for s in steps:
        if s.parent_id is not None and s.parent_id in by_id:
            by_id[s.parent_id]["children"].append(step_dict(s))
    out["steps"] = parents
    return out


def render_tree(tree: dict[str, Any]) -> str:
    lines = [f"run {tree['id']}  {tree['status']}  scope={tree['scope']}  "
             f"trigger={tree['trigger']}{'  dry-run' if tree['dry_run'] else ''}"]
    if tree.get("status_reason"):
        lines.append(f"  {tree['status']}: {shown(tree['status_reason'])}")
    totals = tree.get("totals") or {}
    if "notes_before" in totals or "notes_after" in totals:
        # Only a finished run counts its notes after: "{}" would say it left none.
        lines.append(f"  notes before {_counted(totals.get('notes_before'))} → after "
                     f"{_counted(totals.get('notes_after'))}")
    if totals.get("duration_ms") is not None:
        lines.append(f"  duration {totals['duration_ms']:.1f} ms  model calls "
                     f"{totals.get('model_calls', 0)}  tokens "
                     f"{totals.get('tokens_in', 0)}/{totals.get('tokens_out', 0)}")
    elif "model_calls" in totals:  # a run stopped for good: its usage, written as it stopped
        lines.append(f"  model calls {totals['model_calls']}  tokens "
                     f"{totals.get('tokens_in', 0)}/{totals.get('tokens_out', 0)}")
    if said := batch_calls_said(totals):
        lines.append(f"  {said}")
    for step in tree["steps"]:
        lines.append(_step_line(step, "  "))
        for child in step["children"]:
            lines.append(_step_line(child, "      "))
            # What a contradictions step decided on its pairs (the notes it retired).
            lines.extend(f"          {shown(said)}" for said in step_actions(child))
    if tree.get("undo") is not None:
        lines.extend(_undo_lines(tree["undo"]))
    return "\n".join(lines)


def batch_calls_said(totals: dict[str, Any]) -> str:
    """What became of the batch calls an interrupted attempt left waiting (handed over to the
    attempt that resumed the run, or given up: nobody read their answers) and the tokens the
    provider billed after their phase (``domain.run_usage.batch_calls``), one line; "" when
    there is nothing to say."""
    said = []
    if handed := totals.get("model_calls_handed_over"):
        said.append(f"{handed} handed over to the attempt that resumed the run")
    if given := totals.get("model_calls_given_up"):
        said.append(f"{given} given up (the run stopped for good or no longer asked them; "
                    "nobody read their answers)")
    out = f"batch calls: {', '.join(said)}" if said else ""
    late = totals.get("tokens_billed_late")
    if isinstance(late, dict) and (late.get("tokens_in") or late.get("tokens_out")):
        out += (f"{'; ' if out else ''}tokens billed after their phase "
                f"{late.get('tokens_in', 0)}/{late.get('tokens_out', 0)} (in the run's tokens)")
    return out


UNDO_SHOWN = 20


def _undo_lines(undo: dict[str, Any]) -> list[str]:
    """What the run's undo did: its counts, then one line per note (the first ``UNDO_SHOWN``;
    ``--json`` lists them all)."""
    counts = undo["counts"]
    said = ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "nothing to revert"
    lines = [f"  undo: {said}"]
    for entry in undo["notes"][:UNDO_SHOWN]:
        change = f" ({entry['was']} → {entry['status']})" if entry.get("status") else ""
        host = ", over a host edit" if entry.get("overwrote_host_edit") else ""
        lines.append(f"      {entry['outcome']:<9} {entry['entity']} {entry['id']}{change}{host}")
    more = len(undo["notes"]) - UNDO_SHOWN
    if more > 0:
        lines.append(f"      (+{more} more; `dream runs show --json` lists every one)")
    return lines


def _counted(by_status: dict[str, int] | None) -> str:
    return "—" if by_status is None else str(by_status)


def said_counters(output: dict[str, Any] | None) -> str:
    """A phase step's counters that say what happened, ``k=v`` comma-separated: the non-zero
    numbers and the words (the judge), never the reason; what `dream run` and `dream demo`
    print per phase (``render_tree``, `dream runs show`, keeps every counter)."""
    return ", ".join(f"{k}={v}" for k, v in (output or {}).items()
                     if isinstance(v, int | float | str) and not isinstance(v, bool)
                     and v != 0 and k != "reason")


def duration_cell(step: dict[str, Any]) -> str:
    """A step's duration, 11 characters: "—" while none is known (running, or interrupted
    before a child of it finished), never a 0.0 ms the step did not take."""
    ms = step.get("duration_ms")
    return f"{'—':>8}   " if ms is None else f"{ms:>8.1f} ms"


def _step_line(step: dict[str, Any], indent: str) -> str:
    output = step.get("output") or {}
    # A flag only when set: "dry_run=False" under every child of a real run said nothing.
    counters = ", ".join(f"{k}={v}" for k, v in output.items()
                         if isinstance(v, int | float) and v is not False)
    reason = (output.get("reason") or output.get("verdict") or step.get("error")
              or release_said(output.get("release")))
    tokens = f"  tokens {step['tokens_in']}/{step['tokens_out']}" if step.get("tokens_in") else ""
    said = f"{counters}{tokens}{'  — ' + shown(str(reason)) if reason else ''}"
    notes = _held(step)
    return (f"{indent}{step['name']:<28} {step['status']:<10} {duration_cell(step)}  {said}"
            f"{'; ' if said and notes else ''}{notes}")


def release_said(release: Any) -> str:
    """What releasing a batch step's batch did (``output.release``), one line of ids: a
    released batch's step reads ``skipped`` and says why."""
    if not isinstance(release, dict):
        return ""
    did = "cancelled" if release.get("cancelled") else f"found {release.get('status')}"
    files = f"{len(release.get('deleted') or [])} file(s) deleted"
    problem = release.get("problem")
    return (f"released, nobody reads its answers: {did}, {files}"
            + (f"; not complete: {problem}" if problem else ""))


HELD_SHOWN = 10


def step_notes(step: dict[str, Any]) -> tuple[str, list[str]]:
    """The notes a step is about, ids only, as the step records them, with what they are to
    it: those a guard ``held`` back, a cluster's or a pair's ``notes``, the notes a prune or
    archive step ``archived`` or archive ``kept`` (protected, manual, never read). What `dream runs show` and `dream demo` print under a step."""
    output, given = step.get("output") or {}, step.get("input") or {}
    ids = [str(i) for i in given.get("note_ids") or []]
    if not ids:  # a contradictions model call: the notes of the topics it asked about
        ids = list(dict.fromkeys(str(i) for t in given.get("topics") or [] if isinstance(t, dict)
                                 for i in t.get("note_ids") or []))
    label = "held" if output.get("guard") else "notes"
    if not ids and isinstance(output.get("archived"), dict | list):
        ids, label = [str(i) for i in output["archived"]], "archived"
    if not ids:  # what archive kept although it was due: protected or written by hand
        kept = [output.get(k) for k in ("protected", "manual", "unread")]
        ids, label = [str(i) for k in kept if isinstance(k, list) for i in k], "kept"
    return label, ids


def action_line(action: dict[str, Any], name: Callable[[object], str] = str) -> str:
    """One decision of a contradictions step, ids only (``name`` shortens them): "new ~ old:
    conflicting, revoke old (newer note wins)"."""
    a, b, winner = action.get("a"), action.get("b"), action.get("winner")
    loser = f" {name(a if winner == b else b)}" if winner in (a, b) else ""
    why = f" ({action['why']})" if action.get("why") else ""
    return f"{name(a)} ~ {name(b)}: {action.get('relation')}, {action.get('action')}{loser}{why}"


def step_actions(step: dict[str, Any], name: Callable[[object], str] = str) -> list[str]:
    """What a contradictions step decided: a model call's ``actions``, a rule step's
    ``verdicts`` (each with the action taken), one ``action_line`` each."""
    output = step.get("output") or {}
    found = output.get("actions") or output.get("verdicts") or []
    return [action_line(a, name) for a in found if isinstance(a, dict) and a.get("action")]


def _held(step: dict[str, Any]) -> str:
    label, ids = step_notes(step)
    more = f" (+{len(ids) - HELD_SHOWN})" if len(ids) > HELD_SHOWN else ""
    return f"{label}: {', '.join(ids[:HELD_SHOWN])}{more}" if ids else ""


# ---- dashboard read models ---------------------------------------------------------------
# Notes a phase retired, from its parent step's counters (``notes_retired`` wins when a phase
# records it); dry runs are left out of every trend.
RETIRED_BY = {"consolidate": ("notes_revoked",),
              "contradictions": ("conflicts_resolved", "equivalents_merged"),
              "prune": ("notes_archived",), "archive": ("notes_expired", "notes_stale")}
PHASE_ORDER = tuple(RETIRED_BY)


def run_labels(times: list[Any]) -> list[str]:
    """x-axis labels: the shortest of date-and-time, time, time-with-seconds that tells the
    runs apart (all the same day: no date)."""
    same_day = len({t.date() for t in times}) <= 1
    for fmt in (("%H:%M", "%H:%M:%S") if same_day else ("%m-%d %H:%M", "%m-%d %H:%M:%S")):
        labels = [t.strftime(fmt) for t in times]
        if len(set(labels)) == len(labels):
            return labels
    return labels


def _pages(total: int, per_page: int) -> int:
    return max(1, -(-total // per_page))


def runs_page(app: App, f: ScopeFilter, page: int, per_page: int) -> dict[str, Any]:
    """One page of runs, unresolved blocked/partial/failed first, with the page arithmetic."""
    with app.uow() as uow:
        rows, total = DashboardQueries(uow.session).runs_page(f, (page - 1) * per_page, per_page)
        runs = [run_summary(r) | {"attention": flag} for r, flag in rows]
    return {"runs": runs, "total": total, "page": page, "pages": _pages(total, per_page)}


def _growing(series: list[int], runs: int) -> bool:
    tail = series[-runs:]
    return len(tail) >= runs and all(a < b for a, b in zip(tail, tail[1:], strict=False))


def _scope_row(key: str, recent: list[dict[str, Any]], notes: dict[str, int],
               last_ok: Any, growth_runs: int) -> dict[str, Any]:
    finished = [r for r in reversed(recent) if r["finished_at"] is not None and not r["dry_run"]]
    # A run that judged nothing (``--phases prune``) counted none: no point in the series.
    opened = [int(r["open"]) for r in finished if r["open"] is not None]
    deferred = [int(r["n"] or 0) for r in finished]
    latest = recent[0] if recent else None
    # The runs kept of erased users are history: nothing is left open, and none will run.
    live = Scope.from_key(key).user_id != ERASED_USER
    return {
        "scope": key, "notes": notes, "last_succeeded": _iso(last_ok),
        "open": opened, "deferred": deferred,
        "open_growing": live and _growing(opened, growth_runs),
        "deferred_growing": live and _growing(deferred, growth_runs),
        "latest": None if latest is None else {
            "id": latest["id"], "status": latest["status"],
            "reason": latest["status_reason"] or latest["error"]},
    }


def scope_health(app: App, f: ScopeFilter, page: int, per_page: int,
                 depth: int = 6) -> dict[str, Any]:
    """A page of scopes: notes by status, last successful dream, the latest run, and open
    candidates and deferrals over the last ``depth`` runs (growing at every one is flagged)."""
    with app.uow() as uow:
        q = DashboardQueries(uow.session)
        keys, total = q.scopes_page(f, (page - 1) * per_page, per_page)
        notes = q.notes_by_status(keys)
        last_ok = q.last_succeeded(keys)
        recent: dict[str, list[dict[str, Any]]] = {}
        for row in q.recent_runs(keys, depth):
            recent.setdefault(row["scope_key"], []).append(row)
    growth = app.settings.open_growth_runs
    scopes = [_scope_row(k, recent.get(k, []), notes.get(k, {}), last_ok.get(k), growth)
              for k in keys]
    return {"scopes": scopes, "total": total, "page": page, "pages": _pages(total, per_page)}


def _notes_series(runs: list[dict[str, Any]], baseline: dict[str, dict[str, int]]
                  ) -> dict[str, list[int]]:
    """Notes by status after each run, summed over the scopes seen so far (one scope: its own)."""
    state = dict(baseline)
    series: dict[str, list[int]] = {s: [] for s in NOTE_STATUSES}
    for run in runs:
        state[run["scope_key"]] = {s: int(run[f"after_{s}"] or 0) for s in NOTE_STATUSES}
        for s in NOTE_STATUSES:
            series[s].append(sum(counts.get(s, 0) for counts in state.values()))
    return {s: v for s, v in series.items() if any(v)}


def _retired(figures: dict[str, Any], phase: str) -> int:
    if figures.get("notes_retired"):
        return int(figures["notes_retired"])
    return sum(int(figures.get(k) or 0) for k in RETIRED_BY.get(phase, ()))


def trends(app: App, f: ScopeFilter, last: int) -> dict[str, Any]:
    """Per-run figures of the last ``last`` finished non-dry runs, oldest first: notes by
    status, notes retired per phase, model calls and tokens."""
    with app.uow() as uow:
        q = DashboardQueries(uow.session)
        runs = q.trend_runs(f, last)
        ids = [r["id"] for r in runs]
        figures = q.phase_figures(ids) if ids else []
        keys = sorted({r["scope_key"] for r in runs})
        baseline = q.baseline_notes(keys, runs[0]["created_at"]) if runs else {}
    by_run: dict[str, dict[str, dict[str, Any]]] = {}
    for row in figures:
        by_run.setdefault(row["run_id"], {})[row["phase"]] = row
    per = [by_run.get(i, {}) for i in ids]
    return {
        "labels": run_labels([r["created_at"] for r in runs]),
        "run_ids": ids, "scopes": len(keys),
        "notes": _notes_series(runs, baseline),
        "retired": {p: [_retired(x.get(p, {}), p) for x in per] for p in PHASE_ORDER},
        "calls": [sum(int(v["calls"]) for v in x.values()) for x in per],
        "tokens_in": [sum(int(v["tokens_in"]) for v in x.values()) for x in per],
        "tokens_out": [sum(int(v["tokens_out"]) for v in x.values()) for x in per],
    }

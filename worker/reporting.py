"""Read models for runs and steps: the shapes the CLI, the API and dashboards print."""

from __future__ import annotations

from typing import Any

from worker.app import App
from worker.domain.types import Scope
from worker.runs.service import RunError
from worker.store.models import DreamRunRow, RunStepRow


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
              since: Any = None, limit: int = 50) -> list[dict[str, Any]]:
    with app.uow() as uow:
        return [run_summary(r) for r in uow.runs.list(scope, status, since, limit)]


def run_tree(app: App, run_id: str) -> dict[str, Any]:
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        if run is None:
            raise RunError(f"no run with id {run_id}; list runs with `dream runs list`")
        out = run_summary(run)
        steps = uow.runs.steps(run_id)
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
        lines.append(f"  {tree['status']}: {tree['status_reason']}")
    totals = tree.get("totals") or {}
    if "notes_before" in totals or "notes_after" in totals:
        lines.append(f"  notes before {totals.get('notes_before', {})} → after {totals.get('notes_after', {})}")
    if totals.get("duration_ms") is not None:
        lines.append(f"  duration {totals['duration_ms']:.1f} ms  tokens "
                     f"{totals.get('tokens_in', 0)}/{totals.get('tokens_out', 0)}")
    for step in tree["steps"]:
        lines.append(_step_line(step, "  "))
        for child in step["children"]:
            lines.append(_step_line(child, "      "))
    return "\n".join(lines)


def _step_line(step: dict[str, Any], indent: str) -> str:
    output = step.get("output") or {}
    counters = ", ".join(f"{k}={v}" for k, v in output.items() if isinstance(v, int | float | bool))
    reason = output.get("reason") or output.get("verdict") or step.get("error") or ""
    ms = step.get("duration_ms") or 0.0
    tokens = f"  tokens {step['tokens_in']}/{step['tokens_out']}" if step.get("tokens_in") else ""
    return (f"{indent}{step['name']:<28} {step['status']:<10} {ms:>8.1f} ms  {counters}{tokens}"
            f"{'  — ' + str(reason) if reason else ''}")

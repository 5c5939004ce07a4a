"""Prometheus text exposition of run, note, model-usage and phase-duration counts."""

from __future__ import annotations

from typing import Any

from worker.app import App
from worker.domain.types import RunStatus, Scope


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def collect(app: App, scope: Scope | None) -> dict[str, Any]:
    with app.uow() as uow:
        return {"runs": uow.run_history.count_by_status(scope),
                "blocked": uow.run_history.ended_blocked(scope),
                "notes": uow.notes.count_by_status(scope),
                "phases": uow.run_history.step_usage(scope),
                "open_candidates": uow.run_history.latest_open_candidates(scope),
                "failing": {k: n for k, (n, _) in uow.run_history.failure_streaks(
                    [scope.key] if scope is not None else None).items()}}


def render(data: dict[str, Any]) -> str:
    """Pure: the collected counts as Prometheus text format 0.0.4."""
    lines: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[dict[str, str], float]]) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            label = ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(labels.items()))
            lines.append(f"{name}{{{label}}} {value:g}" if label else f"{name} {value:g}")

    family("dream_runs", "gauge", "Dream runs by status.",
           [({"status": s}, float(n)) for s, n in sorted(data["runs"].items())])
    # R27: a dream that could not do its work is counted on its own, so an alert can fire.
    # Runs that *ended* blocked: undoing one must not take the counter back (a reset to
    # Prometheus, whose increase() would count every blocked run again).
    family("dream_runs_blocked_total", "counter",
           "Runs that ended blocked (guard trip, budget exhausted, open candidates growing).",
           [({}, float(data.get("blocked", data["runs"].get(RunStatus.BLOCKED.value, 0))))])
    family("dream_open_candidates", "gauge",
           "Open candidates per scope, as its latest finished run counted them.",
           [({"scope": k}, float(n)) for k, n in sorted(data.get("open_candidates", {}).items())])
    # A scope whose runs keep failing (a store refusing its writes, a phase crashing on its
    # notes) is retried ever later by the gate's back-off: named here, so an alert can say which.
    failing = data.get("failing", {})
    family("dream_scopes_failing", "gauge",
           "Scopes whose last claimed runs failed in a row, since their last dream or forced run.",
           [({}, float(len(failing)))])
    family("dream_failed_runs_in_a_row", "gauge",
           "Failed runs in a row per failing scope (the gate backs off after each).",
           [({"scope": k}, float(n)) for k, n in sorted(failing.items())])
    family("dream_notes", "gauge", "Notes by status.",
           [({"status": s}, float(n)) for s, n in sorted(data["notes"].items())])
    phases = sorted(data["phases"].items())
    family("dream_model_calls_total", "counter", "Model calls recorded in run steps, by phase.",
           [({"phase": p}, u["calls"]) for p, u in phases])
    family("dream_model_tokens_total", "counter", "Model tokens by phase and direction.",
           [({"phase": p, "direction": d}, u[f"tokens_{d}"]) for p, u in phases
            for d in ("in", "out")])
    family("dream_phase_duration_seconds", "summary", "Wall time of phase steps.", [])
    for p, u in phases:
        lines.append(f'dream_phase_duration_seconds_sum{{phase="{_esc(p)}"}} '
                     f"{u['duration_ms_sum'] / 1000:g}")
        lines.append(f'dream_phase_duration_seconds_count{{phase="{_esc(p)}"}} '
                     f"{u['duration_count']:g}")
    return "\n".join(lines) + "\n"

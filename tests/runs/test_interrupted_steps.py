"""A phase step whose attempt lost the run reads as finished — ``interrupted``, with why and
when — in `dream runs show` and the API, never ``running``; the retry still runs the phase under
a step of its own (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from click.testing import CliRunner

from tests.support.factories import add_notes
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.reporting import run_tree
from worker.runs import engine, service
from worker.runs.context import PhaseContext, Registry

SCOPE = Scope("agent-1")
QUIET: Registry = {p: (lambda name: lambda ctx, step_id: PhaseReport(
    phase=name, status=StepStatus.NO_ITEMS.value))(p) for p in PHASES}


class Killed(BaseException):
    """What a SIGKILL looks like from inside: nothing after it runs, no handler catches it."""


def _killed(ctx: PhaseContext, step_id: str) -> PhaseReport:
    raise Killed


def _killed_in_contradictions(app: App) -> str:
    add_notes(app, {"content": "a note"})
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    with pytest.raises(Killed):
        engine.execute_run(app, run_id, {**QUIET, "contradictions": _killed})
    return run_id


def _phase_steps(app: App, run_id: str) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {}
    for step in run_tree(app, run_id)["steps"]:
        out.setdefault(str(step["phase"]), []).append(step)
    return out


def test_a_killed_attempts_steps_read_interrupted_and_the_retry_runs_them_again(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attempt killed in contradictions left its open phase steps (contradictions, prune,
    archive) reading ``running`` next to the retry's, with the error "interrupted; retried by
    attempt 2" (`dream runs show`: "running … interrupted"). Now the gate check that finds the
    lease expired ends them ``interrupted``, with when; the retry runs those phases again."""
    run_id = _killed_in_contradictions(app)
    later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 1)
    assert service.gate_check(app, now=later).retried == [run_id]
    left = _phase_steps(app, run_id)
    for phase in ("contradictions", "prune", "archive"):
        [step] = left[phase]
        assert step["status"] == StepStatus.INTERRUPTED.value, step
        assert step["finished_at"] is not None
        assert str(step["error"]).startswith("interrupted; its lease expired")
    assert [s["status"] for s in left["consolidate"]] == [StepStatus.NO_ITEMS.value]

    assert engine.execute_run(app, run_id, QUIET) == RunStatus.SUCCEEDED.value
    steps = _phase_steps(app, run_id)
    assert [s["status"] for s in steps["prune"]] == [StepStatus.INTERRUPTED.value,
                                                     StepStatus.NO_ITEMS.value]
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    shown = CliRunner().invoke(main, ["runs", "show", run_id])
    assert shown.exit_code == 0, shown.output
    assert "running" not in shown.output and "interrupted" in shown.output


def test_a_run_given_up_leaves_no_step_running(app: App) -> None:
    """A run failed after its last attempt's lease expired kept that attempt's steps
    ``running`` for good. Now they end ``interrupted`` with the run."""
    app.settings.max_attempts = 1
    run_id = _killed_in_contradictions(app)
    later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 1)
    assert service.gate_check(app, now=later).failed == [run_id]
    statuses = {phase: [s["status"] for s in steps]
                for phase, steps in _phase_steps(app, run_id).items()}
    assert statuses == {"consolidate": [StepStatus.NO_ITEMS.value],
                        **{p: [StepStatus.INTERRUPTED.value]
                           for p in ("contradictions", "prune", "archive")}}

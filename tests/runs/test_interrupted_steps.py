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
        # Only contradictions had started; the others were opened ahead by the claim.
        said = "interrupted" if phase == "contradictions" else "not started"
        assert str(step["error"]).startswith(f"{said}; its lease expired")
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


USER_SCOPE = Scope("agent-1", "u1")


def _stopped_by(app: App, stop: str, run_id: str) -> str:
    """Stop the run for good as ``stop`` says: the operator's cancel or its user's erasure; the
    words every step the run did not finish must carry."""
    if stop == "operator":
        service.cancel_run(app, run_id, "bad deploy")
        return "the run was cancelled: bad deploy"
    from worker.safety.erase import erase

    erase(app, user_id=USER_SCOPE.user_id)
    return "the run was cancelled: its user was erased"


def _killed_in_contradictions_of(app: App, scope: Scope) -> str:
    add_notes(app, {"content": "a note", "user_id": scope.user_id})
    run_id = service.create_run(app, scope, force=True)
    assert run_id is not None
    with pytest.raises(Killed):
        engine.execute_run(app, run_id, {**QUIET, "contradictions": _killed})
    return run_id


def _step_lines(app: App, run_id: str) -> list[tuple[str, str, str]]:
    """(phase, status, error) of each phase step, in phase order, attempts in step order."""
    steps = run_tree(app, run_id)["steps"]
    return [(str(s["phase"]), str(s["status"]), str(s["error"]))
            for s in sorted(steps, key=lambda s: PHASES.index(str(s["phase"])))]


@pytest.mark.parametrize("stop", ["operator", "erasure"])
def test_a_run_stopped_in_process_says_which_phases_it_stopped_and_why(app: App,
                                                                       stop: str) -> None:
    """In-process a run opens all four phase steps with its claim. Stopped in contradictions,
    the operator's cancel marked the three open ones ``skipped`` ("run cancelled": a phase not
    asked for, counted done), an erasure of its user ``interrupted`` with its reason. Now all
    end ``interrupted`` with who stopped the run and why; what finished stays as it was. Only
    contradictions had started: prune and archive read "not started", as they do when a
    Celery run is stopped (they read "interrupted", as if each had been cut short)."""
    run_id = _killed_in_contradictions_of(app, USER_SCOPE)
    why = _stopped_by(app, stop, run_id)
    assert _step_lines(app, run_id) == [
        ("consolidate", StepStatus.NO_ITEMS.value, "None"),
        ("contradictions", StepStatus.INTERRUPTED.value, f"interrupted; {why}"),
        *((p, StepStatus.INTERRUPTED.value, f"not started; {why}") for p in ("prune", "archive"))]
    assert run_tree(app, run_id)["status"] == RunStatus.CANCELLED.value


@pytest.mark.parametrize("stop", ["operator", "erasure"])
def test_a_run_stopped_between_celery_tasks_shows_the_phases_it_never_started(
        app: App, stop: str) -> None:
    """On Celery a run opens one phase step per task: cancelled after its first task, it
    showed that one step and nothing of the other three. Now each phase it never reached has
    a step saying so, with the same reason, after the ones it ran."""
    add_notes(app, {"content": "a note", "user_id": USER_SCOPE.user_id})
    run_id = service.create_run(app, USER_SCOPE, force=True)
    assert run_id is not None
    assert engine.execute_phase(app, run_id, "consolidate", QUIET).status is None
    why = _stopped_by(app, stop, run_id)
    assert _step_lines(app, run_id) == [
        ("consolidate", StepStatus.NO_ITEMS.value, "None"),
        *((p, StepStatus.INTERRUPTED.value, f"not started; {why}") for p in PHASES[1:])]


def test_a_queued_run_cancelled_shows_four_phases_never_started(app: App) -> None:
    """A run cancelled before any executor took it: four steps "not started" with the reason
    (before: no step at all, as if it had never been asked for)."""
    add_notes(app, {"content": "a note"})
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    service.cancel_run(app, run_id, "bad deploy")
    assert _step_lines(app, run_id) == [
        (p, StepStatus.INTERRUPTED.value, "not started; the run was cancelled: bad deploy")
        for p in PHASES]


def test_an_erasure_that_interrupts_a_run_says_so_on_its_open_steps_at_once(app: App) -> None:
    """An erasure of one note interrupts the running run of its scope (resumed later from a
    fresh read): its open steps read ``running`` until the resume, which then blamed "retried
    by attempt 2". Now they end ``interrupted`` at once, naming the erasure; the resume runs
    those phases under steps of its own."""
    from worker.safety.erase import erase

    add_notes(app, {"id": "gone", "content": "erase me"})
    run_id = _killed_in_contradictions(app)
    erase(app, note_id="gone")
    why = "an erasure in its scope interrupted the run; it resumes from a fresh read"
    assert _step_lines(app, run_id)[1:] == [
        ("contradictions", StepStatus.INTERRUPTED.value, f"interrupted; {why}"),
        *((p, StepStatus.INTERRUPTED.value, f"not started; {why}") for p in ("prune", "archive"))]
    assert engine.execute_run(app, run_id, QUIET) == RunStatus.SUCCEEDED.value
    assert [s[1] for s in _step_lines(app, run_id)].count(StepStatus.NO_ITEMS.value) == 4


def _slow_then_killed(ctx: PhaseContext, step_id: str) -> PhaseReport:
    """A phase that works a while (one child step, 20 ms) and is then killed."""
    import time

    from worker.runs.steps import ChildStep

    started = utcnow()
    time.sleep(0.02)
    with ctx.uow() as uow:
        ctx.steps.child(uow, step_id, "contradictions", ChildStep(
            name="pair batch", status=StepStatus.SUCCEEDED.value, started_at=started))
        uow.commit()
    raise Killed


@pytest.mark.parametrize("child", [False, True])
def test_an_interrupted_phase_reads_in_run_order_with_an_honest_duration(
        app: App, monkeypatch: pytest.MonkeyPatch, child: bool) -> None:
    """In-process, the claim opens every phase's step at the claim's time; a phase records when
    it really began only as it finishes. Killed in contradictions, `dream runs show` listed the
    interrupted contradictions (and the never-started prune and archive) before consolidate,
    with 0.0 ms. Now the steps read in run order, the interrupted one begins where consolidate
    ended and lasts what its children show ("—" when none finished, never 0.0 ms)."""
    add_notes(app, {"content": "a note"})
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    phase = _slow_then_killed if child else _killed
    with pytest.raises(Killed):
        engine.execute_run(app, run_id, {**QUIET, "contradictions": phase})
    later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 1)
    assert service.gate_check(app, now=later).retried == [run_id]
    steps = run_tree(app, run_id)["steps"]
    assert [(s["phase"], s["status"]) for s in steps] == [
        ("consolidate", StepStatus.NO_ITEMS.value),
        ("contradictions", StepStatus.INTERRUPTED.value),
        ("prune", StepStatus.INTERRUPTED.value), ("archive", StepStatus.INTERRUPTED.value)]
    consolidate, contradictions = steps[0], steps[1]
    assert contradictions["started_at"] >= consolidate["finished_at"]
    if child:
        assert contradictions["duration_ms"] is not None
        assert 20 <= contradictions["duration_ms"] < 60_000
    else:
        assert contradictions["duration_ms"] is None
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    shown = CliRunner().invoke(main, ["runs", "show", run_id])
    assert shown.exit_code == 0, shown.output
    lines = [line.split() for line in shown.output.splitlines() if line.startswith("  ")
             and line.split()[0] in PHASES]
    assert [line[0] for line in lines] == list(PHASES)
    assert lines[1][:3] == (["contradictions", "interrupted", "—"] if not child else
                            ["contradictions", "interrupted", lines[1][2]])
    assert lines[1][2] != "0.0"

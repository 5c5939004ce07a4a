"""An in-process run stopped by a signal (Ctrl-C, or SIGTERM from a service manager, `timeout`
or a container) gives its run back at once: the write in progress rolls back, the run is
interrupted with its running phase saying why, and `dream run --due` resumes it at once.
Before, SIGTERM killed `dream run` outright and Ctrl-C printed "Aborted!": either
way the run stayed `running`, holding its scope until its lease lapsed (an hour by default)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.runs.test_recovery import SCOPE, dream, status_of
from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import RunStatus
from worker.reporting import run_tree
from worker.runs import service
from worker.runs.engine import RunStopped
from worker.runs.stops import Stopped
from worker.safety import crashpoints

DREAM = str(Path(sys.executable).parent / "dream")
TWINS = ({"id": "d1", "agent_id": "a1", "content": "User prefers dark mode in the editor"},
         {"id": "d2", "agent_id": "a1", "content": "User prefers dark mode in the editor"})
# Three notes a model is asked about as one cluster (as in `dream demo`), and its answers.
PYTHON = tuple({"id": f"py-{k}", "agent_id": "a1", "type": "Preference", "content": text}
               for k, text in enumerate(("User prefers Python",
                                         "User prefers Python 3.12 specifically",
                                         "User prefers Python 3.12 with type hints and pytest")))
KEEP = {"should_consolidate": False, "content": "", "type": "Context", "source_ids": [],
        "reason": "different things"}
NO_CONFLICT = {"prompt": "contradictions", "id_field": "topic",
               "reply": {"topics_all": {"attributes": []}}}


def _active(app: App) -> dict[str, int]:
    with app.uow() as uow:
        return {n.id: n.version for n in uow.notes.load_scope(SCOPE).notes}


def _phase_errors(app: App, run_id: str) -> dict[str, str]:
    return {s["phase"]: s.get("error") or "" for s in run_tree(app, run_id)["steps"]}


def test_a_stop_inside_a_write_rolls_it_back_and_gives_the_run_back(app: App) -> None:
    """The stop lands after the merge inserted its fused note, before the sources' retirement
    and the commit: nothing of that write stays, the run is interrupted (`dream run --due`
    resumes it), and the resumed run merges the twins once."""
    add_notes(app, *TWINS)
    before = _active(app)

    def stop(_: str) -> None:
        raise Stopped("SIGTERM")

    snap_id, stopped = _stopped_at(app, "consolidate.after_insert", stop)
    assert stopped.signal_name == "SIGTERM" and stopped.given_back
    assert _active(app) == before  # the fused note's insert went with the rollback
    assert status_of(app, snap_id) == RunStatus.INTERRUPTED.value
    errors = _phase_errors(app, snap_id)
    assert errors["consolidate"].startswith("interrupted; stopped by SIGTERM")
    assert errors["archive"].startswith("not started; stopped by SIGTERM")
    resumed = dream(app, "run", "--due")
    assert resumed.exit_code == 0, resumed.output
    assert f"run {snap_id} succeeded" in resumed.stdout
    after = _active(app)
    assert len(after) == 1 and not set(after) & {"d1", "d2"}


def test_a_run_another_executor_took_over_is_left_as_it_is(app: App) -> None:
    """A stop after the run moved on (cancelled between two phases) changes nothing of it."""
    add_notes(app, *TWINS)

    def cancel_then_stop(run_id: str) -> None:
        assert dream(app, "runs", "cancel", run_id).exit_code == 0
        raise KeyboardInterrupt

    run_id, stopped = _stopped_at(app, "run.before_finalize", cancel_then_stop)
    assert stopped.signal_name == "SIGINT" and not stopped.given_back
    assert status_of(app, run_id) == RunStatus.CANCELLED.value


def _stopped_at(app: App, point: str, action: Callable[[str], None]) -> tuple[str, RunStopped]:
    """A run of SCOPE created as `dream run` creates it and executed here, ``action`` (given
    the run's id) called at the crash point ``point``: its id and the RunStopped it ended by."""
    snap = service.create_claimed_run(app, SCOPE, trigger="cli", force=True)
    assert snap is not None
    crashpoints.arm(point, lambda: action(snap.run_id))
    try:
        with pytest.raises(RunStopped) as stopped:
            service.execute_run(app, snap)
    finally:
        crashpoints.disarm_all()
    assert stopped.value.run_id == snap.run_id
    return snap.run_id, stopped.value


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_dream_run_stopped_while_the_model_answers_exits_13_and_is_resumed_at_once(
        app: App, tmp_path: Path, sig: signal.Signals) -> None:
    """A real `dream run` waiting on a slow model gets the signal: it ends at once with exit
    13 and one line naming the run, the signal and `dream run --due`; the run is interrupted,
    the notes as they were; `dream run --due` then resumes and finishes it."""
    add_notes(app, *PYTHON)
    slow, fast = tmp_path / "slow.json", tmp_path / "fast.json"
    slow.write_text(json.dumps({"rules": [
        {"prompt": "consolidate", "latency": 120, "reply": KEEP}, NO_CONFLICT]}))
    fast.write_text(json.dumps({"rules": [{"prompt": "consolidate", "reply": KEEP}, NO_CONFLICT]}))
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_LLM_PROVIDER": "fake", "DREAM_FAKE_LLM_SCRIPT": str(slow)}
    env.pop("DREAM_BROKER_URL", None)
    proc = subprocess.Popen([DREAM, "run", "--agent", "a1", "--force"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = _wait_for_run(app, proc)
        time.sleep(1.0)  # the phase is in the model call (it answers after 120 s)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 13, (out, err[-2000:])
    line = out.strip().splitlines()[-1]
    assert line.startswith(f"run {run_id} interrupted by {sig.name}:"), out
    assert "`dream run --due` resumes it" in line
    assert status_of(app, run_id) == RunStatus.INTERRUPTED.value
    assert _phase_errors(app, run_id)["consolidate"].startswith(
        f"interrupted; stopped by {sig.name}")
    assert set(_active(app)) == {n["id"] for n in PYTHON}
    resumed = dream(app, "run", "--due", DREAM_LLM_PROVIDER="fake",
                    DREAM_FAKE_LLM_SCRIPT=str(fast))
    assert resumed.exit_code == 0, resumed.output
    assert status_of(app, run_id) == RunStatus.SUCCEEDED.value


def _wait_for_run(app: App, proc: subprocess.Popen[str]) -> str:
    """The id of the scope's run once the process has created it (polled)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        with app.uow() as uow:
            run = uow.runs.active_for_scope(SCOPE)
        if run is not None and run.status == RunStatus.RUNNING.value:
            return run.id
        time.sleep(0.05)
    raise AssertionError("dream run did not start its run within 60 s")

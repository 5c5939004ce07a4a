"""Every `dream` command stopped by Ctrl-C (SIGINT) or SIGTERM ends with one line on stderr
naming the command, the signal and what its stop leaves, and exit 13, never click's "Aborted!"
(exit 1), a traceback or SIGTERM's silent kill; what it was writing rolls back whole, and no run
is left `running` by the stop. Real `dream` processes signalling themselves at a chosen point
(tests.support.stops); SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_fuzz import leaf_commands
from tests.runs.test_recovery import SCOPE, dream, status_of
from tests.runs.test_stopped import TWINS, _active
from tests.support.factories import add_notes
from tests.support.stops import dream_stopped
from worker.app import App
from worker.cli import main
from worker.cli.errors import STOP_STATE
from worker.domain.types import RunStatus, Scope
from worker.runs import service

SIGNALS = ["SIGTERM", "SIGINT"]


def test_every_command_says_what_its_stop_leaves() -> None:
    """Each leaf command declares the end of its stop line (``stop_says``): a command added
    later without one would print no state."""
    missing = [" ".join(path) for path, cmd in leaf_commands(main)
               if not getattr(cmd.callback, STOP_STATE, None)]
    assert not missing


def _stop_line(stopped: subprocess.CompletedProcess[str], command: str, sig: str) -> str:
    """The one line a stopped command printed on stderr (and nothing else there)."""
    out, err = stopped.stdout, stopped.stderr
    assert stopped.returncode == 13, (out, err[-2000:])
    assert "Aborted!" not in err and "Traceback" not in err, err[-2000:]
    (line,) = err.strip().splitlines()
    assert line.startswith(f"`dream {command}` stopped by {sig}: "), line
    return line


def _running(app: App) -> list[str]:
    with app.uow() as uow:
        return [r.id for r in uow.runs.list(None) if r.status == RunStatus.RUNNING.value]


@pytest.mark.parametrize("sig", SIGNALS)
def test_a_run_stopped_between_its_creation_and_its_first_phase_is_given_back(
        app: App, sig: str) -> None:
    """The stop lands as the run, created claimed, is handed to the engine (before its
    give-back covered it): held until it does, so the run is interrupted at once and `dream
    run --due` resumes it. Before, the run stayed `running` under its lease for an hour."""
    add_notes(app, *TWINS)
    stopped = dream_stopped(app, "point:run.after_create", sig,
                            "run", "--agent", "a1", "--force")
    assert stopped.returncode == 13, (stopped.stdout, stopped.stderr[-2000:])
    line = stopped.stdout.strip().splitlines()[-1]
    run_id = line.split()[1]
    assert line.startswith(f"run {run_id} interrupted by {sig}:"), line
    assert status_of(app, run_id) == RunStatus.INTERRUPTED.value
    assert not _running(app)
    resumed = dream(app, "run", "--due")
    assert resumed.exit_code == 0, resumed.output
    assert status_of(app, run_id) == RunStatus.SUCCEEDED.value


@pytest.mark.parametrize("sig", SIGNALS)
def test_run_due_stopped_between_two_runs_starts_no_other(app: App, sig: str) -> None:
    """`dream run --due` stopped after its first run was reported: that run stays as it
    ended, the second waiting run is not started (still queued for the next `--due`), one
    line, exit 13."""
    add_notes(app, *TWINS, {"id": "b1", "agent_id": "a2", "content": "Likes tea"})
    first = service.create_run(app, SCOPE, trigger="cli", force=True)
    second = service.create_run(app, Scope("a2"), trigger="cli", force=True)
    assert first and second
    stopped = dream_stopped(app, "point:run.due_reported", sig,
                            "run", "--due")
    line = _stop_line(stopped, "run", sig)
    assert "`dream run --due` runs what is left" in line
    assert f"run {first} succeeded" in stopped.stdout
    assert status_of(app, first) == RunStatus.SUCCEEDED.value
    assert status_of(app, second) == RunStatus.QUEUED.value
    assert not _running(app)


@pytest.mark.parametrize("sig", SIGNALS)
def test_an_import_stopped_while_it_writes_stores_nothing(
        app: App, tmp_path: Path, sig: str) -> None:
    """`dream notes import` stopped after it inserted its notes, as it records the pair they
    were kept apart in: its one transaction rolls back whole."""
    lines = tmp_path / "notes.jsonl"
    apart = [{**TWINS[0], "kept_apart": [["d1", "d2"]]}, TWINS[1]]
    lines.write_text("".join(json.dumps(n) + "\n" for n in apart))
    stopped = dream_stopped(app, "sql:INSERT INTO judgements", sig,
                            "notes", "import", str(lines))
    line = _stop_line(stopped, "notes import", sig)
    assert "stored whole or not at all" in line
    assert _active(app) == {}
    again = dream(app, "notes", "import", str(lines))
    assert again.exit_code == 0 and "2 added" in again.stdout


@pytest.mark.parametrize("sig", SIGNALS)
def test_an_undo_stopped_while_it_writes_changes_nothing(app: App, sig: str) -> None:
    """`dream undo RUN` stopped as it restores the run's notes: the run's changes stay
    applied, the undo can be run again."""
    add_notes(app, *TWINS)
    ran = dream(app, "run", "--agent", "a1", "--force")
    assert ran.exit_code == 0, ran.output
    run_id = ran.stdout.split()[1]
    merged = _active(app)
    stopped = dream_stopped(app, "sql:UPDATE notes", sig, "undo", run_id)
    _stop_line(stopped, "undo", sig)
    assert _active(app) == merged
    assert dream(app, "undo", run_id).exit_code == 0
    assert set(_active(app)) == {"d1", "d2"}


@pytest.mark.parametrize("sig", SIGNALS)
def test_an_erasure_or_a_keep_apart_stopped_while_it_writes_changes_nothing(
        app: App, sig: str) -> None:
    """`dream erase` stopped as it deletes, `dream keep-apart` as it records the pair: each
    is one transaction, rolled back whole."""
    add_notes(app, *TWINS)
    before = _active(app)
    stopped = dream_stopped(app, "sql:DELETE", sig,
                            "erase", "--note", "d1", "--yes")
    _stop_line(stopped, "erase", sig)
    assert _active(app) == before
    stopped = dream_stopped(app, "sql:INSERT", sig,
                            "keep-apart", "d1", "d2")
    _stop_line(stopped, "keep-apart", sig)
    offered = dream(app, "candidates", "--agent", "a1", "--threshold", "0.5", "--json")
    assert offered.exit_code == 0, offered.output
    pairs = [sorted(c["note_ids"]) for c in json.loads(offered.stdout)["candidates"]]
    assert ["d1", "d2"] in pairs

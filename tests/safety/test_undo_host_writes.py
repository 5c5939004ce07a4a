"""`dream undo RUN --force-cascade` never undoes a host's later write over a note the run
wrote: a `remember` that superseded the run's fused note with a longer one, or a host `fuse`
of it, is the host's fact. Before, the cascade undid it with the run, revoking the host's newer
note without a word; now the undo is refused, naming the host's write and how to undo both
(its own undo first), and nothing changes. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from tests.safety.test_undo import SCOPE, _fuse, _seed
from tests.support.safety import note_states, run_row
from worker.app import App
from worker.cli import main
from worker.errors import Conflict
from worker.host import fuse, remember
from worker.safety.undo import UndoRefused, undo_run


def _remembered(app: App, fused: str) -> tuple[str, str]:
    result = remember(app, SCOPE, "User likes tea in the morning", "Preference")
    assert (result.action, result.superseded_id) == ("UPDATE", fused), result
    assert result.undo_id is not None
    return result.undo_id, result.id


def _fused(app: App, fused: str) -> tuple[str, str]:
    result = fuse(app, [fused, "n3"], "User likes tea number 3")
    return result.undo_id, str(result.note["id"])


@pytest.mark.parametrize("host_write", [_remembered, _fused])
def test_a_cascade_never_undoes_the_hosts_later_write(app: App, host_write: Any) -> None:
    _seed(app)
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    write, newer = host_write(app, fused)
    before = note_states(app)
    assert before[newer]["status"] == "active"
    for force in (True, False):  # without it, the way out it names is this one too
        with pytest.raises(UndoRefused) as refused:
            undo_run(app, run_id, force_cascade=force)
        line = str(refused.value)
        assert line.count("\n") == 0
        assert f"note {fused} was superseded since by the host's" in line
        assert f"`dream undo {write}`" in line
        assert [r["id"] for r in refused.value.refused] == [fused]
        assert note_states(app) == before
    # The way out it names: the host's write undone first, then the run, both given back.
    undo_run(app, write)
    undo_run(app, run_id)
    after = note_states(app)
    assert after[newer]["status"] == "revoked" and after[fused]["status"] == "revoked"
    assert after["n0"]["status"] == after["n1"]["status"] == "active"


def test_the_cli_refusal_names_the_hosts_write(app: App) -> None:
    _seed(app)
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    write, _ = _remembered(app, fused)
    before = note_states(app)
    out = CliRunner().invoke(main, ["undo", run_id, "--force-cascade"],
                             env={"DREAM_DATABASE_URL": app.settings.database_url})
    assert out.exit_code == Conflict.exit_code, out.output
    assert out.stderr.startswith(f"error: cannot undo run {run_id}: note {fused} was "
                                 f"superseded since by the host's remember {write}")
    assert note_states(app) == before

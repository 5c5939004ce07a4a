"""Undo (R17, R23) never retires a note the host pinned (``protected``/``immutable``) after the
run, fuse or erasure made it active: a pin keeps the version, so the version check alone let the
undo revoke it. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.safety.test_undo import SCOPE, _fuse, _seed
from tests.support.host_writes import host_sets
from tests.support.safety import note_states, run_row
from worker.app import App
from worker.cli import main
from worker.errors import RunError
from worker.host.fusion import fuse
from worker.safety.erase import erase
from worker.safety.undo import UndoRefused, undo_run


@pytest.mark.parametrize("pin", ["immutable", "protected"])
def test_undo_refuses_to_retire_a_fused_note_the_host_pinned_since(app: App, pin: str) -> None:
    """The host pins the run's fused note: the undo, even with --force-cascade, refuses naming
    it and writes nothing (before: the pinned note was revoked); unpinned, the undo proceeds."""
    _seed(app)
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    host_sets(app, fused, protection=pin)
    before = note_states(app)
    for force in (False, True):
        with pytest.raises(UndoRefused, match=f"note {fused} is {pin} .pinned since the run.") \
                as refused:
            undo_run(app, run_id, force_cascade=force)
        assert refused.value.refused == [{"id": fused, "entity": "note", "outcome": "refused",
                                          "why": refused.value.refused[0]["why"]}]
        assert note_states(app) == before
    host_sets(app, fused, protection="standard")
    assert undo_run(app, run_id).retired == [fused]


def test_undo_of_a_host_fuse_refuses_to_retire_its_pinned_note(app: App) -> None:
    """Sibling: `dream undo fuse-…` of a fused note the host pinned afterwards."""
    _seed(app)
    done = fuse(app, ["n0", "n1"], "User likes tea number 0 and 1")
    host_sets(app, done.note["id"], protection="immutable")
    before = note_states(app)
    with pytest.raises(UndoRefused, match=f"cannot undo {done.undo_id}: note "):
        undo_run(app, done.undo_id)
    assert note_states(app) == before


def test_a_cascade_gives_back_active_a_note_an_erasure_restored_and_the_host_pinned_since(
        app: App) -> None:
    """Sibling: the erasure made a co-source active again and the host pinned it. The erase
    id's own undo is refused (it would retire it into the erased note: R8); the fusing run's
    forced undo, whose cascade undoes the erase id on the way, gives it back active, pinned
    still, as the run's before-image has it (before: refused over the pin at the erase id's
    step, though the note would have ended active: the refusal protected nothing)."""
    _seed(app)
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    done = erase(app, note_id=fused)
    assert done.erase_id and "n0" in done.restored_ids
    host_sets(app, "n0", protection="protected")
    before = note_states(app)
    with pytest.raises(UndoRefused, match="2 notes .n0, n1. would be retired into no active"):
        undo_run(app, done.erase_id)
    assert note_states(app) == before
    assert undo_run(app, run_id, force_cascade=True).run_ids == [done.erase_id, run_id]
    after = note_states(app)
    assert {i: s["status"] for i, s in after.items()} == {f"n{i}": "active" for i in range(4)}
    assert after["n0"]["protection"] == "protected"


def test_a_pin_refusal_is_one_error_line_and_exit_4(app: App,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`dream undo` answers the refusal as one `error:` line with the conflict exit code."""
    _seed(app)
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    host_sets(app, fused, protection="immutable")
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    out = CliRunner().invoke(main, ["undo", run_id])
    assert out.exit_code == RunError.exit_code
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"error: cannot undo run {run_id}")

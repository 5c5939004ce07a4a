"""A plain undo says what is true of the run: refused over a note only the host changed since,
it names the forced undo as the way out (before: "undo the later run first", with no later
run); a dry run, which changed nothing, is refused in one line and keeps its status (before: it
was marked undone, "nothing to revert"), alike from the CLI, the API and MCP, which all undo
through ``undo_run``; and undoing a run that flagged a note gives it the flags it had, none as
SQL NULL (before: the JSON text 'null'). SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.safety.test_undo import SCOPE, _fuse, _seed
from tests.support.factories import NOW
from tests.support.host_writes import host_sets
from tests.support.safety import run_row
from worker.app import App
from worker.errors import RunError
from worker.runs import service
from worker.safety.undo import UndoRefused, undo_run
from worker.store.models import NoteRow


def _unflagged(app: App) -> bool:
    with app.uow() as uow:
        return bool(uow.session.scalar(select(NoteRow.flags.is_(None)).where(NoteRow.id == "n2")))


def test_undoing_a_flag_leaves_the_flags_null(app: App) -> None:
    _seed(app)
    assert _unflagged(app)
    run_id = run_row(app, SCOPE)
    with app.uow() as uow:
        (note,) = uow.notes.get_many(["n2"])
        assert uow.notes.change(note, run_id=run_id, reason="flag", now=NOW,
                                flags=["contradiction_review"], comments="flagged for review")
        uow.commit()
    undo_run(app, run_id)
    assert _unflagged(app)


def test_a_refusal_over_a_hosts_edit_names_the_forced_undo(app: App) -> None:
    _seed(app)
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    host_sets(app, fused, version=2)
    with pytest.raises(UndoRefused, match=r"changed since\); no later run changed it, the host "
                                          r"did: pass --force-cascade") as refused:
        undo_run(app, run_id)
    assert "undo the later run first" not in str(refused.value)
    assert undo_run(app, run_id, force_cascade=True).overwritten == [fused]


def test_a_refusal_over_a_later_run_names_it(app: App) -> None:
    _seed(app)
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    later = run_row(app, SCOPE)
    _fuse(app, later, [fused, "n2"], "User likes tea a lot")
    with pytest.raises(UndoRefused, match=f"undo the later run first .`dream undo {later}`. or "
                                          "pass --force-cascade"):
        undo_run(app, run_id)


def test_a_dry_run_is_not_undone(app: App) -> None:
    _seed(app)
    run_id = service.create_run(app, SCOPE, force=True, dry_run=True, clock=NOW)
    assert run_id
    service.execute_run(app, run_id)
    with pytest.raises(RunError, match=f"^run {run_id} was a dry run: it changed nothing; "
                                       "nothing to undo$"):
        undo_run(app, run_id)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status == "succeeded"

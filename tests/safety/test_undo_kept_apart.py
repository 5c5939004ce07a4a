"""Undo (R17) gives back a host's keep-apart with the notes: a restore bumps each note's version,
and a keep-apart binds only at the versions it was given for, so before, the next dream merged
notes the host had kept apart (SQLite and PostgreSQL)."""

from __future__ import annotations

import json

from tests.support.factories import NOW, add_notes
from tests.support.host_writes import host_sets
from tests.support.safety import reweigh_in_run, run_row
from worker.app import App
from worker.domain.types import Scope
from worker.export import export_notes
from worker.host.fusion import fuse, keep_apart
from worker.runs import service
from worker.safety.undo import undo_run

SCOPE = Scope("agent-1")
TWINS = [{"id": "t1", "content": "User owns a red bicycle"},
         {"id": "t2", "content": "User owns a red bicycle"},
         {"id": "t3", "content": "User drinks green tea"}]


def _archive(app: App, note_id: str) -> str:
    """A finished run that archived ``note_id``, as the archive phase writes it."""
    run_id = run_row(app, SCOPE)
    with app.uow() as uow:
        (note,) = uow.notes.get_many([note_id])
        assert uow.notes.change(note, run_id=run_id, reason="archive", now=NOW,
                                status="archived", comments="archived: not used")
        uow.commit()
    return run_id


def _statuses_after_consolidating(app: App) -> dict[str, str]:
    run_id = service.create_run(app, SCOPE, force=True, phases=["consolidate"], clock=NOW)
    assert run_id
    service.execute_run(app, run_id)
    with app.uow() as uow:
        return {n.id: n.status for n in uow.notes.get_many(["t1", "t2", "t3"])}


def test_undoing_a_run_keeps_the_notes_it_restores_apart(app: App) -> None:
    """Kept apart, t1 archived by a run, the run undone: the rule judge, which merges identical
    notes, leaves the twins apart as it did before the run."""
    add_notes(app, *TWINS)
    keep_apart(app, ["t1", "t2"])
    undo_run(app, _archive(app, "t1"))
    assert _statuses_after_consolidating(app) == {"t1": "active", "t2": "active", "t3": "active"}


def test_undoing_a_host_fuse_gives_its_keep_apart_back(app: App) -> None:
    """Sibling: the host fused what it had kept apart, then undid the fuse: as before it."""
    add_notes(app, *TWINS)
    keep_apart(app, ["t1", "t2"])
    undo_run(app, fuse(app, ["t1", "t2"], "User owns a red bicycle").undo_id)
    assert _statuses_after_consolidating(app) == {"t1": "active", "t2": "active", "t3": "active"}


def test_a_keep_apart_that_no_longer_bound_before_the_run_is_not_revived(app: App) -> None:
    """The host changed t1 after keeping it apart (the decision lapsed); a run archived it and
    was undone: the undo gives back what was, a t1 free to merge."""
    add_notes(app, *TWINS)
    keep_apart(app, ["t1", "t2"])
    host_sets(app, "t1", version=2)
    undo_run(app, _archive(app, "t1"))
    statuses = _statuses_after_consolidating(app)
    assert sorted(statuses.values()) == ["active", "revoked", "revoked"]


def _reweigh(app: App, note_id: str) -> str:
    """A finished run that changed ``note_id``'s importance (a new version) and left it active."""
    return reweigh_in_run(app, SCOPE, note_id, "reweigh", now=NOW)


def test_a_keep_apart_the_host_recorded_after_the_run_outlives_its_undo(app: App) -> None:
    """A run changed t1 and left it active; the host then kept the twins apart (at t1's new
    version); the run undone, its restore bumps t1's version again: the person's decision still
    binds and `notes export` still carries it (before: it lapsed, the export left it out and
    the next dream merged the twins)."""
    add_notes(app, *TWINS)
    run_id = _reweigh(app, "t1")
    keep_apart(app, ["t1", "t2"])
    undo_run(app, run_id)
    exported = {json.loads(line)["id"]: json.loads(line) for line in export_notes(app)}
    assert exported["t1"]["kept_apart"] == [["t1", "t2"]]
    assert _statuses_after_consolidating(app) == {"t1": "active", "t2": "active", "t3": "active"}

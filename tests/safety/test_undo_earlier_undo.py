"""Undo (R17) of a write whose note an undo of an *earlier* write changed since: that undo is a
change like any other, never written over in silence. A conversation id names one
conversation in every scope, so erasing it restores co-sources in two scopes under one
``erase-…`` id; a cascade from one scope's run leaves that id alone (it reached another scope)
and overwrites its change. Undoing the erasure afterwards took the run's undo row for "no
change" (every undo row was) and revoked the note again, over the state the run's undo had
given it back. That undo is now refused forced or not, since it would retire the notes into
the ones it erased (``test_undo_lost_successor``). SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.support.factories import NOW, add_notes
from tests.support.safety import fuse_in_run, note_states, reweigh_in_run, run_row
from worker.app import App
from worker.domain.types import Scope
from worker.safety.erase import erase
from worker.safety.undo import UndoRefused, undo_run

ONE, TWO = Scope("agent-1", "u1"), Scope("agent-1", "u2")


def _merge(app: App, scope: Scope, ids: list[str], text: str) -> str:
    """What consolidation writes for one cluster of ``scope``, in a run of its own."""
    run_id = run_row(app, scope)
    fuse_in_run(app, scope, run_id, ids, text, now=NOW, commented=False)
    return run_id


def _two_scopes_one_conversation(app: App) -> tuple[str, str]:
    """a1 (c1) and a2 (c2) merged in u1's scope, k1 (k1c) and k2 (c2) in u2's; c2 erased:
    a1 and k1 are given back under one erase id that names both scopes. Returns the u1 run
    and the erase id."""
    add_notes(app, {"id": "a1", "user_id": "u1", "content": "hikes in the Alps in summer",
                    "source_conversation_id": "c1"},
              {"id": "a2", "user_id": "u1", "content": "hikes in the Alps with friends",
               "source_conversation_id": "c2"},
              {"id": "k1", "user_id": "u2", "content": "hikes in the Alps in summer",
               "source_conversation_id": "k1c"},
              {"id": "k2", "user_id": "u2", "content": "hikes in the Alps with friends",
               "source_conversation_id": "c2"})
    run_id = _merge(app, ONE, ["a1", "a2"], "hikes in the Alps in summer with friends")
    _merge(app, TWO, ["k1", "k2"], "hikes in the Alps in summer with friends")
    done = erase(app, conversation_id="c2")
    assert done.erase_id is not None and done.restored_ids == ["a1", "k1"]
    return run_id, done.erase_id


def test_undoing_an_erasure_after_a_cascade_overwrote_it_is_refused_forced_or_not(
        app: App) -> None:
    """The cascade from u1's run overwrites the erasure's change to a1 (the erase id reached u2
    too, so it is left alone) and leaves a1 active, as before the run. Undoing the erase id then
    is refused, forced or not, naming a1 and k1, and writes nothing: it would retire both into
    the notes it erased (before, the plain undo revoked a1 again with no successor, u1's c1 fact
    in no active note; then the forced one did, over the undo that had changed it). The way out
    named is u2's run, whose forced undo gives k1 its state before it."""
    run_id, erase_id = _two_scopes_one_conversation(app)
    cascaded = undo_run(app, run_id, force_cascade=True)
    assert cascaded.run_ids == [run_id] and cascaded.overwritten == ["a1"]
    before = note_states(app)
    assert before["a1"]["status"] == "active" and before["k1"]["status"] == "active"
    with app.uow() as uow:
        other = next(r.run_id for r in uow.safety.log_after(["k1"], 0) if r.run_id != erase_id)
    for force in (False, True):
        with pytest.raises(UndoRefused, match=f"cannot undo {erase_id}: 2 notes .a1, k1. would "
                                              f"be retired into no active note.*`dream undo "
                                              f"{other} --force-cascade`") as refused:
            undo_run(app, erase_id, force_cascade=force)
        assert [r["id"] for r in refused.value.refused] == ["a1", "k1"]
        assert note_states(app) == before


def _later_write(app: App, note_id: str) -> str:
    """A later run's change to ``note_id`` (its importance), in a run of its own."""
    return reweigh_in_run(app, ONE, note_id, "rescored", now=NOW)


def test_the_undo_of_a_later_write_is_still_no_change(app: App) -> None:
    """An undo that took back a write made after the run (here a later run's, undone first) is
    no change: the run is then undone plainly, its notes as before it."""
    add_notes(app, {"id": "a1", "user_id": "u1", "content": "hikes in the Alps in summer"},
              {"id": "a2", "user_id": "u1", "content": "hikes in the Alps with friends"})
    run_id = _merge(app, ONE, ["a1", "a2"], "hikes in the Alps in summer with friends")
    undo_run(app, _later_write(app, "a1"))
    result = undo_run(app, run_id)
    assert result.restored == ["a1", "a2"] and not result.overwritten
    assert note_states(app)["a1"]["status"] == "active"

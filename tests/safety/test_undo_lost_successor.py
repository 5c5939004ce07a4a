"""R8 over undo: no undo, forced or not, retires a note into a successor that is gone. An
erasure of c2 gives back a1 (c1), which a run had merged with c2's a2 into a note the erasure
deleted; `dream undo erase-…` retired a1 again into that note, its pointer empty: c1's fact,
from a conversation nobody erased, in no active note. Refused now in one line naming the notes
and the way out (`dream undo R --force-cascade`, which undoes the erase id with the run and
leaves a1 active); a refusal of the run's plain undo no longer offers the erase id first. The
same for a prune's undo whose fused note was erased since. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result

from tests.phases.prune.test_lineage import _fused, _run
from tests.safety.test_undo import SCOPE, _fuse
from tests.support.factories import add_entities, add_notes
from tests.support.safety import note_states, run_row
from worker.app import App
from worker.cli import main
from worker.errors import Conflict
from worker.safety.erase import erase
from worker.safety.undo import UndoRefused, undo_run


def _cli(app: App, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    return CliRunner().invoke(main, list(args))


def _merged_then_erased(app: App, sources: int = 1) -> tuple[str, str]:
    """a1… (c1) and a2 (c2) merged by a run into one note; c2 erased: the a-notes of c1 are
    given back. Returns the run and the erase id."""
    add_notes(app, *({"id": f"a{k}", "user_id": "u1", "content": f"hikes in the Alps {k}",
                      "source_conversation_id": "c2" if k == 0 else "c1"}
                     for k in range(sources + 1)))
    run_id = run_row(app, SCOPE)
    ids = [f"a{k}" for k in range(sources + 1)]
    _fuse(app, run_id, ids, "hikes in the Alps, all of them")
    done = erase(app, conversation_id="c2")
    assert done.erase_id is not None and done.restored_ids == sorted(ids[1:])
    return run_id, done.erase_id


def test_undoing_an_erasure_that_would_retire_a_note_into_the_erased_one_is_refused(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain undo and the forced one: one `error:` line naming a1 and `dream undo R
    --force-cascade`, exit 4, nothing written (before: a1 revoked, pointing at nothing)."""
    run_id, erase_id = _merged_then_erased(app)
    before = note_states(app)
    for force in ([], ["--force-cascade"]):
        out = _cli(app, monkeypatch, "undo", erase_id, *force)
        assert out.exit_code == Conflict.exit_code == 4, out.output
        lines = [line for line in out.output.splitlines() if line.strip()]
        assert lines == [f"error: cannot undo {erase_id}: note a1 would be retired into no "
                         "active note (the note it was merged into is erased or retired), "
                         "leaving a fact nobody erased in none; nothing was undone; to undo "
                         f"the write that merged them, run `dream undo {run_id} --force-cascade` "
                         "instead (it gives the notes their state before that run)"]
        assert note_states(app) == before
    out = _cli(app, monkeypatch, "undo", erase_id, "--json")
    assert out.exit_code == 4 and '"undone": false' in out.output and '"id": "a1"' in out.output


def test_the_forced_undo_of_the_run_takes_the_erasure_back_and_keeps_the_fact(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The way out the refusal names: the run's undo with --force-cascade undoes the erase id
    first, then the run; a1 ends active, as before the run. The run's plain undo offers the
    forced one, not `dream undo erase-…` (which would now be refused)."""
    run_id, erase_id = _merged_then_erased(app)
    with pytest.raises(UndoRefused) as refused:
        undo_run(app, run_id)
    assert f"`dream undo {erase_id}`" not in str(refused.value)
    assert str(refused.value).endswith(
        f"pass --force-cascade (undoing {erase_id} alone is refused: it would retire notes it "
        "gave back into the note it erased)")
    out = _cli(app, monkeypatch, "undo", run_id, "--force-cascade")
    assert out.exit_code == 0, out.output
    assert f"undone {erase_id}" in out.output and f"undone run {run_id}" in out.output
    assert {i: s["status"] for i, s in note_states(app).items()} == {"a1": "active"}


def test_many_notes_are_counted_and_named_by_id(app: App) -> None:
    """Seven co-sources: the line counts them and names the first five by id; ``refused``
    lists all seven."""
    _, erase_id = _merged_then_erased(app, sources=7)
    with pytest.raises(UndoRefused, match=r": 7 notes \(a1, a2, a3, a4, a5 and 2 more\) would "
                                          "be retired into no active note") as refused:
        undo_run(app, erase_id)
    assert [r["id"] for r in refused.value.refused] == [f"a{k}" for k in range(1, 8)]


def test_a_prunes_undo_after_its_fused_note_was_erased_is_refused(app: App) -> None:
    """Sibling: prune archived the fused note (c1 deleted) and gave c2's d2 back; the fused
    note was erased since. The prune's undo, forced or not, would retire d2 into it: refused,
    nothing written (before: d2 revoked into nothing)."""
    fused = _fused(app, ("c1", "c2"))
    add_entities(app, {"kind": "conversation", "id": "c1", "status": "deleted"})
    run_id = _run(app)
    erase(app, note_id=fused)
    before = note_states(app)
    assert before["d2"]["status"] == "active"
    for force in (False, True):
        with pytest.raises(UndoRefused, match=f"cannot undo run {run_id}: note d2 would be "
                                              "retired into no active note"):
            undo_run(app, run_id, force_cascade=force)
        assert note_states(app) == before


def test_a_note_retired_again_into_a_successor_that_lives_is_undone_as_before(app: App) -> None:
    """Prune's undo with the fused note kept: d2 is retired again into it (archived → active
    again by the same undo), as before."""
    fused = _fused(app, ("c1", "c2"))
    add_entities(app, {"kind": "conversation", "id": "c1", "status": "deleted"})
    run_id = _run(app)
    undo_run(app, run_id)
    states = note_states(app)
    assert states["d2"]["status"] == "revoked" and states["d2"]["consolidated_into_id"] == fused
    assert states[fused]["status"] == "active"

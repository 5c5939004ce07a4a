"""Undo (R17) and erasure (R19) on SQLite and PostgreSQL, over changes written the way phases do."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from tests.support.factories import NOW, add_notes
from tests.support.safety import all_rows_text, fuse_in_run, note_states, run_row
from tests.support.sql import recorded_statements
from worker.app import App
from worker.cli import main
from worker.domain.types import RunStatus, Scope
from worker.errors import NotFound
from worker.export import export_notes
from worker.safety.erase import erase
from worker.safety.undo import UndoRefused, UndoResult, undo_run
from worker.store.models import NoteRow

SCOPE = Scope("agent-1", "u1")


def _fuse(app: App, run_id: str, ids: list[str], text: str) -> str:
    """What consolidation writes for one cluster: a fused note, lineage, revoked sources."""
    return fuse_in_run(app, SCOPE, run_id, ids, text, now=NOW)


def _seed(app: App) -> None:
    add_notes(app, *({"id": f"n{i}", "user_id": "u1", "content": f"User likes tea number {i}"}
                     for i in range(4)))


def test_r17_undo_restores_exactly(app: App) -> None:
    """R17: after a merge, undo gives back the same active set and contents; the fused note is
    retired with a reason, not deleted, and the run is marked undone."""
    _seed(app)
    before = note_states(app)
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["n0", "n1", "n2"], "User likes tea")
    result = undo_run(app, run_id)
    after = note_states(app)
    assert {k: v for k, v in after.items() if k != fused} == before
    assert after[fused]["status"] == "revoked" and f"undone run {run_id}" in after[fused]["comments"]
    assert sorted(result.restored) == ["n0", "n1", "n2"] and result.retired == [fused]
    with app.uow() as uow:
        assert uow.runs.get(run_id).status == RunStatus.UNDONE.value  # type: ignore[union-attr]
    with pytest.raises(Exception, match="already undone"):
        undo_run(app, run_id)


def test_an_undo_writes_in_as_many_statements_for_thirty_notes_as_for_three(app: App) -> None:
    """Undo restored each note with an UPDATE and an operation-log INSERT of its own: a run that
    merged 1,000 notes took 2,016 statements (3.6 s on SQLite). Now the restores are one guarded
    executemany per set of columns and the log one insert, whatever the run's size; the end
    state is as exact as before."""
    add_notes(app, *({"id": f"m{i:02}", "user_id": "u1", "content": f"User likes tea no. {i}"}
                     for i in range(33)))
    before = note_states(app)
    counts = []
    for ids in ([f"m{i:02}" for i in range(3)], [f"m{i:02}" for i in range(3, 33)]):
        run_id = run_row(app, SCOPE)
        _fuse(app, run_id, ids, "User likes tea")
        with recorded_statements(app) as statements:
            result = undo_run(app, run_id)
        assert sorted(result.restored) == ids
        counts.append(len(statements))
    assert counts[0] == counts[1], counts
    after = note_states(app)
    assert {k: v for k, v in after.items() if k in before} == before


def test_r17_undo_refuses_when_a_note_changed_since(app: App) -> None:
    """R17: a later run touched a note this run changed → refused naming the note; with
    force_cascade the later run is undone first and everything returns to the original state."""
    _seed(app)
    before = note_states(app)
    first = run_row(app, SCOPE)
    fused = _fuse(app, first, ["n0", "n1"], "User likes tea")
    second = run_row(app, SCOPE)
    _fuse(app, second, [fused, "n2"], "User likes tea a lot")
    with pytest.raises(UndoRefused, match=f"note {fused}") as err:
        undo_run(app, first)
    assert "--force-cascade" in str(err.value)
    assert note_states(app)[fused]["status"] == "revoked"  # refused → nothing changed
    result = undo_run(app, first, force_cascade=True, by="cli:dana")
    assert result.run_ids == [second, first]
    active = {k: v for k, v in note_states(app).items() if v["status"] == "active"}
    assert active == {k: v for k, v in before.items() if v["status"] == "active"}
    # Who undid each run and why the later one went too (before: nothing said who undid).
    with app.uow() as uow:
        runs = {r: uow.runs.get(r) for r in (first, second)}
        reasons = {r: row.status_reason if row is not None else None for r, row in runs.items()}
    first_reason, second_reason = reasons[first], reasons[second]
    assert first_reason is not None and first_reason.startswith("undone by cli:dana at ")
    assert first_reason.endswith("; was succeeded")
    assert second_reason is not None and second_reason.startswith("undone by cli:dana at ")
    assert f"(a later run, with the undo of {first}); was succeeded" in second_reason


def test_r17_undo_refuses_after_host_edit(app: App) -> None:
    """A host edit (version bump with no log row) to a note the run changed blocks undo."""
    _seed(app)
    run_id = run_row(app, SCOPE)
    _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    with app.uow() as uow:
        row = uow.session.get(NoteRow, "n0")
        assert row is not None
        row.importance, row.version = 0.9, row.version + 1
        uow.commit()
    with pytest.raises(UndoRefused, match="note n0 was edited since"):
        undo_run(app, run_id)
    assert undo_run(app, run_id, force_cascade=True).overwritten == ["n0"]


def test_r17_undo_cli(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dream undo RUN_ID` prints what it reverted; an unknown id is a one-line error, exit 2."""
    _seed(app)
    run_id = run_row(app, SCOPE)
    _fuse(app, run_id, ["n0", "n1"], "User likes tea")
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    runner = CliRunner()
    out = runner.invoke(main, ["undo", run_id])
    assert out.exit_code == 0, out.output
    assert f"undone run {run_id}" in out.output and "restored 2 notes" in out.output
    assert "retired 1 note the run(s) created" in out.output  # one count, one noun
    shown = runner.invoke(main, ["runs", "show", run_id, "--json"])
    assert json.loads(shown.stdout)["status_reason"].startswith("undone by cli:")
    # counts of nothing are left out (before: "overwrote 0 host edits, 0 already erased; …")
    assert "host edit" not in out.output and " 0 " not in out.output
    bad = runner.invoke(main, ["undo", "nope"])
    assert bad.exit_code == NotFound.exit_code and "no run with id nope" in bad.output


def test_r19_erase_follows_lineage_and_leaves_no_canary(app: App,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """R19: erasing a user removes their notes, every note derived from them (transitively,
    even across an undone run), and the canary text is nowhere in the database or export."""
    canary = "CANARY-7f3e9 lives at 12 Elm Street"
    add_notes(app, {"id": "c1", "user_id": "u1", "content": canary},
              {"id": "c2", "user_id": "u1", "content": "User likes tea"},
              {"id": "other", "user_id": "u2", "content": "Other user likes coffee"})
    r1 = run_row(app, SCOPE)
    _fuse(app, r1, ["c1", "c2"], canary + " and likes tea")
    with app.uow() as uow:
        uow.notes.log(run_id=r1, scope=SCOPE, entity_id="c2", op="update", before=None,
                      after={"quote": canary}, reason="planted quote", now=NOW)
        uow.commit()
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    out = CliRunner().invoke(main, ["erase", "--user", "u1", "--yes"])
    assert out.exit_code == 0, out.output
    assert "removed note c1" in out.output
    assert canary not in all_rows_text(app)
    assert "CANARY" not in "\n".join(export_notes(app))
    with app.uow() as uow:
        left = set(uow.session.scalars(select(NoteRow.id)))
    assert left == {"other"}


def test_r19_erase_note_removes_derived_notes_in_other_user_scope_only_by_lineage(app: App) -> None:
    """Erasing one note removes the notes derived from it (and theirs), not its siblings."""
    _seed(app)
    r1 = run_row(app, SCOPE)
    f1 = _fuse(app, r1, ["n0", "n1"], "User likes tea")
    r2 = run_row(app, SCOPE)
    f2 = _fuse(app, r2, [f1, "n2"], "User likes tea a lot")
    result = erase(app, note_id="n0")
    assert result.note_ids == ["n0"] and result.derived_ids == sorted([f1, f2])
    states = note_states(app)
    assert set(states) == {"n1", "n2", "n3"}
    assert states["n1"]["consolidated_into_id"] is None
    assert f1 not in json.dumps(all_rows_text(app))


def test_r22_erase_needs_exactly_one_subject(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dream erase` with no subject or two subjects is a one-line error and erases nothing."""
    _seed(app)
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    out = CliRunner().invoke(main, ["erase", "--user", "u1", "--note", "n0", "--yes"])
    assert out.exit_code == 2 and "exactly one" in out.output
    assert len(note_states(app)) == 4


@pytest.mark.parametrize("log_id", ["fuse-\ud800", "fuse-a\x00", "erase-" + "x" * 60, "run-1"])
def test_an_id_no_logged_write_can_have_touches_no_scope(app: App, log_id: str) -> None:
    """``logged_scopes`` answers nothing for an id a fuse, remember or erase never writes (a
    lone surrogate, a NUL, too long, another prefix), without reading the log: a driver would
    fail on the first two."""
    from worker.safety.undo import logged_scopes

    assert logged_scopes(app, log_id) == set()


@pytest.mark.parametrize(("result", "line"), [
    (UndoResult([], restored=["a", "b"]), "restored 2 notes"),
    # A count alone keeps its noun (before: "2 already erased", and after a host edit's count
    # "overwrote 1 host edit; 2 already erased" read as two host edits erased).
    (UndoResult([], missing=["a", "b"]), "2 notes already erased"),
    (UndoResult([], overwritten=["a"], missing=["b"]),
     "overwrote 1 host edit; 1 note already erased"),
    (UndoResult([], retired=["f"], judgements=2, reviews=1),
     "retired 1 note the run(s) created; removed 2 judgements the run(s) recorded; "
     "removed 1 review the run(s) recorded"),
    (UndoResult([]), "nothing to revert: the run(s) changed nothing"),
])
def test_undo_summary_names_each_count_that_is_not_zero(result: UndoResult, line: str) -> None:
    """`dream undo`'s line: every count it names has its noun, zeros are left out."""
    assert result.summary() == line

"""Undo (R17) racing other writers: a host edit landing between undo's read and its write, and
two undos of the same run at once. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, update

from tests.safety.test_undo import SCOPE, _fuse, _seed
from tests.support.safety import note_states, run_row
from tests.support.sql import before_first
from worker.app import App
from worker.domain.types import RunStatus
from worker.errors import RunError
from worker.safety.undo import UndoRefused, undo_run
from worker.store.models import DreamRunRow, OperationLogRow


def _host_edit(app: App, note_id: str) -> None:
    with app.uow() as uow:
        (note,) = uow.notes.get_many([note_id])
        assert uow.notes.change(note, run_id=None, reason="host edit", importance=0.9)
        uow.commit()


def _undo_rows(app: App) -> int:
    with app.uow() as uow:
        return len(list(uow.session.scalars(
            select(OperationLogRow.id).where(OperationLogRow.op == "undo"))))


PG = [pytest.param("postgres", marks=pytest.mark.postgres)]


def _merged(app: App) -> tuple[str, str]:
    """A finished run that merged n0 and n1 (of four notes): its id, the fused note's id."""
    _seed(app)
    run_id = run_row(app, SCOPE)
    return run_id, _fuse(app, run_id, ["n0", "n1"], "User likes tea")


def _run_status(app: App, run_id: str) -> tuple[str, str | None]:
    with app.uow() as uow:
        run = uow.session.get_one(DreamRunRow, run_id)
        return run.status, run.status_reason


def test_a_host_edit_landing_as_the_undo_starts_writing_refuses_it(app: App) -> None:
    """R17, R10: a host edit that commits after undo checked the notes and before it writes is
    seen: the undo refuses, naming the note, and writes nothing. Before, the note's guarded
    restore matched no row and was ignored: the run read ``undone`` and an undo was logged for
    the note, which stayed merged away."""
    run_id, _ = _merged(app)
    before = note_states(app)
    with before_first(app, "UPDATE ", lambda: _host_edit(app, "n0")), \
            pytest.raises(UndoRefused, match="note n0 was changed since by the host"):
        undo_run(app, run_id)
    after = note_states(app)
    assert after["n0"]["importance"] == 0.9 and after["n0"]["status"] == "revoked"
    assert {k: v for k, v in after.items() if k != "n0"} == \
        {k: v for k, v in before.items() if k != "n0"}
    assert _undo_rows(app) == 0 and _run_status(app, run_id)[0] == RunStatus.SUCCEEDED.value
    assert undo_run(app, run_id, force_cascade=True).overwritten == ["n0"]


@pytest.mark.parametrize("app", PG, indirect=True)
def test_a_host_edit_landing_between_the_undos_read_and_its_restore_refuses_it(
        app: App) -> None:
    """PostgreSQL, READ COMMITTED: the undo locks no note while it reads, so a host edit can
    commit right before the restore locks its notes; the restore's version guard then matches
    no row and the whole undo rolls back with one line naming the note (before: ignored, the
    run marked undone with n0 still merged away)."""
    run_id, _ = _merged(app)
    with before_first(app, RESTORE_LOCK.format(table="notes"), lambda: _host_edit(app, "n0")), \
            pytest.raises(UndoRefused, match="note n0 changed while the undo was being written"):
        undo_run(app, run_id)
    assert note_states(app)["n0"]["status"] == "revoked"
    assert _undo_rows(app) == 0 and _run_status(app, run_id)[0] == RunStatus.SUCCEEDED.value


# The restore's first statement on PostgreSQL: it locks the rows it restores, in id order.
RESTORE_LOCK = "SELECT {table}.id FROM {table} WHERE {table}.id IN"


def _undo_starts(app: App, on_sqlite: str = "UPDATE ") -> str:
    """Where a second undo lands inside the first: on PostgreSQL as the first takes its scope
    lock (later it would wait on that lock, here in its own thread, for good; in two threads
    the second waits for the first to commit, then finds the run undone, as here); on SQLite,
    which has no scope lock, as the first writes."""
    return "SELECT pg_advisory_xact_lock" if app.engine.dialect.name == "postgresql" \
        else on_sqlite


def test_a_second_undo_of_the_same_run_at_once_is_refused_as_already_undone(app: App) -> None:
    """Two undos of one run at once: the first restores; the second, which found the run
    finished before the first committed, is refused as already undone and writes nothing.
    Before, it logged a second undo of every note, said it restored them, and rewrote the
    run's reason with its own name."""
    run_id, _ = _merged(app)
    first: list[Any] = []
    with before_first(app, _undo_starts(app),
                      lambda: first.append(undo_run(app, run_id, by="cli:first"))), \
            pytest.raises(RunError, match=f"run {run_id} is already undone"):
        undo_run(app, run_id, by="cli:second")
    assert sorted(first[0].restored) == ["n0", "n1"]
    assert _undo_rows(app) == 3  # n0 and n1 restored, the fused note retired: once each
    status, reason = _run_status(app, run_id)
    assert status == RunStatus.UNDONE.value
    assert reason is not None and reason.startswith("undone by cli:first")


def test_a_second_undo_of_the_same_fuse_at_once_is_refused_as_already_undone(app: App) -> None:
    """The sibling without a run row (a host fuse's ``fuse-…`` id): the second undo's restores
    find the notes moved and it is refused whole; before, it logged a second undo of each note
    and answered that it restored them."""
    from worker.host import fuse

    _seed(app)
    undo_id = fuse(app, ["n0", "n1"], "User likes tea").undo_id
    first: list[Any] = []
    with before_first(app, _undo_starts(app, "UPDATE notes SET"),
                      lambda: first.append(undo_run(app, undo_id))), \
            pytest.raises(RunError, match=f"{undo_id} is already undone"):
        undo_run(app, undo_id)
    assert sorted(first[0].restored) == ["n0", "n1"]
    assert _undo_rows(app) == 3
    assert {n: s["status"] for n, s in note_states(app).items() if n in ("n0", "n1")} == \
        {"n0": "active", "n1": "active"}


@pytest.mark.parametrize("app", PG, indirect=True)
def test_an_example_changed_between_the_undos_read_and_its_restore_refuses_it(
        app: App) -> None:
    """The examples' sibling: an example re-scored right before its restore makes the undo
    refuse, nothing written; before, its restore was skipped in silence and the run read
    ``undone`` with the example still archived."""
    from tests.support.factories import NOW
    from worker.ingest import import_examples
    from worker.store.models import ExampleRow

    import_examples(app, ['{"id": "e1", "agent_id": "agent-1", "user_id": "u1", '
                          '"input": "q", "output": "a", "is_auto_generated": true}'])
    run_id = run_row(app, SCOPE)
    with app.uow() as uow:
        uow.session.execute(update(ExampleRow).where(ExampleRow.id == "e1")
                            .values(status="archived", version=ExampleRow.version + 1))
        uow.notes.log(run_id=run_id, scope=SCOPE, entity_id="e1", op="update", entity="example",
                      before={"status": "active", "version": 1},
                      after={"status": "archived", "version": 2}, reason="expired", now=NOW)
        uow.commit()

    def rescore() -> None:
        with app.uow() as uow:
            uow.session.execute(update(ExampleRow).where(ExampleRow.id == "e1")
                                .values(success_score=0.1, version=ExampleRow.version + 1))
            uow.commit()

    with before_first(app, RESTORE_LOCK.format(table="examples"), rescore), \
            pytest.raises(UndoRefused, match="example e1 changed while"):
        undo_run(app, run_id)
    with app.uow() as uow:
        assert uow.session.get_one(ExampleRow, "e1").status == "archived"
    assert _run_status(app, run_id)[0] == RunStatus.SUCCEEDED.value


@pytest.mark.parametrize("status", [RunStatus.RUNNING.value, RunStatus.INTERRUPTED.value])
def test_force_cascade_refuses_while_a_later_run_that_changed_the_notes_is_unfinished(
        app: App, status: str) -> None:
    """--force-cascade undoes the later runs that changed the run's notes; a later run still
    running (or interrupted, to resume) cannot be undone, so the undo is refused, naming it and
    the way out, with nothing written. Before, its change was overwritten and counted as a
    host edit: the fused note it built from this run's note stayed active beside the sources
    the undo made active again."""
    run_id, fused = _merged(app)
    later = run_row(app, SCOPE, status=status)
    _fuse(app, later, [fused, "n2"], "User likes tea a lot")
    before = note_states(app)
    with pytest.raises(UndoRefused, match=f"run {later}, which changed note {fused} since, "
                                          f"is {status}"):
        undo_run(app, run_id, force_cascade=True)
    assert note_states(app) == before and _undo_rows(app) == 0
    assert _run_status(app, run_id)[0] == RunStatus.SUCCEEDED.value


def test_a_cascade_counts_each_note_once_as_it_ends(app: App) -> None:
    """--force-cascade over two runs (the second fused the first's note with n2): the answer
    names what the undo did to each note once, as it ends: n0, n1 and n2 restored, both fused
    notes retired. Before, the first fused note was counted restored (by the later run's undo)
    and retired (by this run's): "restored 4 notes" when three came back."""
    run_id, fused = _merged(app)
    later = run_row(app, SCOPE)
    newer = _fuse(app, later, [fused, "n2"], "User likes tea a lot")
    result = undo_run(app, run_id, force_cascade=True)
    assert sorted(result.restored) == ["n0", "n1", "n2"]
    assert sorted(result.retired) == sorted([fused, newer])
    assert result.summary() == "restored 3 notes; retired 2 notes the run(s) created"
    states = note_states(app)
    assert sorted(n for n, s in states.items() if s["status"] == "active") == \
        ["n0", "n1", "n2", "n3"]


def test_without_force_an_unfinished_later_run_is_named_with_the_way_out(app: App) -> None:
    """The plain refusal names the unfinished later run and says to wait for it or cancel it;
    before, it said "undo the later run first or pass --force-cascade", and the first is
    refused while that run runs."""
    run_id, fused = _merged(app)
    later = run_row(app, SCOPE, status=RunStatus.RUNNING.value)
    _fuse(app, later, [fused, "n2"], "User likes tea a lot")
    with pytest.raises(UndoRefused, match=f"run {later}, which changed note {fused} since, is "
                                          f"running; wait for it to finish .*runs cancel"):
        undo_run(app, run_id)

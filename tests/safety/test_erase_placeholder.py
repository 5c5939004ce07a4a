"""The ``[erased]`` user the runs of erased users are kept under (found by the adversarial pass):
no real user may take that name, and those runs ask nothing of an operator. SQLite and
PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from tests.safety.test_erase_leftovers import USER, _dream
from worker.app import App
from worker.cli import main
from worker.domain.types import ERASED_USER, RunStatus, Scope
from worker.ingest import InputError, import_notes, import_sessions
from worker.reporting import runs_page, scope_health
from worker.runs import service
from worker.safety.erase import erase
from worker.store.models import DreamRunRow, NoteRow, SessionRow
from worker.store.repositories.dashboard import ScopeFilter

Importer = Callable[[App, Iterable[str]], object]


@pytest.mark.parametrize("importer, line, table", [
    (import_notes, {"agent_id": "agent-1", "user_id": ERASED_USER, "content": "likes tea"},
     NoteRow),
    (import_sessions, {"agent_id": "agent-1", "user_id": ERASED_USER,
                       "started_at": "2026-06-01T10:00:00+00:00"}, SessionRow),
])
def test_no_user_is_named_like_the_erased_users_placeholder(
        app: App, importer: Importer, line: dict[str, str], table: type) -> None:
    """A host user called ``[erased]`` shared the scope every erased user's runs move to: its
    gate read their last dream (too soon), its runs list and scoped token showed their runs.
    Now the name is refused like any bad id, one line naming it, and nothing is written."""
    with pytest.raises(InputError, match=r"^line 1: user_id \[erased\] is reserved"):
        importer(app, [json.dumps(line)])
    with app.uow() as uow:
        assert uow.session.scalars(select(table)).first() is None


def test_no_run_is_started_in_the_erased_users_placeholder(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dream run --user [erased] --force`` created a run in the erased users' scope (mixed with
    their history); now it is one usage error and no run row."""
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    out = CliRunner().invoke(main, ["run", "--agent", "agent-1", "--user", ERASED_USER,
                                    "--force"])
    assert out.exit_code == 2 and "[erased] is reserved" in out.output, out.output
    with app.uow() as uow:
        assert uow.session.scalars(select(DreamRunRow)).first() is None


def test_an_erased_users_runs_leave_the_gauge_and_the_attention_list(app: App) -> None:
    """The user's last dream was blocked with two open candidates. After the erasure
    ``dream_open_candidates`` kept reporting two for the placeholder scope and the dashboard
    kept the blocked run first, needing attention, for ever: the candidates went with the
    notes and the placeholder scope never runs again. Now neither counts it; the run is still
    listed with its status."""
    run_id = _dream(app, USER)
    with app.uow() as uow:
        uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == run_id).values(
            status=RunStatus.BLOCKED.value, totals={"open_candidates": 2}))
        uow.commit()
        assert uow.run_history.latest_open_candidates() == {Scope("agent-1", USER).key: 2}
    assert runs_page(app, ScopeFilter(), 1, 10)["runs"][0]["attention"] is True

    erase(app, user_id=USER)
    with app.uow() as uow:
        assert uow.run_history.latest_open_candidates() == {}
    [run] = runs_page(app, ScopeFilter(), 1, 10)["runs"]
    assert (run["id"], run["status"], run["attention"]) == (
        run_id, RunStatus.BLOCKED.value, False)


def test_an_erased_users_growing_candidates_flag_no_scope_on_the_dashboard(app: App) -> None:
    """The user's last three dreams left 1, 2, then 3 open candidates: the health view flags the
    scope. After the erasure the placeholder scope kept that flag for good (its series is
    history, it never runs again); now its row shows the series and flags nothing."""
    runs = [_dream(app, USER)]
    for _ in range(2):
        again = service.create_run(app, Scope("agent-1", USER), force=True)
        assert again is not None
        service.execute_run(app, again)
        runs.append(again)
    with app.uow() as uow:
        for count, run_id in enumerate(runs, start=1):
            uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == run_id).values(
                totals={"open_candidates": count}))
        uow.commit()
    [row] = scope_health(app, ScopeFilter(), 1, 10)["scopes"]
    assert (row["open"], row["open_growing"]) == ([1, 2, 3], True)

    erase(app, user_id=USER)
    [row] = scope_health(app, ScopeFilter(), 1, 10)["scopes"]
    assert (row["scope"], row["open"], row["open_growing"]) == (
        Scope("agent-1", ERASED_USER).key, [1, 2, 3], False)


def test_undoing_an_erased_users_run_is_refused_and_changes_nothing(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dream undo` of a run of a user erased since said "undone run …, restored 0 notes" and
    set the kept run's status to ``undone``: a revert that never happened, and the record of
    what ran rewritten. Now it is one error line and the run stays as it was."""
    run_id = _dream(app, USER)
    erase(app, user_id=USER)
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    out = CliRunner().invoke(main, ["undo", run_id])
    assert out.exit_code != 0
    assert out.output.startswith(f"error: run {run_id} was a run of a user since erased"), \
        out.output
    with app.uow() as uow:
        assert uow.runs.get(run_id).status == RunStatus.SUCCEEDED.value  # type: ignore[union-attr]

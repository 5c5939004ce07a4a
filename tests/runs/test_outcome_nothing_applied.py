"""A run that applied nothing says so (R27): a dream recovered after a crash whose every planned
change went stale ends `succeeded` with flag `all_stale` and a reason saying it applied nothing,
as `dream runs list` shows; one that applied some of its changes is plain `succeeded`. (An
approval's run that applied nothing ends `cancelled`: tests/review/test_approval_crash.py.)
SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from click.testing import CliRunner

from tests.support.factories import add_notes
from tests.support.sql import before_first
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.runs import service
from worker.runs.create import create_claimed_run

SCOPE = Scope("a1")
EXPIRED = (utcnow() - timedelta(days=2)).isoformat()


def _host_edits(app: App, *note_ids: str) -> Callable[[], None]:
    def edit() -> None:
        with app.uow() as uow:
            for note in uow.notes.get_many(list(note_ids)):
                assert uow.notes.change(note, run_id=None, reason="host edit", importance=0.9)
            uow.commit()
    return edit


def _recovered(app: App) -> str:
    """An archive run whose creator died before its first phase, recovered by the gate check
    once its lease lapsed: the run id to execute again."""
    snap = create_claimed_run(app, SCOPE, force=True, phases=["archive"])
    assert snap is not None
    later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 60)
    (retried,) = service.gate_check(app, now=later).retried
    assert retried == snap.run_id
    return retried


def _run(app: App, run_id: str) -> dict[str, Any]:
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        return {"status": run.status, "reason": run.status_reason,
                "flags": (run.totals or {}).get("flags")}


def test_a_recovered_run_whose_every_change_went_stale_says_it_applied_nothing(
        app: App) -> None:
    """Both expired notes change (a host edit) between the recovered run's plan and its write:
    both archivings are stale, nothing is applied. Before, the run read plain `succeeded`, as
    if it had archived them; now its reason says it applied nothing and why, flag
    `all_stale`, and `dream runs list` shows both. (Not `blocked`: the host's edit may have
    taken the work away, a renewed note is no longer due; nothing needs anyone.)"""
    add_notes(app, {"id": "e1", "agent_id": "a1", "content": "On call this week",
                    "expires_at": EXPIRED},
              {"id": "e2", "agent_id": "a1", "content": "Travelling to Porto",
               "expires_at": EXPIRED})
    run_id = _recovered(app)
    with before_first(app, "UPDATE notes", _host_edits(app, "e1", "e2")):
        assert service.execute_run(app, run_id) == "succeeded"
    run = _run(app, run_id)
    assert run["flags"] == ["all_stale"]
    assert run["reason"].startswith("applied nothing: all 2 changes it planned went stale")
    with app.uow() as uow:
        assert {n.id: n.status for n in uow.notes.get_many(["e1", "e2"])} == {
            "e1": "active", "e2": "active"}
    listed = CliRunner().invoke(main, ["runs", "list", "--json"], env={
        "DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LLM_PROVIDER": "none"})
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    assert (row["status"], row["totals"]["flags"]) == ("succeeded", ["all_stale"])
    assert row["status_reason"] == run["reason"]
    text = CliRunner().invoke(main, ["runs", "list"], env={
        "DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LLM_PROVIDER": "none"})
    assert f"({run['reason']})" in text.stdout


def test_a_recovered_run_that_applied_part_of_its_changes_still_succeeds(app: App) -> None:
    """One of two archivings goes stale, the other is applied: the run did work, so it is
    `succeeded`, with no flag (a stale item beside applied ones is R10 doing its job)."""
    add_notes(app, {"id": "e1", "agent_id": "a1", "content": "On call this week",
                    "expires_at": EXPIRED},
              {"id": "e2", "agent_id": "a1", "content": "Travelling to Porto",
               "expires_at": EXPIRED})
    run_id = _recovered(app)
    with before_first(app, "UPDATE notes", _host_edits(app, "e1")):
        assert service.execute_run(app, run_id) == "succeeded"
    assert _run(app, run_id) == {"status": "succeeded", "reason": None, "flags": []}
    with app.uow() as uow:
        assert {n.id: n.status for n in uow.notes.get_many(["e1", "e2"])} == {
            "e1": "active", "e2": "archived"}

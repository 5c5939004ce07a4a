"""Archive items for examples (and the archive phase's note items): the plan records what it
decided on; an example or note moved since then (taken over as manual, renewed, re-scored,
touched, edited) is refused as stale in one line naming it, with no approval run and nothing
written; a batch records it stale and applies the rest."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import select, update

from tests.support.factories import NOW, add_entities, add_notes, days_ago
from tests.support.host_writes import host_sets
from worker.app import App
from worker.cli import main
from worker.cli.common import Outcome
from worker.domain.types import Scope
from worker.errors import Conflict
from worker.ingest import import_examples
from worker.review.service import list_items, show_item
from worker.runs.service import create_run, execute_run
from worker.store.models import ExampleRow, NoteRow

SCOPE = Scope("agent-1")
LATER = NOW + timedelta(days=30)


def _cli(app: App, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={
        "DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LLM_PROVIDER": "none",
        "DREAM_LOG_LEVEL": "WARNING"})


def _examples_set(app: App, example_id: str, **columns: Any) -> None:
    """The host changes ``columns`` of the example: no lease, its own transaction."""
    with app.uow() as uow:
        uow.session.execute(update(ExampleRow).where(ExampleRow.id == example_id)
                            .values(**columns))
        uow.commit()


def _state(app: App) -> dict[str, tuple[str, int]]:
    with app.uow() as uow:
        rows = [*uow.session.scalars(select(ExampleRow)), *uow.session.scalars(select(NoteRow))]
        return {r.id: (r.status, r.version) for r in rows}


def _proposed(app: App) -> dict[str, int]:
    """A propose run's archive items: the expired examples e1, e2, the unsuccessful unused
    example e3 and the expired note n1; item id by what it archives."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "propose"})
    examples: list[dict[str, Any]] = [
        {"id": "e1", "expires_at": days_ago(1)}, {"id": "e2", "expires_at": days_ago(2)},
        {"id": "e3", "success_score": 10, "created_at": days_ago(400),
         "last_accessed_at": days_ago(200)}]
    import_examples(app, [json.dumps({"agent_id": "agent-1", "input": f"q{i}", "output": "a",
                                      **e}) for i, e in enumerate(examples)])
    add_notes(app, {"id": "n1", "content": "sale ends Friday", "expires_at": days_ago(1),
                    "last_accessed_at": days_ago(0)})
    run_id = create_run(app, SCOPE, force=True, clock=NOW, phases=["archive"])
    assert run_id is not None and execute_run(app, run_id) == "succeeded"
    items = {i["note_ids"][0]: i["id"] for i in list_items(app, SCOPE, run_id=run_id)}
    assert set(items) == {"e1", "e2", "e3", "n1"}
    return items


def _review_runs(app: App) -> list[str]:
    with app.uow() as uow:
        return [r.status for r in uow.runs.list(SCOPE) if r.trigger == "review"]


@pytest.mark.parametrize(("example_id", "host", "said"), [
    ("e1", {"is_auto_generated": False}, "is_auto_generated True → False"),  # manual takeover
    ("e1", {"expires_at": LATER}, "expires_at"),  # renewed: no longer expired
    ("e3", {"success_score": 90.0}, "success_score 10.0 → 90.0"),  # no longer unsuccessful
    ("e3", {"last_accessed_at": NOW}, "last_accessed_at"),  # used again
    ("e1", {"version": 2}, "version 1 → 2"),  # edited
])
def test_an_example_moved_since_the_proposal_is_refused_as_stale(
        app: App, example_id: str, host: dict[str, Any], said: str) -> None:
    """Approving the moved example's item: one line naming the example and what changed, no
    approval run, nothing written, the item still open; approving all records it stale and
    archives the rest, each in its own run."""
    items = _proposed(app)
    _examples_set(app, example_id, **host)
    before = _state(app)
    refused = _cli(app, "review", "approve", str(items[example_id]), "--agent", "agent-1")
    assert refused.exit_code == Conflict.exit_code, refused.output
    (line,) = refused.stderr.strip().splitlines()
    assert f"item {items[example_id]} is stale: example {example_id} changed" in line, line
    assert said in line and "note" not in line, line
    assert _state(app) == before and _review_runs(app) == []
    assert show_item(app, SCOPE, items[example_id])["status"] == "open"

    batch = _cli(app, "review", "approve", "--all", "--agent", "agent-1")
    assert batch.exit_code == Outcome.STALE, batch.output
    statuses = {i["note_ids"][0]: i["status"] for i in list_items(app, SCOPE, status=None)}
    assert statuses == {**dict.fromkeys(items, "approved"), example_id: "stale"}
    after = _state(app)
    assert after[example_id] == before[example_id]
    assert {i: s for i, (s, _) in after.items() if i != example_id} == {
        i: "archived" for i in items if i != example_id}
    assert _review_runs(app) == ["succeeded"] * 3


def test_an_example_gone_since_the_proposal_is_stale_and_named(app: App) -> None:
    """An example that no longer exists: refused in one line naming the example."""
    items = _proposed(app)
    with app.uow() as uow:
        uow.session.query(ExampleRow).filter(ExampleRow.id == "e2").delete()
        uow.commit()
    refused = _cli(app, "review", "approve", str(items["e2"]), "--agent", "agent-1")
    assert refused.exit_code == Conflict.exit_code, refused.output
    (line,) = refused.stderr.strip().splitlines()
    assert "example e2 no longer exists" in line and _review_runs(app) == []


@pytest.mark.parametrize(("host", "said"), [
    ({"is_auto_generated": False}, "is_auto_generated True → False"),
    ({"expires_at": LATER}, "expires_at"),
])
def test_an_archive_phase_note_moved_since_the_proposal_is_refused_as_stale(
        app: App, host: dict[str, Any], said: str) -> None:
    """The archive phase's own note items record what it decided on too: a note taken over
    as manual or renewed since is refused as stale with no run, never archived."""
    items = _proposed(app)
    host_sets(app, "n1", **host)
    before = _state(app)
    refused = _cli(app, "review", "approve", str(items["n1"]), "--agent", "agent-1")
    assert refused.exit_code == Conflict.exit_code, refused.output
    (line,) = refused.stderr.strip().splitlines()
    assert f"item {items['n1']} is stale: note n1 changed" in line and said in line, line
    assert _state(app) == before and _review_runs(app) == []


def test_the_next_run_records_a_moved_examples_item_stale(app: App) -> None:
    """As for notes: the next propose run records an example's item stale once the example
    was taken over as manual, and leaves the others open."""
    items = _proposed(app)
    _examples_set(app, "e1", is_auto_generated=False)
    run_id = create_run(app, SCOPE, force=True, clock=NOW, phases=["archive"])
    assert run_id is not None and execute_run(app, run_id) == "succeeded"
    statuses = {i["id"]: i["status"] for i in list_items(app, SCOPE, status=None)}
    assert statuses == {**dict.fromkeys(items.values(), "open"), items["e1"]: "stale"}


def test_show_marks_a_moved_example_changed(app: App) -> None:
    """`review show` of an example's item lists the example, marked changed once it moved."""
    items = _proposed(app)
    _examples_set(app, "e1", is_auto_generated=False)
    shown = {e["id"]: e["changed"] for e in show_item(app, SCOPE, items["e1"])["examples"]}
    assert shown == {"e1": True}
    assert {e["id"]: e["changed"] for e in show_item(app, SCOPE, items["e2"])["examples"]} == {
        "e2": False}

"""Run steps as dashboards read them: four parent steps always; a failing prune makes a partial run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import NOW, add_entities, add_notes, days_ago
from worker.app import App
from worker.domain.types import RunStatus, Scope
from worker.reporting import render_tree, run_tree
from worker.runs import service

SCOPE = Scope("agent-1")


def _run(app: App) -> str:
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW)
    assert run_id
    service.execute_run(app, run_id)
    return run_id


def test_nothing_to_do_still_shows_four_parent_steps(app: App) -> None:
    """An empty scope: four parent steps in phase order, prune/archive no_items with zero counters."""
    run_id = _run(app)
    tree = run_tree(app, run_id)
    assert [s["phase"] for s in tree["steps"]] == ["consolidate", "contradictions", "prune", "archive"]
    by_phase = {s["phase"]: s for s in tree["steps"]}
    assert by_phase["prune"]["status"] == by_phase["archive"]["status"] == "no_items"
    assert {k: v for k, v in by_phase["prune"]["output"].items() if k != "reason"} == {
        "notes_checked": 0, "notes_archived": 0, "orphaned_agents": 0, "orphaned_users": 0,
        "orphaned_companies": 0, "orphaned_conversations": 0, "unknown_agents": 0,
        "unknown_users": 0, "unknown_companies": 0, "unknown_conversations": 0}
    assert {k: v for k, v in by_phase["archive"]["output"].items() if k != "reason"} == {
        "notes_expired": 0, "notes_stale": 0, "examples_expired": 0, "examples_stale": 0,
        "protected_preserved": 0, "manual_preserved": 0,
        "examples_manual_preserved": 0}
    assert all(s["duration_ms"] is not None and s["finished_at"] for s in tree["steps"])
    assert tree["status"] == RunStatus.SUCCEEDED.value


def test_failing_prune_leaves_archive_running_and_run_partial(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference checker breaks: prune fails, archive still archives, the run is partial."""

    class BrokenChecker:
        lookups: Any = None

        def records(self, kind: str, ids: Any) -> Any:
            raise ConnectionError("host registry unreachable")

    app.reference_checker = lambda a: BrokenChecker()
    add_notes(app, {"id": "old", "content": "a", "created_at": days_ago(200),
                    "access_count": 1, "last_accessed_at": days_ago(200)})  # read once, long
    # ago: idle past retention (a read with no date is never idle)
    run_id = _run(app)
    tree = run_tree(app, run_id)
    by_phase = {s["phase"]: s for s in tree["steps"]}
    assert by_phase["prune"]["status"] == "failed"
    assert "ConnectionError" in by_phase["prune"]["error"]
    assert by_phase["archive"]["status"] == "succeeded"
    assert by_phase["archive"]["output"]["notes_stale"] == 1
    assert tree["status"] == RunStatus.PARTIAL.value


def test_run_totals_and_tree_rendering(app: App) -> None:
    """The run row holds notes before/after per status, tokens and durations; the tree prints them."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "status": "disabled"})
    add_notes(app, {"id": "a", "content": "one"}, {"id": "b", "content": "two"})
    run_id = _run(app)
    tree = run_tree(app, run_id)
    totals = tree["totals"]
    assert totals["notes_before"] == {"active": 2}
    assert totals["notes_after"] == {"archived": 2}
    assert set(totals["phase_ms"]) == {"consolidate", "contradictions", "prune", "archive"}
    assert totals["tokens_in"] == 0 and totals["duration_ms"] >= sum(totals["phase_ms"].values())
    text = render_tree(tree)
    assert "prune" in text and "notes_archived=2" in text and " ms" in text
    assert "orphans" in text  # the child step is printed under its parent
    # Each child step names the notes it is about: here the notes the orphan check archived.
    assert any(line.strip().startswith("orphans") and line.endswith("archived: a, b")
               for line in text.splitlines())
    assert "  duration " in text

"""A run claimed again (resumed) carries no reason from before: the reason an erasure gave
when it interrupted the run does not stay on it while it runs, nor on a later interruption
that gives none (its lease lapsing), where `dream run` would print the erasure as the cause."""

from __future__ import annotations

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.reporting import run_tree
from worker.runs import service
from worker.safety.erase import erase


def test_a_resumed_run_drops_the_reason_of_its_interruption(app: App) -> None:
    add_notes(app, {"id": "a", "content": "User owns a red bicycle", "source_conversation_id": "c0"},
              {"id": "b", "content": "User drinks green tea", "source_conversation_id": "c1"})
    run_id = service.create_run(app, Scope("agent-1"), force=True)
    assert run_id and service.claim_run(app, run_id) is not None
    erase(app, conversation_id="c0")
    interrupted = run_tree(app, run_id)
    assert interrupted["status"] == "interrupted"
    assert "interrupted by an erasure" in interrupted["status_reason"]
    assert service.claim_run(app, run_id) is not None
    resumed = run_tree(app, run_id)
    assert (resumed["status"], resumed["status_reason"]) == ("running", None)

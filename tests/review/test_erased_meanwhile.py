"""One review item named by its id, taken by an erasure (with the notes it names) after the
approval or decline read it: answered "gone", exit 14, as a batch answers such an item. Before,
the single form ended in an ``error:`` line, exit 4 (the API's 409), calling the item stale
(approve) or decided meanwhile (decline), where the batch said gone. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.review.test_service import STALE, _cli, _merge, _propose, _seed
from worker.app import App
from worker.domain.types import Scope
from worker.review.items import GONE
from worker.review.service import Selector, approve, decline
from worker.safety.erase import erase
from worker.store.repositories.review import ReviewItemRepository

SCOPE = Scope("agent-1")


def erase_once_read(app: App, monkeypatch: pytest.MonkeyPatch, note_id: str) -> None:
    """`dream erase --note` of ``note_id`` right after the decision first reads its item."""
    read = ReviewItemRepository.get
    done: list[bool] = []

    def then_erased(self: ReviewItemRepository, scope: Scope, item_id: int) -> Any:
        row = read(self, scope, item_id)
        if not done:
            done.append(True)
            erase(app, note_id=note_id)
        return row

    monkeypatch.setattr(ReviewItemRepository, "get", then_erased)


@pytest.mark.parametrize("action", ["approve", "decline"])
def test_a_named_item_erased_meanwhile_is_gone_exit_14(
        app: App, monkeypatch: pytest.MonkeyPatch, action: str) -> None:
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    other = _propose(app, _merge(["c1", "c2"], "Works from Lisbon on Fridays."))
    erase_once_read(app, monkeypatch, "t1")
    out = _cli(app, "review", action, str(item), "--agent", "agent-1")
    assert (out.exit_code, out.stderr) == (STALE, ""), out.output
    assert out.stdout == (f"review item {item} is gone: erased meanwhile with the notes it "
                          "named; nothing was written for it\n")
    with app.uow() as uow:
        kept = uow.review.get(SCOPE, other)
        assert uow.review.get(SCOPE, item) is None and kept is not None
        assert kept.status == "open"


@pytest.mark.parametrize("decide", [approve, decline])
def test_the_service_answers_a_named_erased_item_as_a_batch_does(
        app: App, monkeypatch: pytest.MonkeyPatch, decide: Any) -> None:
    """What the API and MCP answer (``decided_body``): the item's status ``gone``, outcome
    ``stale``, never a Conflict (409)."""
    from worker.review.items import decided_body

    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    erase_once_read(app, monkeypatch, "t2")
    body = decided_body(decide(app, SCOPE, Selector(item_id=item), "test"))
    assert [(i["id"], i["status"]) for i in body["items"]] == [(item, GONE)]
    assert body["outcome"] == "stale"

"""Two reviewers deciding the same item at once: the one that loses says what the other
decided, never that the item went stale, and an approval that loses writes nothing. SQLite
and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from tests.review.test_service import SCOPE, _merge, _propose, _seed, _statuses
from tests.support.sql import before_first
from worker.app import App
from worker.errors import Conflict
from worker.review import service as review
from worker.store.models import DreamRunRow, ReviewItemRow

# The approval's run is inserted just before its change is written: a decision by someone
# else that lands here finds the item open and the notes as the loser read them.
APPROVAL_RUN = "INSERT INTO dream_runs"


def _item(app: App, item_id: int) -> ReviewItemRow:
    with app.uow() as uow:
        return uow.session.get_one(ReviewItemRow, item_id)


def _by(app: App, item_id: int, who: str) -> Callable[[], Any]:
    return lambda: review.approve(app, SCOPE, review.Selector(item_id=item_id), by=who)


def test_a_second_approval_of_one_item_at_once_names_the_first(app: App) -> None:
    """Two approvals of one item: the first applies it; the second, which found it open,
    is refused (409) naming the first approver and its run, and writes nothing. Before, it
    answered "item 1 is stale: a note changed while it was being applied; … the next run
    proposes afresh" about an item that was approved and applied."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    first: list[Any] = []
    with before_first(app, APPROVAL_RUN, lambda: first.append(_by(app, item, "cli:ana")())), \
            pytest.raises(Conflict, match=f"review item {item} was decided meanwhile: it is "
                                          "approved: approved by cli:ana in run "):
        _by(app, item, "cli:bob")()
    assert [d.status for d in first[0]] == ["approved"]
    row = _item(app, item)
    assert (row.status, row.decided_by, row.applied_run_id) == (
        "approved", "cli:ana", first[0][0].run_id)
    assert sorted(s for s, _ in _statuses(app).values()) == ["active"] * 3 + ["revoked"] * 2


@pytest.mark.parametrize("when", [
    # after the batch read its items, before it reads their notes: it finds them moved
    "SELECT notes",
    # after it read the notes as proposed, as it starts the item's run: the write finds them moved
    APPROVAL_RUN,
])
def test_a_batch_losing_an_item_to_another_approval_names_it(app: App, when: str) -> None:
    """A batch (`--all`) whose item another reviewer approves after the batch read it: that
    item is answered as decided meanwhile (approved, by whom, in which run), the batch's
    outcome stale, nothing written twice. Before, the batch said the item was stale (a note
    changed since it was proposed; the next run proposes afresh) about an applied item."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    with before_first(app, when, _by(app, item, "cli:ana")):
        (decided,) = review.approve(app, SCOPE, review.Selector(all=True), by="cli:bob")
    assert decided.status == "refused", decided.line
    assert decided.line.startswith(f"review item {item} was decided meanwhile: it is approved: "
                                   "approved by cli:ana in run ")
    row = _item(app, item)
    assert (row.status, row.decided_by) == ("approved", "cli:ana")
    # one fused note (t1 and t2 into it), written once
    assert sorted(s for s, _ in _statuses(app).values()) == ["active"] * 3 + ["revoked"] * 2


@pytest.mark.parametrize("batch", [False, True])
def test_a_decline_landing_as_the_approval_starts_rolls_its_change_back_unseen(
        app: App, batch: bool) -> None:
    """Bo declines the item after Ana's approval read it open: the approval's write goes in
    with its decision or not at all, so it is rolled back, never committed and undone; the
    answer names Bo's decline, the approval's run ends cancelled with nothing logged. Before,
    the merge was committed, then found the item declined and undid its own run."""
    _seed(app)
    before = _statuses(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))

    def decline() -> None:
        review.decline(app, SCOPE, review.Selector(item_id=item), by="cli:bo")

    selector = review.Selector(all=True) if batch else review.Selector(item_id=item)
    with before_first(app, APPROVAL_RUN, decline):
        if batch:
            (decided,) = review.approve(app, SCOPE, selector, by="cli:ana")
            line = decided.line
        else:
            with pytest.raises(Conflict) as refused:
                review.approve(app, SCOPE, selector, by="cli:ana")
            line = str(refused.value)
    assert line.startswith(f"review item {item} was decided meanwhile: it is declined: "
                           "declined by cli:bo"), line
    assert _statuses(app) == before
    assert (_item(app, item).status, _item(app, item).decided_by) == ("declined", "cli:bo")
    with app.uow() as uow:
        (run,) = [r for r in uow.session.scalars(select(DreamRunRow))]
        assert run.status == "cancelled" and not uow.safety.run_log(run.id)
        assert run.status_reason == f"review item {item} was decided meanwhile; nothing was written"
        # What it spent (an approval asks no model): in its totals as any stopped run's are.
        assert {k: (run.totals or {}).get(k) for k in ("model_calls", "model_tokens")} == {
            "model_calls": 0, "model_tokens": 0}

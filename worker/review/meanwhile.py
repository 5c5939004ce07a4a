"""What became of a review item that was open when a decision read it: decided by someone
else meanwhile, taken by an erasure ("gone"), or decided while its approval applied it (the
approval's run is then undone)."""

from __future__ import annotations

from typing import Any

import structlog

from worker.app import App
from worker.domain.types import Scope
from worker.review.items import GONE, Decided, closed_line

log = structlog.get_logger(__name__)


def decided_meanwhile(app: App, row: Any, run_id: str | None = None) -> Decided:
    """The item was open when this call read it and someone decided it since (another
    approval applied it, a decline): what they decided, not "stale", which would tell the
    reviewer a note moved and the change was never made."""
    with app.uow() as uow:
        return meanwhile(uow, row, run_id)


def unless_gone(app: App, row: Any, answer: Decided) -> Decided:
    """``answer`` (stale, refused) for an item not applied, unless an erasure took the item
    meanwhile: its notes went with it, so it reads "gone", as a batch answers it, never a
    stale or refused item a single approval would make an error of."""
    with app.uow() as uow:
        if uow.review.get(Scope.from_key(row.scope_key), row.id) is not None:
            return answer
    return Decided(row.id, GONE, gone_line(row), answer.run_id)


def meanwhile(uow: Any, row: Any, run_id: str | None = None) -> Decided:
    """What became of an item that was open when this call read it: decided by someone else
    (refused), or gone (an erasure took it with the notes it named) — an answer for the item,
    never a "not found" that ends a batch after it decided the items before, nor an error
    for one item named by its id (a batch answers it the same way: exit 14)."""
    now = uow.review.get(Scope.from_key(row.scope_key), row.id)
    if now is None:
        return Decided(row.id, GONE, gone_line(row), run_id)
    return Decided(row.id, "refused", closed_line(now, meanwhile=True), run_id)


def gone_line(row: Any) -> str:
    return (f"review item {row.id} is gone: erased meanwhile with the notes it named; "
            "nothing was written for it")


def taken_back(app: App, run_id: str, row: Any) -> Decided:
    """Someone declined (or decided) the item while its change was being applied, and the
    change had been committed before the decision could go in with it (another unit of work
    of this thread released the held write): the item says what they decided, so what this
    approval wrote is undone (its run reverted)."""
    from worker.safety.undo import UndoRefused, undo_run

    try:  # refused when a later write (a host's edit) built on the change: the user's call
        undo_run(app, run_id, by="review: the item was decided meanwhile")
        outcome = f"what this approval applied was reverted (run {run_id} undone)"
    except UndoRefused as exc:
        outcome = f"what this approval applied could not be reverted: {exc}"
    with app.uow() as uow:
        now = uow.review.get(Scope.from_key(row.scope_key), row.id)
    status = now.status if now is not None else GONE
    log.warning("review.decided_meanwhile", item=row.id, run_id=run_id, status=status)
    return Decided(row.id, GONE if now is None else "refused", f"item {row.id} was decided "
                   f"meanwhile ({status}); {outcome}", run_id)

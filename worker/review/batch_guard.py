"""The blast-radius guard over a batch approval (R20).

Each approved item is applied in a run of its own, whose guard sees that one item against the
scope as it is then; the items of one `dream review approve --all` (or `--run`) would each
pass alone while together retiring most of the scope, which a dream proposing the same changes
could not. A batch is one decision: its items' retirements count together against the scope's
active notes at the batch's start, under the same share and minimum size as a run's. An item
past the limit stays open; approving it by its id is a decision of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from worker.app import App
from worker.domain.types import NoteStatus, Scope
from worker.review.items import ChangeKind, ProposedChange, entity_of
from worker.safety.guard import share_refusal


@dataclass
class BatchGuard:
    baseline: int  # the scope's active notes when the batch started
    max_share: float
    min_scope_size: int
    retired: set[str] = field(default_factory=set)

    @classmethod
    def start(cls, app: App, scope: Scope) -> BatchGuard:
        with app.uow() as uow:
            active = uow.notes.count_by_status(scope).get(NoteStatus.ACTIVE.value, 0)
        s = app.settings.guard
        return cls(active, s.max_retire_share, s.min_scope_size)

    def refusal(self, row: Any) -> str | None:
        """Why approving ``row`` now would take the batch past the limit, or None."""
        proposed = retired_by(row) - self.retired
        total = len(self.retired) + len(proposed)
        if not proposed or share_refusal(total, self.baseline, self.max_share,
                                         self.min_scope_size, None) is None:
            return None
        return (f"item {row.id} left open: with the items approved before it, this batch would "
                f"retire {total} of the scope's {self.baseline} active notes (limit "
                f"{self.max_share:.0%}); approve it by its id if that is intended")

    def applied(self, row: Any) -> None:
        self.retired |= retired_by(row)


def retired_by(row: Any) -> set[str]:
    """The notes approving ``row`` retires (what the guard counts): a merge's members, a
    contradiction's loser, the notes an archive item takes out unless their owner is gone."""
    change = ProposedChange.from_row(row)
    if entity_of(change.payload) != "note":
        return set()
    if change.kind == ChangeKind.MERGE:
        return set(change.versions)
    if change.kind == ChangeKind.REVOKE:
        loser = change.payload.get("loser")
        return {str(loser)} if loser else set()
    if change.kind == ChangeKind.ARCHIVE and not change.payload.get("owner_gone"):
        return set(change.versions)
    return set()

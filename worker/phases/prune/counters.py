"""What the prune phase counts (its parent step's output)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.phases.kit.counters import Counters
from worker.phases.prune.core import REF_ORDER, Orphan, count_by_kind


@dataclass
class PruneCounters(Counters):
    notes_checked: int = 0
    notes_archived: int = 0
    orphaned_agents: int = 0
    orphaned_users: int = 0
    orphaned_companies: int = 0
    orphaned_conversations: int = 0
    # Notes whose entity has no record: never a reason to retire (R25), shown so that an
    # empty or partial registry is visible.
    unknown_agents: int = 0
    unknown_users: int = 0
    unknown_companies: int = 0
    unknown_conversations: int = 0

    @classmethod
    def of(cls, checked: int, archived: list[Orphan],
           unknown: dict[str, int] | None = None) -> PruneCounters:
        by_kind = count_by_kind(archived)
        unknown = unknown or dict.fromkeys(REF_ORDER, 0)
        return cls(checked, len(archived), by_kind["agent"], by_kind["user"], by_kind["company"],
                   by_kind["conversation"], unknown["agent"], unknown["user"],
                   unknown["company"], unknown["conversation"])

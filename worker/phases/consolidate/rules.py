"""The rule judge's decisions for each cluster, planned before the write: groups the rules
settle become merges (text kept verbatim), the rest of the cluster stays open."""

from __future__ import annotations

from collections.abc import Callable

from worker.domain.types import Note
from worker.llm.rules import rule_groups
from worker.phases.consolidate.apply import Unit
from worker.phases.consolidate.core import PlannedCluster
from worker.phases.consolidate.counters import ConsolidateCounters
from worker.phases.consolidate.decision import ClusterVerdict, Decision
from worker.text.temporal import relative_time_expressions

Cluster = tuple[str, PlannedCluster, list[Note]]


def plan_rule_units(
    clusters: list[Cluster], row: dict[str, int], related: Callable[[Note, Note], bool],
    counters: ConsolidateCounters,
) -> list[Unit]:
    units = []
    for name, cluster, members in clusters:
        groups, open_ids = rule_groups(members, related)
        by_id = {m.id: m for m in members}
        decisions = []
        for g_index, group in enumerate(groups):
            group_notes = [by_id[i] for i in group.note_ids]
            keep = by_id[group.keep_id]
            if relative_time_expressions(keep.content):
                # The fused note is dated today: "last week" kept verbatim would move a week.
                open_ids = sorted({*open_ids, *group.note_ids})
                counters.rule_groups_relative_time = (counters.rule_groups_relative_time or 0) + 1
                continue
            sub = PlannedCluster(sorted(row[i] for i in group.note_ids), cluster.similarity,
                                 cluster.min_similarity)
            decisions.append(Decision(
                f"{name}.{g_index + 1}" if len(groups) > 1 else name, sub, group_notes,
                group_notes, verdict=ClusterVerdict.MERGE, content=keep.content, rule=group.rule,
                reason=f"rule: {group.rule} — kept the text of {keep.id} verbatim"))
        units.append(Unit(decisions, name, cluster, [by_id[i] for i in open_ids]))
    return units

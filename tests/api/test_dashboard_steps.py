"""Child steps named by what they judged, from the payloads the phases store; counters as
labelled columns with the phase's primary ones first."""

from __future__ import annotations

from typing import Any

import pytest

from worker.api.dashboard_steps import child_view, counter_columns

RUN = {"agent_id": "agent-x", "user_id": "u1", "company_id": None}


def step(phase: str, name: str, status: str = "succeeded", **payload: Any) -> dict[str, Any]:
    return {"phase": phase, "name": name, "status": status, "input": payload.get("input", {}),
            "output": payload.get("output", {}), "model": payload.get("model")}


@pytest.mark.parametrize("child, label, outcome", [
    # A merge names its notes by short id, never by the fused text it stores.
    (step("consolidate", "cluster 1", input={"note_ids": ["n_ab12cd34ef", "py-1", "py-2", "x"]},
          output={"verdict": "merge", "content": "SECRET fused text"}),
     "merge of 4 notes (n_ab12cd…, py-1, py-2, +1)", "merge"),
    # Two clusters both named "cluster 1" (two attempts) still read apart by their notes.
    (step("consolidate", "cluster 1", "skipped", input={"note_ids": ["a", "b"]},
          output={"verdict": "refused"}), "cluster of 2 notes (a, b)", "refused"),
    (step("contradictions", "open_pair", "skipped",
          input={"note_ids": ["n_ab1234567890", "n_cd1234567890"]}, output={"verdict": "open"}),
     "pair n_ab1234… vs n_cd1234…", "open"),
    (step("contradictions", "rules", output={"verdicts": [
        {"a": "n1", "b": "n2", "relation": "supersedes"}]}), "pair n1 vs n2", "1 supersedes"),
    (step("contradictions", "rules", output={"verdicts": [
        {"a": "n1", "b": "n2", "relation": "supersedes"},
        {"a": "n3", "b": "n4", "relation": "independent"},
        {"a": "n5", "b": "n6", "relation": "supersedes"}]}),
     "rule verdicts on 3 pairs", "2 supersedes, 1 independent"),
    (step("contradictions", "model", input={"call": 2, "round": 1, "topics": [
        {"pairs": [{"a": "n1", "b": "n2"}]}]},
          output={"actions": [{"a": "n1", "b": "n2", "relation": "conflicting"}]}),
     "pair n1 vs n2", "1 conflicting"),
    (step("contradictions", "model", input={"call": 2, "round": 1, "topics": [
        {"pairs": [{"a": "n1", "b": "n2"}]}, {"pairs": [{"a": "n3", "b": "n4"}]}]}),
     "model call 2 (round 1): 2 topics, 2 pairs", "succeeded"),
    # An orphan is named by whom it belonged to: the agent's id comes from the run's scope.
    (step("prune", "orphans", input={"notes_checked": 3},
          output={"archived": {"n1": ["referenced agent is disabled"]}, "deferred": ["n2"]}),
     "orphans of agent agent-x (disabled)", "1 note archived, 1 deferred"),
    (step("prune", "orphans", "no_items", input={"notes_checked": 3}, output={"archived": {}}),
     "orphan check of 3 notes", "0 notes archived"),
    (step("prune", "review 1", input={"note_ids": ["a", "b", "c"]},
          output={"kept": ["a"], "archive": ["b", "c"]}),
     "keep review of 3 notes", "1 kept, 2 to archive"),
    (step("archive", "notes expired", input={"planned": 3},
          output={"archived": ["a", "b"], "stale": ["c"]}),
     "notes expired (3 planned)", "2 archived, 1 stale"),
    (step("archive", "preserved", output={"manual": ["m"], "protected": []}),
     "preserved", "1 manual"),
    (step("archive", "blast_radius_guard", "skipped", input={"note_ids": ["a", "b"]},
          output={"reason": "blast-radius guard: would retire 8 of 12", "guard": True}),
     "blast-radius guard held 2 notes", "stopped"),
    # Unknown shapes (a phase that changed its payload) still get a readable name.
    (step("future", "batch 3", input={"note_ids": ["a"]}), "batch 3 of 1 note", "succeeded"),
    (step("prune", "orphans", output={"archived": "not a dict"}), "orphan check of 0 notes",
     "0 notes archived"),
])
def test_child_labels(child: dict[str, Any], label: str, outcome: str) -> None:
    view = child_view(child, RUN)
    assert (view["label"], view["outcome"]) == (label, outcome)
    assert "SECRET" not in repr(view)


def test_guard_reason_is_the_why() -> None:
    view = child_view(step("prune", "blast_radius_guard", "skipped",
                           output={"reason": "blast-radius guard: 8 of 12", "guard": True}), RUN)
    assert view["why"] == "blast-radius guard: 8 of 12"


def test_counter_columns_primary_first_then_nonzero_rest() -> None:
    parent = step("consolidate", "consolidate", output={
        "leftovers": 2, "notes_scanned": 12, "clusters_found": 1, "omission_warnings": 0,
        "tokens_in": 688, "dry_run": False, "reason": "text"})
    assert counter_columns(parent) == [("notes scanned", 12), ("clusters found", 1),
                                       ("leftovers", 2)]

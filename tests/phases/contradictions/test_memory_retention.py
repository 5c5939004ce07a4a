"""Verdict memory at versions that moved is pruned too, and by a run without contradictions.

A cluster, pair or held-back row of an earlier run on notes still active, recorded at versions
a host's edit (or a run re-dating a note) has moved since, never matches again: it goes, except
the newest pair row of its two notes, which contradictions still reads to ask a pair never
judged before one judged at older versions. Before, those rows stayed for ever (a note edited
every week kept every verdict ever given on it). And a run without the contradictions phase
(``dream run --phase consolidate``) pruned nothing; now its consolidation prunes, with the
memory it loads anyway (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.phases.contradictions.test_memory_pruning import (
    DAY,
    SCOPE,
    _add,
    _asked,
    _dream,
    _memory,
    _row,
    three_notes_dreamed,
)
from tests.phases.contradictions.test_service import (
    METRIC,
    TEA_SUGAR,
    phase_step,
)
from tests.support.factories import NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from tests.support.safety import run_row
from tests.support.sql import recorded_statements
from worker.app import App
from worker.domain.types import fingerprint_versions
from worker.phases.kit.carry import Judged
from worker.phases.kit.forget import dead, prunes
from worker.reporting import run_tree
from worker.runs import service


def _edit(app: App, note_id: str) -> None:
    """A host's edit of the note: its version moves."""
    with app.uow() as uow:
        (note,) = uow.notes.get_many([note_id])
        assert uow.notes.change(note, run_id=None, reason="host edit", comments="edited")
        uow.commit()


def _judged_before(app: App, run_id: str) -> list[bool]:
    return [p["judged_before"] for c in phase_step(app, run_id)["children"]
            for t in c["input"].get("topics", []) for p in t["pairs"]]


def _pairs(app: App) -> list[tuple[tuple[str, ...], str | None]]:
    return [(ids, run) for kind, ids, run in _memory(app) if kind == "pair"]


def test_a_verdict_at_versions_a_host_edit_moved_goes_once_a_later_one_names_its_notes(
    app: App, llm_stub: LLMStub
) -> None:
    first = three_notes_dreamed(app, llm_stub)
    assert _pairs(app) == [(("a", "b"), first), (("b", "c"), first)]

    _edit(app, "b")
    _add(app, "cluster", ["a", "b"], first, NOW)  # consolidation's, at b's old version
    second = _dream(app, NOW + DAY)
    # b moved: both pairs asked again, after any pair never judged; the first run's rows of
    # them stay while they are the newest of their notes, the cluster row goes (read by its
    # fingerprint only).
    assert _asked(app, second) == [("a", "b"), ("b", "c")]
    assert _judged_before(app, second) == [True, True]
    assert phase_step(app, second)["output"]["verdicts_pruned"] == 1
    assert _pairs(app) == sorted([(("a", "b"), first), (("a", "b"), second),
                                  (("b", "c"), first), (("b", "c"), second)])
    asked = len(llm_stub.chat_requests())

    third = _dream(app, NOW + 2 * DAY)
    assert phase_step(app, third)["output"]["verdicts_pruned"] == 2
    assert _pairs(app) == [(("a", "b"), second), (("b", "c"), second)]
    assert ("keep_apart", ("a", "c"), None) in _memory(app)
    assert _asked(app, third) == [] and len(llm_stub.chat_requests()) == asked

    # The order survives the pruning: edited again, the pairs still come after new ones.
    _edit(app, "b")
    fourth = _dream(app, NOW + 3 * DAY)
    assert _asked(app, fourth) == [("a", "b"), ("b", "c")]
    assert _judged_before(app, fourth) == [True, True]
    assert "verdicts_pruned" not in phase_step(app, fourth)["output"]


def _run(app: App, at: datetime, phases: list[str]) -> str:
    run_id = service.create_run(app, SCOPE, force=True, phases=phases, clock=at)
    assert run_id
    service.execute_run(app, run_id)
    return run_id


def _output(app: App, run_id: str, phase: str) -> dict[str, Any]:
    (step,) = [s for s in run_tree(app, run_id)["steps"] if s["phase"] == phase]
    out: dict[str, Any] = step["output"]
    return out


def test_a_run_without_contradictions_prunes_in_consolidation(app: App) -> None:
    add_notes(app, {"id": "a", "content": METRIC, "created_at": days_ago(20)},
              {"id": "b", "content": TEA_SUGAR, "created_at": days_ago(10)})
    earlier = run_row(app, SCOPE)
    period = timedelta(hours=app.settings.llm_unanswered_hours)
    _add(app, "pair", ["a", "gone"], earlier, NOW)  # names a note no longer active
    _add(app, "unanswered", ["a", "b"], earlier, NOW - period - DAY)  # cooled off
    before = _memory(app)

    # Prune and archive load no verdict memory: nothing is read or deleted for it.
    with recorded_statements(app) as seen:
        _run(app, NOW, ["prune", "archive"])
    assert not [s for s in seen if "judgements" in s]
    assert _memory(app) == before

    alone = _run(app, NOW, ["consolidate"])
    assert _output(app, alone, "consolidate")["verdicts_pruned"] == 2
    assert _memory(app) == []

    # With contradictions in the run, it prunes (after consolidation's writes), not both.
    _add(app, "cluster", ["a", "b"], earlier, NOW)  # at versions that are not a's and b's
    both = _run(app, NOW + DAY, ["consolidate", "contradictions"])
    assert "verdicts_pruned" not in _output(app, both, "consolidate")
    assert _output(app, both, "contradictions")["verdicts_pruned"] == 1
    assert _memory(app) == []


def test_a_row_at_moved_versions_is_dead_but_the_newest_pair_row_of_its_notes() -> None:
    live = {"a": 2, "b": 1, "c": 1}

    def at(**versions: int) -> str:
        return fingerprint_versions(list(versions.items()))

    rows = [
        _row("pair", ["a", "b"], "r1", NOW, 1, at(a=1, b=1)),  # a later row of a, b: dead
        _row("pair", ["a", "c"], "r1", NOW, 2, at(a=1, c=1)),  # the newest of a, c: kept
        _row("cluster", ["a", "b", "c"], "r1", NOW, 3, at(a=1, b=1, c=1)),  # dead
        _row("retire_pending", ["b", "a"], "r1", NOW, 4, at(a=1, b=1)),  # dead
        _row("pair", ["a", "b"], "r1", NOW, 5, at(a=2, b=1)),  # at the versions now: kept
        _row("cluster", ["a", "b"], "r1", NOW, 6, at(a=2, b=1)),  # kept
        _row("retire_pending", ["b", "a"], "r1", NOW, 7, at(a=2, b=1)),  # kept
        _row("keep_apart", ["a", "b"], None, NOW, 8, at(a=1, b=1)),  # a person's: kept
        _row("unanswered", ["a", "b"], "r1", NOW, 9, at(a=1, b=1)),  # keyed by more: kept
        _row("pair", ["b", "c"], "r1", NOW, 10, at(b=0, c=1)),  # a later one of b, c: dead
        _row("pair", ["b", "c"], None, NOW, 11, at(b=0, c=1)),  # a reviewer's: kept
        _row("cluster", ["a", "c"], "r2", NOW, 12, at(a=0, c=1)),  # this run's: kept
    ]
    assert dead(rows, live, None, "r2") == [1, 3, 4, 10]
    # A row recorded since the load (no id) is later than every loaded one.
    assert dead([*rows[:2], Judged("pair", "fp", ["a", "c"], "v", None)], live, None,
                "r2") == [2]


class _Ctx:
    def __init__(self, *phases: str) -> None:
        self.requested = phases


def test_the_last_phase_of_the_run_to_load_the_memory_prunes() -> None:
    assert [p for p in ("consolidate", "contradictions", "prune", "archive")
            if prunes(_Ctx("consolidate", "contradictions", "prune", "archive"), p)] == [
        "contradictions"]
    assert prunes(_Ctx("consolidate", "prune"), "consolidate")
    assert prunes(_Ctx("contradictions"), "contradictions")
    assert not any(prunes(_Ctx("prune", "archive"), p) for p in ("consolidate", "prune"))

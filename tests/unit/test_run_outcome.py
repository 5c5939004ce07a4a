"""Pure: a run's final status from what its phases recorded (R27)."""

from __future__ import annotations

import pytest

from worker.runs.outcome import RunFacts, decide_outcome, open_growing

OK = {"consolidate": "succeeded", "contradictions": "no_items", "prune": "succeeded",
      "archive": "skipped"}
ONE_FAILED = {**OK, "prune": "failed"}
ALL_FAILED = dict.fromkeys(OK, "failed")
TRIP = "blast-radius guard: would retire 8 of 12 active notes (limit 50%); ..."


@pytest.mark.parametrize(("facts", "status", "flags"), [
    # Every phase did its work: succeeded, no reason.
    (RunFacts(OK), "succeeded", []),
    # No terminal phase at all (cannot happen after finalize's check, but never "succeeded").
    (RunFacts({}), "failed", []),
    # Every phase failed: failed (the step errors say why).
    (RunFacts(ALL_FAILED), "failed", ["phase_failed"]),
    # One phase failed, the others worked: partial, naming the phase.
    (RunFacts(ONE_FAILED), "partial", ["phase_failed"]),
    # The guard stopped retirements: blocked, whatever else went right.
    (RunFacts(OK, guard_reasons=[TRIP]), "blocked", ["guard"]),
    # A guard trip and a failed phase: blocked, and both reasons are kept.
    (RunFacts(ONE_FAILED, guard_reasons=[TRIP]), "blocked", ["guard", "phase_failed"]),
    # The model budget ran out with work left: blocked.
    (RunFacts(OK, budget_exhausted="3 of 3 model calls"), "blocked", ["budget"]),
    # Every model call of the run failed (the endpoint was down): blocked.
    (RunFacts(OK, model_calls=4, model_calls_failed=4), "blocked", ["model_unavailable"]),
    # Some calls got a reply: the run did part of its work, each miss is deferred on its step.
    (RunFacts(OK, model_calls=4, model_calls_failed=3), "succeeded", []),
    # No model call at all (nothing to ask): not a model outage.
    (RunFacts(OK, model_calls=0, model_calls_failed=0), "succeeded", []),
    # Open candidates rose over the last 3 runs (1 → 2 → 4): blocked.
    (RunFacts(OK, open_candidates=4, open_history=[1, 2]), "blocked", ["open_growing"]),
    # The same open candidates as last time are not growth: succeeded.
    (RunFacts(OK, open_candidates=2, open_history=[1, 2]), "succeeded", []),
    # Growth over fewer runs than growth_runs is not yet a trend.
    (RunFacts(OK, open_candidates=2, open_history=[1]), "succeeded", []),
    # A dry run's open candidates never count as growth.
    (RunFacts(OK, open_candidates=9, open_history=[1, 2], dry_run=True), "succeeded", []),
])
def test_decide_outcome(facts: RunFacts, status: str, flags: list[str]) -> None:
    """A dream that could not do its work is never plain succeeded; the flags say why."""
    outcome = decide_outcome(facts)
    assert (outcome.status, outcome.flags) == (status, flags)
    assert (outcome.reason is None) == (status in ("succeeded", "failed"))


def test_reasons_name_the_count_and_the_way_out() -> None:
    """The blocked reason carries the guard's own line, the budget spent, the growth series
    and the failed phase, in that order, on one line."""
    outcome = decide_outcome(RunFacts(ONE_FAILED, guard_reasons=[TRIP, TRIP],
                                      budget_exhausted="3 of 3 model calls",
                                      open_candidates=5, open_history=[1, 3]))
    assert outcome.reason is not None and "\n" not in outcome.reason
    parts = outcome.reason.split("; ")
    assert parts[0].startswith("blast-radius guard: would retire 8 of 12")
    assert "(and 1 more trips)" in outcome.reason
    assert "model budget exhausted (3 of 3 model calls)" in outcome.reason
    assert "open candidates grew 3 runs in a row (1 → 3 → 5)" in outcome.reason
    assert outcome.reason.endswith("phase failed: prune")


def test_open_growing_uses_only_the_latest_runs() -> None:
    """Only the last growth_runs counts matter: an old decline does not hide a new rise."""
    assert open_growing(RunFacts(OK, open_candidates=7, open_history=[9, 1, 4],
                                 growth_runs=3)) == [1, 4, 7]
    assert open_growing(RunFacts(OK, open_candidates=7, open_history=[9, 1, 4],
                                 growth_runs=4)) is None


def test_model_unavailable_reason_counts_calls_and_names_the_cause() -> None:
    """The blocked reason says how many calls failed of how many and the client's error, so
    `dream runs list` tells an outage from a guard trip without reading the steps."""
    outcome = decide_outcome(RunFacts(OK, model_calls=3, model_calls_failed=3,
                                      model_failure="model endpoint failed after 2 attempts "
                                                    "(APIConnectionError)"))
    assert outcome.reason is not None
    assert outcome.reason.startswith("model unavailable: 3 of 3 model calls failed (model "
                                     "endpoint failed after 2 attempts (APIConnectionError))")

"""Pure: how a phase ended (PhaseOutcome) and a run's final status from what its phases
recorded (R27)."""

from __future__ import annotations

import pytest

from worker.runs.outcome import (
    PhaseOutcome,
    RunFacts,
    budget_exhausted,
    decide_outcome,
    open_growing,
)

S, N, D, K, F = (PhaseOutcome.SUCCEEDED, PhaseOutcome.NO_ITEMS, PhaseOutcome.DEFERRED,
                 PhaseOutcome.SKIPPED, PhaseOutcome.FAILED)
OK = {"consolidate": S, "contradictions": N, "prune": S, "archive": K}
DEFERRING = {**OK, "consolidate": D}
ONE_FAILED = {**OK, "prune": F}
ALL_FAILED = dict.fromkeys(OK, F)
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
    # The one phase the run asked for (`--phase prune`) failed, the others skipped: failed, not
    # partial, since no other phase worked (before: partial, exit 11).
    (RunFacts({"consolidate": K, "contradictions": K, "prune": F, "archive": K}), "failed",
     ["phase_failed"]),
    # Every phase that ran failed, archive skipped (auto-archive off): failed.
    (RunFacts({**ALL_FAILED, "archive": K}), "failed", ["phase_failed"]),
    # Every phase skipped, none failed: nothing went wrong.
    (RunFacts(dict.fromkeys(OK, K)), "succeeded", []),
    # The guard stopped retirements: blocked, whatever else went right.
    (RunFacts(OK, guard_reasons=[TRIP]), "blocked", ["guard"]),
    # A guard trip and a failed phase: blocked, and both reasons are kept.
    (RunFacts(ONE_FAILED, guard_reasons=[TRIP]), "blocked", ["guard", "phase_failed"]),
    # The run's model limit was reached and a phase left work for it: blocked.
    (RunFacts(DEFERRING, limit_reached="3 of 3 model calls"), "blocked", ["budget"]),
    # The limit was reached exactly, but nothing was left undone: not blocked.
    (RunFacts(OK, limit_reached="3 of 3 model calls"), "succeeded", []),
    # A phase's own limit deferred its work: blocked, naming the phase.
    (RunFacts(DEFERRING, phase_limits=["contradictions"]), "blocked", ["budget"]),
    # Every model call of the run failed (the endpoint was down): blocked.
    (RunFacts(OK, model_calls=4, model_calls_failed=4), "blocked", ["model_unavailable"]),
    # Some calls failed, some got a reply: partial, the failed share named.
    (RunFacts(OK, model_calls=4, model_calls_failed=3), "partial", ["model_partial"]),
    (RunFacts(OK, model_calls=10, model_calls_failed=1), "partial", ["model_partial"]),
    # A partial outage beside a guard trip: blocked, both said.
    (RunFacts(OK, guard_reasons=[TRIP], model_calls=4, model_calls_failed=1), "blocked",
     ["guard", "model_partial"]),
    # A partial outage and a failed phase: partial, both said.
    (RunFacts(ONE_FAILED, model_calls=4, model_calls_failed=2), "partial",
     ["model_partial", "phase_failed"]),
    # No model call at all (nothing to ask): not a model outage.
    (RunFacts(OK, model_calls=0, model_calls_failed=0), "succeeded", []),
    # Every call answered: no outage.
    (RunFacts(OK, model_calls=5, model_calls_failed=0), "succeeded", []),
    # Every reply was no JSON of the asked schema (prose, broken JSON): blocked, unusable.
    (RunFacts(OK, model_calls=6, model_replies_malformed=6), "blocked", ["model_unusable"]),
    # Some malformed replies among usable ones are only re-asked (R12): no flag.
    (RunFacts(OK, model_calls=6, model_replies_malformed=5), "succeeded", []),
    # Half the calls failed, every reply of the rest malformed: both said, blocked.
    (RunFacts(OK, model_calls=4, model_calls_failed=2, model_replies_malformed=2), "blocked",
     ["model_unusable", "model_partial"]),
    # Every call failed: an outage, not unusable replies (there were none).
    (RunFacts(OK, model_calls=4, model_calls_failed=4), "blocked", ["model_unavailable"]),
    # Open candidates rose over the last 3 runs (1 → 2 → 4): blocked.
    (RunFacts(OK, open_candidates=4, open_history=[1, 2]), "blocked", ["open_growing"]),
    # The same open candidates as last time are not growth: succeeded.
    (RunFacts(OK, open_candidates=2, open_history=[1, 2]), "succeeded", []),
    # Growth over fewer runs than growth_runs is not yet a trend.
    (RunFacts(OK, open_candidates=2, open_history=[1]), "succeeded", []),
    # A dry run's open candidates never count as growth.
    (RunFacts(OK, open_candidates=9, open_history=[1, 2], dry_run=True), "succeeded", []),
    # Every change the run planned went stale and it applied none (every attempt counted):
    # still succeeded (the host's edits may have taken the work away; the next run plans
    # afresh), but flagged, and its reason says it applied nothing.
    (RunFacts(OK, items_stale=3, changes_applied=0), "succeeded", ["all_stale"]),
    # ... beside a guard trip: blocked, and both said.
    (RunFacts(OK, guard_reasons=[TRIP], items_stale=1, changes_applied=0), "blocked",
     ["guard", "all_stale"]),
    # Some went stale, others were applied (by this attempt or a killed one): R10 at work.
    (RunFacts(OK, items_stale=3, changes_applied=1), "succeeded", []),
    # A dry run applies nothing by design: its stale items block nothing.
    (RunFacts(OK, items_stale=3, changes_applied=0, dry_run=True), "succeeded", []),
    # Nothing stale, nothing applied: there was nothing to do, and it did it.
    (RunFacts(OK, changes_applied=0), "succeeded", []),
    # An approval's run reaching finalize (its approval stopped) that applied nothing:
    # cancelled, never succeeded; whatever its skipped phases say.
    (RunFacts(dict.fromkeys(OK, K), approval=True, changes_applied=0, review_item=7),
     "cancelled", ["approval_stopped"]),
    # An approval's run that wrote its change (committed before the approval stopped): it did
    # apply, so the usual outcome.
    (RunFacts(dict.fromkeys(OK, K), approval=True, changes_applied=2), "succeeded", []),
])
def test_decide_outcome(facts: RunFacts, status: str, flags: list[str]) -> None:
    """A dream that could not do its work is never plain succeeded; the flags say why."""
    outcome = decide_outcome(facts)
    assert (outcome.status, outcome.flags) == (status, flags)
    assert (outcome.reason is None) == (status in ("succeeded", "failed")
                                         and "all_stale" not in flags)


def test_an_all_stale_runs_reason_says_it_applied_nothing() -> None:
    """The reason counts the stale changes and says the next run plans afresh."""
    outcome = decide_outcome(RunFacts(OK, items_stale=2, changes_applied=0))
    assert outcome.reason == ("applied nothing: all 2 changes it planned went stale (their "
                              "notes changed while it ran); the next run plans afresh from the "
                              "notes as they are")


def test_a_stopped_approvals_reason_names_the_item_and_the_way_out() -> None:
    """The cancelled approval's reason names its review item, says nothing was applied and
    how to apply it after all, on one line."""
    outcome = decide_outcome(RunFacts(dict.fromkeys(OK, K), approval=True, changes_applied=0,
                                      review_item=7))
    assert outcome.reason is not None and "\n" not in outcome.reason
    assert outcome.reason.startswith("the approval of review item 7 stopped before it finished")
    assert "nothing was applied" in outcome.reason and "approve it again" in outcome.reason


def test_reasons_name_the_count_and_the_way_out() -> None:
    """The blocked reason carries the guard's own line, the budget spent, the growth series
    and the failed phase, in that order, on one line."""
    outcome = decide_outcome(RunFacts({**ONE_FAILED, "consolidate": D},
                                      guard_reasons=[TRIP, TRIP],
                                      limit_reached="3 of 3 model calls",
                                      open_candidates=5, open_history=[1, 3]))
    assert outcome.reason is not None and "\n" not in outcome.reason
    parts = outcome.reason.split("; ")
    assert parts[0].startswith("blast-radius guard: would retire 8 of 12")
    assert "(and 1 more trip)" in outcome.reason
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


def test_partial_outage_reason_names_the_failed_share_and_the_cause() -> None:
    """3 of 12 calls failed: the reason says 3 of 12, 25 %, and the client's error."""
    outcome = decide_outcome(RunFacts(OK, model_calls=12, model_calls_failed=3,
                                      model_failure="model endpoint failed after 1 attempt "
                                                    "(HTTP 500)"))
    assert outcome.reason == ("model partly unavailable: 3 of 12 model calls failed (25%) "
                              "(model endpoint failed after 1 attempt (HTTP 500)); what they "
                              "were to judge waits for the next run")


WAITED = "provider batch not finished within DREAM_LLM_BATCH_WAIT (0.5s)"


def test_a_batch_out_of_its_wait_asks_for_a_longer_wait_not_another_endpoint() -> None:
    """Every call failed because the in-process batch outlived DREAM_LLM_BATCH_WAIT: the
    endpoint was fine, so the reason names the wait and its remedy, never DREAM_LLM_BASE_URL."""
    outcome = decide_outcome(RunFacts(OK, model_calls=4, model_calls_failed=4,
                                      batch_wait=WAITED))
    assert outcome.status == "blocked" and outcome.reason is not None
    assert outcome.reason.startswith(f"model unavailable: 4 of 4 model calls failed ({WAITED}: "
                                     "the endpoint answered, not in time); set a longer "
                                     "DREAM_LLM_BATCH_WAIT or run under Celery")
    assert "DREAM_LLM_BASE_URL" not in outcome.reason
    partial = decide_outcome(RunFacts(OK, model_calls=4, model_calls_failed=1,
                                      batch_wait=WAITED))
    assert partial.reason is not None and "set a longer DREAM_LLM_BATCH_WAIT" in partial.reason
    # An endpoint error beside it: the endpoint is what to check.
    both = decide_outcome(RunFacts(OK, model_calls=4, model_calls_failed=4, batch_wait=WAITED,
                                   model_failure="model endpoint answered 500"))
    assert both.reason is not None and "check DREAM_LLM_BASE_URL" in both.reason


@pytest.mark.parametrize(("facts", "spent"), [
    (RunFacts(DEFERRING, limit_reached="3 of 3 model calls"), "3 of 3 model calls"),
    (RunFacts(OK, limit_reached="3 of 3 model calls"), None),
    (RunFacts(DEFERRING, phase_limits=["prune"]), "the prune phase's limit, work deferred"),
    (RunFacts(DEFERRING), None),
])
def test_budget_exhausted_needs_work_left_for_it(facts: RunFacts, spent: str | None) -> None:
    assert budget_exhausted(facts) == spent


@pytest.mark.parametrize(("status", "left", "outcome"), [
    ("succeeded", False, PhaseOutcome.SUCCEEDED),
    ("succeeded", True, PhaseOutcome.DEFERRED),
    ("no_items", True, PhaseOutcome.DEFERRED),
    ("no_items", False, PhaseOutcome.NO_ITEMS),
    ("failed", True, PhaseOutcome.FAILED),  # a failure is never hidden as "deferred"
    ("skipped", False, PhaseOutcome.SKIPPED),
    ("waiting", False, PhaseOutcome.WAITING),
])
def test_phase_outcome_of_a_report(status: str, left: bool, outcome: PhaseOutcome) -> None:
    assert PhaseOutcome.of_report(status, left) is outcome


@pytest.mark.parametrize(("outcome", "step_status", "stops"), [
    (PhaseOutcome.SUCCEEDED, "succeeded", False),
    (PhaseOutcome.DEFERRED, "succeeded", False),
    (PhaseOutcome.NO_ITEMS, "no_items", False),
    (PhaseOutcome.SKIPPED, "skipped", False),
    (PhaseOutcome.FAILED, "failed", False),  # R6: the next phase still runs
    (PhaseOutcome.WAITING, "running", False),  # the step stays open; the phase is resumed
])
def test_recorded_outcomes_and_their_step_status(outcome: PhaseOutcome, step_status: str,
                                                 stops: bool) -> None:
    assert (outcome.step_status, outcome.stops_run) == (step_status, stops)


@pytest.mark.parametrize("outcome", [PhaseOutcome.EARLIER_PENDING, PhaseOutcome.BUSY,
                                     PhaseOutcome.NOT_CLAIMED, PhaseOutcome.NOT_RUNNING,
                                     PhaseOutcome.LEASE_LOST])
def test_an_executor_that_does_not_hold_the_run_stops(outcome: PhaseOutcome) -> None:
    assert outcome.stops_run and outcome is not PhaseOutcome.ALREADY_DONE


def test_a_phase_out_of_model_time_blocks_the_run_for_its_budget() -> None:
    """DREAM_LLM_PHASE_SECONDS ran out with clusters left: the run ended plain `succeeded`
    with no flag (R27), where calls or tokens running out block it."""
    outcome = decide_outcome(RunFacts(DEFERRING, phase_out_of_time=["consolidate"]))
    assert (outcome.status, outcome.flags) == ("blocked", ["budget"])
    assert outcome.reason is not None
    assert "consolidate phase's model time, DREAM_LLM_PHASE_SECONDS" in outcome.reason


def test_a_phase_whose_every_reply_was_unusable_makes_the_run_partial() -> None:
    """Consolidation got one usable reply, contradictions three malformed ones: the run-wide
    share (3 of 4) did not flag it, and a phase that judged nothing left the run `succeeded`.
    Run-wide unusable replies still block, and say it once."""
    facts = RunFacts(OK, model_calls=4, model_replies_malformed=3,
                     phases_unusable=["contradictions"])
    outcome = decide_outcome(facts)
    assert (outcome.status, outcome.flags) == ("partial", ["model_partial"])
    assert outcome.reason is not None and "in the contradictions phase" in outcome.reason
    everything = decide_outcome(RunFacts(OK, model_calls=3, model_replies_malformed=3,
                                         phases_unusable=["contradictions"]))
    assert (everything.status, everything.flags) == ("blocked", ["model_unusable"])


ENDED = ("provider batch batch_7 expired: the provider's 24 h completion window ended before "
         "it answered", "the next run asks these questions again in a new batch; if batches "
         "keep expiring, set DREAM_LLM_BATCH=false to ask online")


def test_a_batch_that_ended_unanswered_names_it_and_what_to_do_not_the_endpoint() -> None:
    """Every call failed in a batch that expired: the reason names the batch's end and its
    remedy, once, never DREAM_LLM_BASE_URL; some calls failed so: partial, the same words; an
    endpoint error beside it: the endpoint is what to check."""
    outcome = decide_outcome(RunFacts(OK, model_calls=2, model_calls_failed=2, batch_end=ENDED))
    assert (outcome.status, outcome.reason) == ("blocked", (
        f"model unavailable: 2 of 2 model calls failed ({ENDED[0]}: the endpoint answered, the "
        f"batch did not); {ENDED[1]}"))
    partial = decide_outcome(RunFacts(OK, model_calls=4, model_calls_failed=1, batch_end=ENDED))
    assert (partial.status, partial.reason) == ("partial", (
        f"model partly unavailable: 1 of 4 model calls failed (25%) ({ENDED[0]}: the endpoint "
        f"answered, the batch did not); {ENDED[1]}"))
    both = decide_outcome(RunFacts(OK, model_calls=4, model_calls_failed=4, batch_end=ENDED,
                                   model_failure="model endpoint answered 500"))
    assert both.reason is not None and "check DREAM_LLM_BASE_URL" in both.reason
    assert ENDED[0] not in both.reason


def test_a_phase_whose_replies_were_rejected_names_the_checks_not_json() -> None:
    """Contradictions: 2 replies rejected by its checks, 1 no JSON; consolidation: 3 no JSON
    of 4 run-wide replies, one usable elsewhere. Each phase gets its own cause; one flag."""
    facts = RunFacts(OK, model_calls=7, model_replies_malformed=4,
                     phases_unusable=["consolidate", "contradictions"],
                     phases_rejected={"contradictions": (2, 3)})
    outcome = decide_outcome(facts)
    assert (outcome.status, outcome.flags) == ("partial", ["model_partial"])
    assert outcome.reason is not None
    first, second = outcome.reason.split("; what it was to judge is left as it was")[:2]
    assert first == ("model answers unusable in the consolidate phase: not one reply was JSON "
                     "of the asked schema")
    assert second.startswith(" (check that DREAM_LLM_MODEL answers in JSON); model answers "
                             "unusable in the contradictions phase: its checks rejected 2 of 3 "
                             "replies (notes not in the question")
    assert second.endswith(", 1 not JSON of the asked schema")

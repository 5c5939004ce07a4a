"""What the contradictions phase counts (its parent step's output)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.phases.kit.counters import Counters


@dataclass
class ContradictionsCounters(Counters):
    pairs_considered: int = 0
    pairs_judged: int = 0
    conflicts_resolved: int = 0
    conflicts_flagged: int = 0
    equivalents_merged: int = 0
    pairs_skipped_stale: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    verdicts_wasted: int = 0
    judge: str = "rules"
    generic_frames_skipped: int = 0
    pairs_skipped_same_run: int = 0
    pairs_remembered: int = 0
    retirements_held_back: int = 0
    # Set only when they happen (absent from the step otherwise); candidates_<source> in extra.
    retirements_applied_unasked: int | None = None
    pairs_guarded: int | None = None
    pairs_open: int | None = None
    notes_isolated: int | None = None
    notes_expired: int | None = None  # past expires_at at the run's clock: archive's, left out
    topics_found: int | None = None
    # A scope too large to ask about whole, asked so once its first rounds retired enough:
    # the pairs that late round asked (see ``service.late_whole``).
    candidates_small_scope_late: int | None = None
    # An answer's attribute joining two notes judged apart before at their versions (a lumped
    # answer, not a finding): nothing of it applied, its pairs left unsettled (``Applier``).
    attributes_against_memory: int | None = None
    # An answer's value whose notes do not say one thing (``sameness``): its attribute applies
    # nothing, no note of it is retired, its pairs left unsettled.
    values_unsupported: int | None = None
    # Pairs of one attribute an answer settled nothing about, remembered (``unsettled``); and
    # candidates left out as remembered so within DREAM_LLM_UNANSWERED_HOURS.
    pairs_unsettled: int | None = None
    pairs_cooling: int | None = None
    # Verdict-memory rows of earlier runs no run reads again, deleted (``kit.forget``).
    verdicts_pruned: int | None = None
    rounds: int | None = None
    topics_judged: int | None = None
    calls: int | None = None
    topics_dropped: int | None = None
    topics_deferred: int | None = None
    oldest_deferral_days: float | None = None

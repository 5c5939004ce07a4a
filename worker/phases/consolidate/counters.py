"""What the consolidate phase counts (its parent step's output)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.phases.kit.counters import Counters


@dataclass
class ConsolidateCounters(Counters):
    judge: str = "rules"
    notes_scanned: int = 0
    clusters_found: int = 0
    clusters_merged: int = 0
    clusters_refused: int = 0
    clusters_skipped_stale: int = 0
    clusters_invalid: int = 0
    notes_revoked: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    clusters_known_refused: int = 0
    clusters_deferred: int = 0
    clusters_open: int = 0
    notes_flagged: int = 0
    leftovers: int = 0
    relative_time_reasks: int = 0
    clusters_relative_time_refused: int = 0
    omission_warnings: int = 0
    # Set only when they happen (absent from the step otherwise).
    calls: int | None = None
    template_hash: str | None = None
    notes_skipped_same_run: int | None = None  # notes this run wrote (a retried attempt's)
    notes_held_for_review: int | None = None  # notes an open review item would change
    notes_expired: int | None = None  # past expires_at at the run's clock: archive's, left out
    flagged_ids: list[str] | None = None
    leftover_ids: list[str] | None = None
    guard_tripped: int | None = None
    rule_groups_relative_time: int | None = None
    pairs_kept_apart: int | None = None  # kept apart (host) or declined (review): never together
    # Verdict-memory rows of earlier runs no run reads again, deleted here by a run without
    # the contradictions phase (``kit.forget``).
    verdicts_pruned: int | None = None
    # Set when the topical pass runs: the pairs it found, and the clusters it added.
    topical_links: int | None = None
    topical_apart: int | None = None  # links dropped: one frame, a short span apart
    topical_clusters: int | None = None

"""The bench's per-phase "retired" column: archive's counters say why a note went
(``notes_expired``, ``notes_stale``), so summing the counters that name a retirement showed 0
for archive while it archived every expired note of the corpus."""

from __future__ import annotations

from tests.bench.report import _phase_retired


def test_archive_counts_what_it_archived() -> None:
    counters = {"notes_expired": 800, "notes_stale": 12, "examples_expired": 3,
                "protected_preserved": 5, "manual_preserved": 7}
    assert _phase_retired("archive", counters) == 812


def test_a_judging_phase_counts_its_retirements_not_the_expired_notes_it_left_out() -> None:
    counters = {"clusters_merged": 3, "notes_revoked": 9, "notes_expired": 4}
    assert _phase_retired("consolidate", counters) == 9

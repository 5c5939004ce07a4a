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


def test_the_peer_table_shows_what_the_stand_in_model_spent_of_our_phase() -> None:
    """The stand-in model answers in the bench's process, so its CPU was in our phase's figure
    unseen; the table now says how much, and the ratios stay those of the whole phase."""
    from tests.bench.peer import compare

    ours = {"phase_wall": {"consolidate": 2.0}, "phase_cpu": {"consolidate": 2.0}, "steps": {},
            "model_cpu_by_prompt": {"consolidate": 0.5, "contradictions_pairs": 1.0}}
    kore = {"wall": 1.0, "cpu": 1.0, "threshold": 0.88, "clusters": 1, "clustered": 2,
            "memories": 3, "agents": 1}
    rows = compare(ours, kore)
    assert rows[1][1:] == ["-", 0.5, "25% of the phase's CPU"]
    assert rows[3][1:3] == ["2.00×", "2.00×"]
    assert len(compare({**ours, "model_cpu_by_prompt": {}}, kore)) == 3  # the rule judge: no row

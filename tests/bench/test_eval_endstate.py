"""The evolving-fact suite: its generator keeps its promises and the pipeline reaches the gold."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.bench.eval_endstate import evaluate
from tests.bench.evolving import MIN_GAP_DAYS, generate


def test_generator_is_deterministic_and_its_gold_is_consistent() -> None:
    """Same seed → same profiles; texts unique per profile; every slot changes 1-7 times,
    consecutive versions more than 7 days apart; the gold value is the last version's."""
    a, b = generate(30, seed=5), generate(30, seed=5)
    assert [[n.text for n in p.notes] for p in a] == [[n.text for n in p.notes] for p in b]
    kinds = {n.kind for p in a for n in p.notes}
    assert kinds == {"version", "exception", "complementary", "chitchat"}
    for p in a:
        assert len({n.text for n in p.notes}) == len(p.notes)
        for slot, changes in p.changes.items():
            versions = [n for n in p.notes if n.slot == slot]
            assert 1 <= changes == len(versions) - 1 <= 7
            gaps = [y.created_at - x.created_at for x, y in zip(versions, versions[1:], strict=False)]
            assert all(g >= timedelta(days=MIN_GAP_DAYS) for g in gaps)
            assert p.current[slot] == versions[-1].value
            assert all(x.value != y.value for x, y in zip(versions, versions[1:], strict=False))
    assert any(len({n.value for n in p.notes if n.slot == s}) < p.changes[s] + 1
               for p in a for s in p.changes)  # some slot reverts to an earlier value


def test_oracle_judge_reaches_every_exact_end_state_in_one_run_and_rules_lose_nothing() -> None:
    """Issue 13 done-when on a small sample: with the oracle every profile is exact after one
    run, nothing current is lost, no verdict is wasted, ≤ 1 model call per retired superseded
    fact; the rule judge loses no current fact."""
    profiles = generate(8, seed=21)
    oracle = evaluate(profiles, "oracle", runs=1).per_run[0]
    assert (oracle.exact, oracle.lost, oracle.wasted) == (8, 0, 0)
    assert oracle.calls <= oracle.retired_superseded
    rules = evaluate(profiles, "rules", runs=1).per_run[0]
    assert rules.lost == 0


def test_heavy_rewording_is_found_through_shared_words_and_a_lumping_judge_costs_facts() -> None:
    """Versions restated in other words reach their end state with the oracle (the shared-term
    candidates); the lumping judge, calling every two-attribute topic one, retires current
    facts: what the eval's lumping rows measure is possible at all."""
    profiles = generate(8, seed=21, rewording="heavy")
    oracle = evaluate(profiles, "oracle", runs=1).per_run[0]
    assert oracle.lost == 0 and oracle.wasted == 0
    assert oracle.exact >= 6  # what no word joins ("ships releases" / "deployments") is left
    lumping = evaluate(profiles, "lumping", runs=1, lump_rate=1.0).per_run[0]
    assert lumping.lost > 0


def test_wordy_notes_keep_their_facts_and_still_reach_every_exact_end_state() -> None:
    """``wordy``: the same profiles, each note inside a lead-in clause (12-30 words, as an
    extraction model writes notes); with the oracle every one is exact after one run (at 12
    words and 40 notes, the limits before, none was: the lead-ins hide frames and lengthen
    every note past the shared-term and small-scope sources)."""
    plain, wordy = generate(8, seed=21, rewording="heavy"), generate(8, seed=21,
                                                                     rewording="heavy", wordy=True)
    for p, w in zip(plain, wordy, strict=True):
        assert [(n.id, n.slot, n.value) for n in p.notes] == [(n.id, n.slot, n.value)
                                                              for n in w.notes]
        assert all(a.text != b.text and 12 <= len(b.text.split()) <= 30
                   for a, b in zip(p.notes, w.notes, strict=True))
    oracle = evaluate(wordy, "oracle", runs=1).per_run[0]
    assert (oracle.exact, oracle.lost) == (8, 0)
    # A retirement only the whole-scope ask found is asked again alone (``confirm``); two such
    # pairs asked in one round, one retiring the other's winner, waste that one's answer (the
    # pair is asked again, moved to the note that replaced it): one here.
    assert oracle.wasted <= 1


def test_versions_in_consecutive_sessions_reach_their_end_state() -> None:
    """Versions 2-5 days apart (``min_gap_days=1``): the later value wins however often the
    old one was read, so every profile is exact after one run (with the 7-day window of the
    first policy, the old note won or the pair was flagged, and most were not)."""
    profiles = generate(8, seed=21, min_gap_days=1)
    gaps = []
    for p in profiles:
        for slot in p.changes:
            versions = [n.created_at for n in p.notes if n.slot == slot]
            gaps += [later - earlier for earlier, later in zip(versions, versions[1:],
                                                               strict=False)]
    assert min(gaps) < timedelta(days=7)  # the suite's first policy could not settle these
    oracle = evaluate(profiles, "oracle", runs=1).per_run[0]
    assert (oracle.exact, oracle.lost, oracle.wasted) == (8, 0, 0)


def test_a_host_that_records_no_reads_loses_no_current_fact() -> None:
    """The notes loaded with no read on record (``reads=False``), the run months after the
    first sessions: no current fact is archived as unused (before, every note older than the
    90-day retention went, current values included, and no profile ended exact)."""
    profiles = generate(8, seed=21)
    oracle = evaluate(profiles, "oracle", runs=1, reads=False).per_run[0]
    assert (oracle.exact, oracle.lost, oracle.wasted) == (8, 0, 0)


def test_a_value_corrected_minutes_later_in_its_session_reaches_its_end_state() -> None:
    """``min_gap_days=0``: a version may be corrected in its own session 5-50 minutes later,
    inside the hour two writers' clocks may disagree by. Equally used, the later statement
    wins, so every profile is exact after one run (before, each such pair was flagged and
    both values stayed active)."""
    profiles = generate(8, seed=21, min_gap_days=0)
    corrected = [n for p in profiles for s in p.changes
                 for n, m in _consecutive([v for v in p.notes if v.slot == s])
                 if m.created_at - n.created_at < timedelta(hours=1)]
    assert corrected and all(n.conversation for n in corrected)
    oracle = evaluate(profiles, "oracle", runs=1).per_run[0]
    assert (oracle.exact, oracle.lost, oracle.wasted) == (8, 0, 0)


def test_important_facts_still_change_when_a_later_value_is_stated() -> None:
    """Every note at importance 0.9-1 (a host that rates every preference important): a value
    stated days later still replaces the old one (before, both were flagged and kept, and no
    profile ended exact)."""
    profiles = generate(8, seed=21, importance=(0.9, 1.0))
    assert all(0.9 <= n.importance <= 1.0 for p in profiles for n in p.notes)
    oracle = evaluate(profiles, "oracle", runs=1).per_run[0]
    assert (oracle.exact, oracle.lost, oracle.wasted) == (8, 0, 0)


def _consecutive(notes: list[Any]) -> list[tuple[Any, Any]]:
    return list(zip(notes, notes[1:], strict=False))


def test_notes_arriving_day_by_day_reach_their_end_state_and_a_lumping_model_loses_little(
) -> None:
    """``incremental``: the notes arrive day by day and a dream runs after each day (or every
    fifth), as a daily schedule would. The oracle is exact; a model lumping 30 % of its topics
    gets a new chance to at every run, and an answer that joins notes it judged apart before
    is not applied, so it retires 1 current fact (before, 78: every run's lumped topic retired
    facts its earlier answers had kept apart)."""
    profiles = generate(8, seed=21)
    for every in (1, 5):
        oracle = evaluate(profiles, "oracle", runs=1, incremental=every).per_run[0]
        assert (oracle.exact, oracle.lost, oracle.wasted, oracle.failed) == (8, 0, 0, 0)
    lumping = evaluate(profiles, "lumping", runs=1, incremental=1, lump_rate=0.3).per_run[0]
    assert lumping.failed == 0 and lumping.lost <= 5 and lumping.exact >= 5


def test_restatements_fused_by_the_consolidation_judge_keep_their_place_in_time() -> None:
    """``fusing``: the judge fuses each cluster of one value's restatements, as a consolidating
    model would. The fused note is dated as its newest source, so a value stated after those
    restatements still replaces it (before, the fusion was dated at the run and became the
    "newer" value: a superseded value came back and the current one was retired)."""
    profiles = generate(8, seed=21)
    fusing = evaluate(profiles, "fusing", runs=1)
    assert fusing.fused > 0
    run = fusing.per_run[0]
    assert (run.exact, run.lost, run.wasted, run.failed) == (8, 0, 0, 0)


def test_a_model_that_merges_an_attributes_versions_keeps_the_one_stated_last() -> None:
    """``merging``: the consolidation judge fuses a cluster of one attribute's versions into
    the statement the prompt lists last, as the prompt asks. The prompt lists the notes oldest
    first, so with versions corrected minutes apart on one day (the prompt shows days) the
    last listed is the current value (before, in cluster order, a superseded value of that
    day came out as the fused note)."""
    profiles = generate(8, seed=5, min_gap_days=0)  # in cluster order: 5 exact, 3 lost
    merging = evaluate(profiles, "merging", runs=1)
    assert merging.fused > 0
    run = merging.per_run[0]
    assert (run.exact, run.lost, run.wasted, run.failed) == (8, 0, 0, 0)


def test_a_host_that_stamps_the_last_access_when_it_writes_loses_no_current_fact() -> None:
    """Each note loaded with its last access equal to its creation (a host that stamps it on
    write and never on read): that is no read, so no current fact is archived as unused (before,
    every note older than the 90-day retention was, and no profile ended exact)."""
    profiles = generate(8, seed=21)
    oracle = evaluate(profiles, "oracle", runs=1, reads="written").per_run[0]
    assert (oracle.exact, oracle.lost, oracle.wasted, oracle.failed) == (8, 0, 0, 0)


def test_a_hosts_model_reaches_every_exact_end_state_through_the_host_surface() -> None:
    """``host``: rule-judge runs, then a perfect model using only what ``fusion_candidates``
    offers (``fuse``, ``keep_apart``): exact by run 2, no current fact lost on the way (before
    a kept note took a later duplicate's date, a value stated between the two won)."""
    result = evaluate(generate(8, seed=21), "host", runs=3)
    assert [f.lost for f in result.per_run] == [0, 0, 0]
    assert result.per_run[-1].exact == 8
    assert result.host is not None and result.host.fused and result.host.kept_apart


def test_values_said_again_word_for_word_from_lines_without_ids_end_exact() -> None:
    """``verbatim`` histories imported without ids: a repeat is left out as already present,
    and the note holding its text takes its date, so the oracle ends every profile exact."""
    profiles = generate(8, seed=21, verbatim=True)
    assert any(len({n.text for n in p.notes}) < len(p.notes) for p in profiles)
    oracle = evaluate(profiles, "oracle", runs=1, ids=False).per_run[0]
    assert (oracle.exact, oracle.lost) == (8, 0)

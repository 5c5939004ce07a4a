"""The rule judge never merges a SICK CONTRADICTION or NEUTRAL pair; MSRP figures stay sane."""

from __future__ import annotations

import pytest

from tests.bench.eval_rules import MSRP_TRAIN, SICK_DIR, msrp_precision_recall, sick_merges


@pytest.mark.skipif(not SICK_DIR.exists(), reason="SICK 2014 eval data not present")
def test_rule_judge_merges_no_contradiction_or_neutral_sick_pair() -> None:
    """Text rules alone, and with the phase's similarity bar: only ENTAILMENT pairs merge."""
    for threshold in (None, 0.70):
        merged = sick_merges(threshold)
        assert merged.get("CONTRADICTION", 0) == 0 and merged.get("NEUTRAL", 0) == 0
        assert merged.get("ENTAILMENT", 0) > 100


@pytest.mark.skipif(not MSRP_TRAIN.exists(), reason="MSRP eval data not present")
def test_rule_judge_is_precise_on_msrp_paraphrases() -> None:
    """It merges few MSRP pairs, most of them paraphrases (measured P 0.75, R 0.010)."""
    result = msrp_precision_recall()
    assert result["precision"] >= 0.7 and 0 < result["recall"] < 0.05

"""The SICK candidate-search measurement runs and keeps its recall/cost trade-off."""

from __future__ import annotations

import pytest

from tests.bench.eval_contradictions import SICK_DIR, candidate_shares


@pytest.mark.skipif(not SICK_DIR.exists(), reason="SICK 2014 eval data not present")
def test_threshold_surfaces_most_contradictions_and_few_neutral_pairs() -> None:
    """At 0.70 with HashingEmbedder(512) most CONTRADICTION pairs reach the judge and far
    fewer NEUTRAL ones do (measured 0.778 and 0.195 on train + trial)."""
    result = candidate_shares(0.70)
    assert result["pairs"]["CONTRADICTION"] == 739
    assert result["share"]["CONTRADICTION"] > 0.7
    assert result["share"]["NEUTRAL"] < 0.25
    assert candidate_shares(0.5)["share"]["CONTRADICTION"] > result["share"]["CONTRADICTION"]

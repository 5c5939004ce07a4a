"""Contradiction candidates: the same-frame index, the union of sources, topics of capped size."""

from __future__ import annotations

import numpy as np
import pytest

from worker.embeddings.hashing import HashingEmbedder
from worker.similarity.candidates import (
    FrameSettings,
    Source,
    same_frame_pairs,
    source_counts,
    topics,
    union_edges,
)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # one differing span: a negation, a value, a tool name (up to 4 words)
        ("Always use a linter", "Never use a linter", True),
        ("The user has 7 vacation days left", "The user has half of the vacation days left", True),
        ("The team chats on Slack every day", "The team chats on Microsoft Teams every day", True),
        ("I use a linter", "I do not use a linter", True),  # inserted span
        ("User likes tea.", "user LIKES tea", True),  # case and punctuation do not matter
        ("Use Slack", "Use Microsoft Teams", True),  # as many shared words as the fewer cut
        ("The team chats on Zulip", "The team chats on Microsoft Teams every day", True),
        # short notes may differ in two spans when they share more words than either cut
        ("Reports use metric units", "All reports use imperial units", True),
        ("Pull requests need one approval", "Every pull request needs two approvals", True),
        ("Only on Fridays run the linter before each commit",
         "Sometimes run the linter before committing", True),  # one side inserts "each"
        ("Reports use metric units", "Use Slack", False),
        # too little shared frame: not the same frame
        ("Slack", "Discord", False),
        ("User likes green tea", "User hates black coffee", False),
        ("The user flies economy", "The team prefers tea in the morning", False),
    ],
)
def test_same_frame_pairs_table(a: str, b: str, expected: bool) -> None:
    """Pairs equal but for one span of at most 3 words are found; other pairs are not."""
    found = same_frame_pairs([a, b]).pairs
    assert (found == {(0, 1)}) is expected


def test_same_frame_finds_versions_the_hashing_embedder_scores_below_the_threshold() -> None:
    """The point of the source: versions of one short fact that cosine at 0.70 misses."""
    texts = ["Always use a linter", "Never use a linter", "Use a linter only in CI"]
    vectors = HashingEmbedder(512).embed(texts)
    assert float(vectors[0] @ vectors[1]) < 0.70
    assert (0, 1) in same_frame_pairs(texts).pairs


def test_generic_frames_are_skipped_not_paired_quadratically() -> None:
    """A frame shared by more than max_bucket notes pairs nobody and is counted instead."""
    texts = [f"note number {k} here" for k in range(40)]
    report = same_frame_pairs(texts, FrameSettings(max_bucket=32))
    assert report.pairs == set() and report.generic_frames >= 1
    small = same_frame_pairs(texts[:5], FrameSettings(max_bucket=32))
    assert len(small.pairs) == 10


def test_union_counts_each_source_and_what_only_it_found() -> None:
    """One edge per pair with every source that proposed it; cosine computed for the others."""
    v = np.eye(4, dtype=np.float32)
    edges = union_edges(v, cosine=[(0, 1, 0.9), (1, 0, 0.9)], clusters=[[0, 1, 2]],
                        same_frame=[(3, 2)])
    by_pair = {(e.i, e.j): e.sources for e in edges}
    assert by_pair == {(0, 1): {Source.COSINE, Source.CONSOLIDATION},
                       (0, 2): {Source.CONSOLIDATION}, (1, 2): {Source.CONSOLIDATION},
                       (2, 3): {Source.SAME_FRAME}}
    assert [e.similarity for e in edges][:1] == [0.9]
    counts = source_counts(edges)
    assert counts == {"cosine": 1, "only_cosine": 0, "consolidation": 3,
                      "only_consolidation": 2, "same_frame": 1, "only_same_frame": 1}


def test_topics_are_components_split_along_the_weakest_links() -> None:
    """Components become topics; one larger than the cap splits where it is weakest."""
    edges = [("a", "b", 0.9), ("b", "c", 0.8), ("c", "d", 0.3), ("d", "e", 0.85),
             ("x", "y", 0.5)]
    assert topics("abcdexyz", edges, max_size=8) == [["a", "b", "c", "d", "e"], ["x", "y"]]
    assert topics("abcdexyz", edges, max_size=3) == [["a", "b", "c"], ["d", "e"], ["x", "y"]]

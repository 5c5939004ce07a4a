"""Contradiction candidates: the same-frame index and the union of sources (shared rare terms:
test_terms.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.embeddings.hashing import HashingEmbedder
from worker.similarity.candidates import (
    FrameSettings,
    Source,
    one_span_apart,
    same_frame_pairs,
    source_counts,
    union_edges,
)
from worker.similarity.terms import frame_tokens


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
    v = np.eye(5, dtype=np.float32)
    edges = union_edges(v, cosine=[(0, 1, 0.9), (1, 0, 0.9)], clusters=[[0, 1, 2]],
                        same_frame=[(3, 2)], contained=[(4, 3), (0, 1)],
                        small_scope=[(2, 3), (0, 4)])
    by_pair = {(e.i, e.j): e.sources for e in edges}
    assert by_pair == {(0, 1): {Source.COSINE, Source.CONSOLIDATION, Source.CONTAINED},
                       (0, 2): {Source.CONSOLIDATION}, (1, 2): {Source.CONSOLIDATION},
                       (2, 3): {Source.SAME_FRAME, Source.SMALL_SCOPE},
                       (3, 4): {Source.CONTAINED}, (0, 4): {Source.SMALL_SCOPE}}
    assert [e.similarity for e in edges][:1] == [0.9]
    counts = source_counts(edges)
    assert counts == {"cosine": 1, "only_cosine": 0, "consolidation": 3,
                      "only_consolidation": 2, "same_frame": 1, "only_same_frame": 0,
                      "shared_term": 0, "only_shared_term": 0, "contained": 2,
                      "only_contained": 1, "small_scope": 2, "only_small_scope": 1}


def _reference_cuts(n: int, frame: FrameSettings) -> list[tuple[tuple[int, int], tuple[int, int] | None]]:
    """Every span (and, for short notes, second span after it) a note of ``n`` words may lose."""
    out: list[tuple[tuple[int, int], tuple[int, int] | None]] = []
    for i in range(n + 1):
        for l1 in range(min(frame.max_span, n - i) + 1):
            out.append(((i, i + l1), None))
            if n <= frame.two_spans_up_to:
                out += [((i, i + l1), (j, j + l2)) for l2 in range(frame.max_span - l1 + 1)
                        for j in range(i + l1 + 1, n - l2 + 1)]
    return out


def _reference_frame_pairs(texts: list[str], frame: FrameSettings) -> tuple[set[tuple[int, int]], int]:
    """same_frame_pairs spelled out without hashing or numpy: every cut of every note filed
    under its exact kept words, buckets of 2..max_bucket entries paired by the shared-words test."""
    buckets: dict[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], bool],
                  list[tuple[int, int, int]]] = {}
    for row, text in enumerate(texts):
        words = frame_tokens(text)
        if not 1 <= len(words) <= frame.max_tokens:
            continue
        for first, second in _reference_cuts(len(words), frame):
            gap = second or (first[1], first[1])
            cut = (first[1] - first[0]) + (gap[1] - gap[0])
            if len(words) - cut >= frame.min_frame:
                key = (tuple(words[:first[0]]), tuple(words[first[1]:gap[0]]),
                       tuple(words[gap[1]:]), second is not None)
                buckets.setdefault(key, []).append((row, cut, 2 if second else 1))
    pairs: set[tuple[int, int]] = set()
    generic = 0
    for key, entries in buckets.items():
        if len(entries) > frame.max_bucket:
            generic += 1
            continue
        shared = sum(len(part) for part in key[:3])
        for x, (ra, ca, gaps) in enumerate(entries):
            for rb, cb, _ in entries[x + 1:]:
                needed = max(ca, cb) if gaps > 1 else min(ca, cb)
                if ra != rb and shared >= max(frame.min_frame, needed):
                    pairs.add((min(ra, rb), max(ra, rb)))
    return pairs, generic


_FRAME_WORDS = ["User", "user", "USES", "use", "Slack", "Microsoft", "Teams", "never", "always",
                "a", "linter", "tea", "Tee", "ﬁle", "file", "Straße", "STRASSE", "zero\u200bwidth",
                "café", "cafe\u0301", "it's", "units", "metric", "."]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_FRAME_WORDS), min_size=0, max_size=15).map(" ".join),
                min_size=0, max_size=12),
       st.sampled_from([FrameSettings(), FrameSettings(max_span=2, min_frame=2, max_bucket=3),
                        FrameSettings(max_tokens=6, two_spans_up_to=4)]))
def test_same_frame_pairs_agree_with_the_unhashed_definition(texts: list[str],
                                                             frame: FrameSettings) -> None:
    """The hashed, sorted index finds exactly the pairs (and generic buckets) the definition
    gives, on texts mixing case, repeated words, invisible characters and unicode forms."""
    report = same_frame_pairs(texts, frame)
    assert (report.pairs, report.generic_frames) == _reference_frame_pairs(texts, frame)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_FRAME_WORDS), min_size=0, max_size=15).map(" ".join),
                min_size=0, max_size=12),
       st.sampled_from([FrameSettings(two_spans_up_to=0, max_bucket=10**6),
                        FrameSettings(max_span=2, min_frame=2, two_spans_up_to=0,
                                      max_bucket=10**6),
                        FrameSettings(max_tokens=6, two_spans_up_to=0, max_bucket=10**6)]))
def test_one_span_apart_is_the_index_with_one_span(texts: list[str],
                                                   frame: FrameSettings) -> None:
    """A pair at a time (consolidation's few topical pairs), the same answer as the index
    with one span and no bucket cap: the longest common head and tail are the best cut."""
    words = [frame_tokens(t) for t in texts]
    found = {(i, j) for i in range(len(texts)) for j in range(i + 1, len(texts))
             if one_span_apart(words[i], words[j], frame)}
    assert found == same_frame_pairs(texts, frame, tokens=words).pairs


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("Dana's pottery teacher is Mrs Alder", "Dana's pottery teacher is Mr Birch", True),
        ("Asked about tea in that chat", "Asked about green tea prices in that chat", True),
        ("I use a linter", "I do not use a linter", True),  # a span inserted
        ("Use Slack", "Use Microsoft Teams", True),
        ("User likes tea", "user LIKES tea", True),  # the same frame: the caller tells these
        ("Reports use metric units", "All reports use imperial units", False),  # two spans
        ("Slack", "Discord", False),
        ("The user flies economy class", "The user flies business class with extra legroom",
         False),  # a five-word span
    ],
)
def test_one_span_apart_table(a: str, b: str, expected: bool) -> None:
    assert one_span_apart(frame_tokens(a), frame_tokens(b)) is expected
    assert one_span_apart(frame_tokens(b), frame_tokens(a)) is expected

"""Contradiction candidates: the same-frame index, shared rare terms, the union of sources."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.embeddings.hashing import HashingEmbedder
from worker.similarity.candidates import (
    FrameSettings,
    Source,
    TermSettings,
    frame_tokens,
    same_frame_pairs,
    shared_term_pairs,
    source_counts,
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
    v = np.eye(5, dtype=np.float32)
    edges = union_edges(v, cosine=[(0, 1, 0.9), (1, 0, 0.9)], clusters=[[0, 1, 2]],
                        same_frame=[(3, 2)], contained=[(4, 3), (0, 1)])
    by_pair = {(e.i, e.j): e.sources for e in edges}
    assert by_pair == {(0, 1): {Source.COSINE, Source.CONSOLIDATION, Source.CONTAINED},
                       (0, 2): {Source.CONSOLIDATION}, (1, 2): {Source.CONSOLIDATION},
                       (2, 3): {Source.SAME_FRAME}, (3, 4): {Source.CONTAINED}}
    assert [e.similarity for e in edges][:1] == [0.9]
    counts = source_counts(edges)
    assert counts == {"cosine": 1, "only_cosine": 0, "consolidation": 3,
                      "only_consolidation": 2, "same_frame": 1, "only_same_frame": 1,
                      "shared_term": 0, "only_shared_term": 0, "contained": 2,
                      "only_contained": 1}


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
    buckets: dict[tuple[object, ...], list[tuple[int, int, int]]] = {}
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
        shared = sum(len(part) for part in key[:3])  # type: ignore[arg-type]
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


# ---- shared rare terms ----------------------------------------------------------------------
RESTATED = [
    ("The team chats on Slack every day", "Team chat runs on Zulip"),
    ("Preferred code editor: Emacs", "The user writes code in Vim"),
    ("Remaining vacation this year: 3 days", "The user has 20 vacation days left this year"),
]


@pytest.mark.parametrize(("a", "b"), RESTATED)
def test_a_fact_restated_in_other_words_shares_a_rare_term(a: str, b: str) -> None:
    """Neither a frame nor the hashing cosine joins these; the word they share does."""
    assert same_frame_pairs([a, b]).pairs == set()
    vectors = HashingEmbedder(512).embed([a, b])
    assert float(vectors[0] @ vectors[1]) < 0.70
    assert shared_term_pairs([a, b]) == {(0, 1)}


def test_only_discourse_frequency_or_function_words_in_common_join_nothing() -> None:
    texts = ["Reports use metric units again", "Pull requests need two approvals again",
             "The user is in the office", "The user is on holiday",
             "Deployments go out on every weekday", "The team chats on Zulip every day",
             "The user has 10 vacation days left"]
    assert shared_term_pairs(texts) == set()
    # A named day is a value: two notes sharing one may state one attribute.
    assert shared_term_pairs(["Deployments go out on Thursdays",
                              "The team ships releases on Thursdays"]) == {(0, 1)}


def test_a_term_too_many_notes_hold_is_not_rare() -> None:
    """A word in more of the scope's notes than max_notes names no one attribute (in a scope
    large enough that half of it is more: the other notes share nothing)."""
    texts = [f"Project {name} ships soon" for name in
             ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota")]
    others = [f"Note {k} stands alone" for k in range(20)]
    assert shared_term_pairs(texts + others, TermSettings(max_notes=8)) == set()
    assert len(shared_term_pairs(texts[:8] + others, TermSettings(max_notes=8))) == 28
    assert shared_term_pairs(texts[:3], TermSettings(max_notes=1)) == set()  # the source off


def test_long_notes_and_a_small_share_of_terms_are_left_to_cosine() -> None:
    long = ("The user spent the whole afternoon comparing espresso machines for the new office "
            "kitchen and finally picked the cheapest one")
    assert shared_term_pairs([long, "The office kitchen has a new fridge"]) == set()
    # One shared term among the five of the note with fewer is too little (a quarter: two).
    texts = ["Kitchen rota: Alice Bob Carol Dave", "Kitchen duty: Erin Frank Grace Heidi Ivan"]
    assert shared_term_pairs(texts, TermSettings(min_share=0.25)) == set()
    assert shared_term_pairs(texts, TermSettings(min_share=0.15)) == {(0, 1)}


def test_a_floor_on_cosine_drops_two_attributes_meeting_on_a_weekday() -> None:
    texts = ["Deployments go out on Thursdays", "The user swims on Thursday evenings"]
    assert shared_term_pairs(texts) == {(0, 1)}
    apart = np.asarray([[1.0, 0.0], [0.1, 0.995]], dtype=np.float32)
    assert shared_term_pairs(texts, vectors=apart, min_similarity=0.15) == set()
    assert shared_term_pairs(texts, vectors=apart, min_similarity=0.05) == {(0, 1)}


def test_a_word_most_of_a_small_scope_holds_is_not_rare() -> None:
    """Seven notes about Alice: her name is in five (more than half), which is no attribute;
    the chat versions still meet on the words only they share."""
    texts = ["Alice prefers green tea in the afternoon", "Never call Alice before 9am",
             "Alice's account number ends in 4411", "Alice walks to the office",
             "Alice keeps a cat", "The team chats on Slack every day", "Team chat runs on Zulip"]
    assert shared_term_pairs(texts) == {(5, 6)}

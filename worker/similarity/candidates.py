"""Contradiction candidates of one scope from three sources that fail differently, and the topics
(connected groups of candidates) they form. Pure: rows in, row-index pairs out.

Cosine neighbours miss two versions of a short fact that differ by one word (the hashing
embedder scores "never use a linter" / "always use a linter" below 0.70); the same-frame index
finds exactly those; consolidation's unmerged clusters carry the signal of a looser threshold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from worker.text.words import stem, strip_invisible


class Source(StrEnum):
    COSINE = "cosine"
    CONSOLIDATION = "consolidation"
    SAME_FRAME = "same_frame"


_WORD = re.compile(r"[\w']+")
_GAP = "\x00"  # stands for the cut-out span in a frame key; never a token


def frame_tokens(text: str) -> list[str]:
    """Stemmed, case-folded words ("requests" = "request"); punctuation and invisible
    characters never split a frame."""
    return [stem(w) for w in _WORD.findall(strip_invisible(text).casefold())]


@dataclass(frozen=True)
class FrameSettings:
    max_span: int = 4  # words a note may differ in ("Slack" / "Microsoft Teams every day")
    min_frame: int = 1  # words both notes must share around the spans
    max_tokens: int = 40  # longer notes are not slot-like facts; cosine covers them
    two_spans_up_to: int = 16  # notes this short may also differ in a second span
    max_bucket: int = 32  # a frame shared by more notes is too generic to mean one attribute


@dataclass
class FrameReport:
    pairs: set[tuple[int, int]] = field(default_factory=set)
    generic_frames: int = 0  # buckets skipped for being larger than max_bucket


def _frame_keys(tokens: list[str], s: FrameSettings) -> dict[tuple[str, ...], int]:
    """Each copy of ``tokens`` with one (or, for short notes, two) spans cut out → the fewest
    words cut to reach it."""
    n = len(tokens)
    keys: dict[tuple[str, ...], int] = {}

    def put(key: tuple[str, ...], cut: int) -> None:
        if n - cut >= s.min_frame and keys.get(key, cut + 1) > cut:
            keys[key] = cut

    for l1 in range(0, s.max_span + 1):
        for i in range(0, n - l1 + 1):
            head, rest = tokens[:i], tokens[i + l1:]
            put((*head, _GAP, *rest), l1)
            if n > s.two_spans_up_to:
                continue
            # A second span after the first, separated by at least one kept word.
            for l2 in range(1, s.max_span - l1 + 1):
                for j in range(1, len(rest) - l2 + 1):
                    put((*head, _GAP, *rest[:j], _GAP, *rest[j + l2:]), l1 + l2)
    return keys


def same_frame_pairs(texts: Sequence[str], settings: FrameSettings = FrameSettings()) -> FrameReport:
    """Pairs (i < j) whose token sequences are equal but for short differing spans.

    Inverted index: each note is filed under every copy of itself with a span of 0..max_span
    words cut out (or two spans of that many words together, for short notes: "Reports use metric units" / "All reports use
    imperial units"). Notes P·X·S and P·Y·S meet under the key P·◇·S, so candidates come from
    shared keys, never from all pairs. The words they share must be at least as many as the
    fewer words either cut, or with two spans the more ("use Slack" / "use Microsoft Teams"
    pass; "User likes green tea" / "User hates black coffee" do not).
    """
    # Per key: (row, words cut). With one gap, the shared words must be at least as many as
    # the fewer words either note cut; with two gaps, at least as many as the more.
    buckets: dict[tuple[str, ...], list[tuple[int, int]]] = {}
    for row, text in enumerate(texts):
        tokens = frame_tokens(text)
        if not 1 <= len(tokens) <= settings.max_tokens:
            continue
        for key, cut in _frame_keys(tokens, settings).items():
            buckets.setdefault(key, []).append((row, cut))
    report = FrameReport()
    for key, rows in buckets.items():
        if len(rows) < 2:
            continue
        if len(rows) > settings.max_bucket:
            report.generic_frames += 1
            continue
        shared = len(key) - key.count(_GAP)
        needed = max if key.count(_GAP) > 1 else min
        for x, (i, cut_i) in enumerate(rows):
            for j, cut_j in rows[x + 1:]:
                if i != j and shared >= max(settings.min_frame, needed(cut_i, cut_j)):
                    report.pairs.add((i, j) if i < j else (j, i))
    return report


@dataclass(frozen=True)
class Edge:
    """One candidate pair of rows (i < j), its cosine, and every source that proposed it."""

    i: int
    j: int
    similarity: float
    sources: frozenset[str]


def union_edges(
    vectors: np.ndarray,
    cosine: Iterable[tuple[int, int, float]],
    clusters: Iterable[Sequence[int]] = (),
    same_frame: Iterable[tuple[int, int]] = (),
) -> list[Edge]:
    """The union of the three sources, one edge per pair, most similar first (ties by rows)."""
    found: dict[tuple[int, int], set[str]] = {}
    sims: dict[tuple[int, int], float] = {}
    for i, j, s in cosine:
        key = (min(i, j), max(i, j))
        found.setdefault(key, set()).add(Source.COSINE.value)
        sims[key] = float(s)
    for members in clusters:
        rows = sorted(set(members))
        for x, i in enumerate(rows):
            for j in rows[x + 1:]:
                found.setdefault((i, j), set()).add(Source.CONSOLIDATION.value)
    for i, j in same_frame:
        found.setdefault((min(i, j), max(i, j)), set()).add(Source.SAME_FRAME.value)
    edges = []
    for (i, j), sources in found.items():
        if i == j:
            continue
        sim = sims.get((i, j))
        if sim is None:
            sim = float(vectors[i] @ vectors[j]) if vectors.shape[1] else 0.0
        edges.append(Edge(i, j, round(sim, 6), frozenset(sources)))
    edges.sort(key=lambda e: (-e.similarity, e.i, e.j))
    return edges


def source_counts(edges: Iterable[Edge]) -> dict[str, int]:
    """Per source: pairs it proposed, and pairs only it proposed (what it adds to the others)."""
    out: dict[str, int] = {}
    for source in Source:
        out[f"{source.value}"] = 0
        out[f"only_{source.value}"] = 0
    for e in edges:
        for s in e.sources:
            out[s] += 1
        if len(e.sources) == 1:
            (only,) = e.sources
            out[f"only_{only}"] += 1
    return out


def topics(
    nodes: Iterable[str], edges: Iterable[tuple[str, str, float]], max_size: int
) -> list[list[str]]:
    """Connected groups of at most ``max_size`` nodes, each held together by its strongest edges.

    Kruskal-style: edges strongest first join two groups only while the union fits, so a
    component larger than ``max_size`` splits along its weakest links (one attribute's versions,
    being most alike, stay together). Groups sorted by their first node; nodes sorted inside.
    """
    parent: dict[str, str] = {n: n for n in nodes}
    size: dict[str, int] = dict.fromkeys(parent, 1)

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a, b, _ in sorted(edges, key=lambda e: (-e[2], e[0], e[1])):
        if a not in parent or b not in parent:
            continue
        ra, rb = root(a), root(b)
        if ra == rb or size[ra] + size[rb] > max_size:
            continue
        if rb < ra:
            ra, rb = rb, ra
        parent[rb] = ra
        size[ra] += size[rb]
    groups: dict[str, list[str]] = {}
    for n in parent:
        groups.setdefault(root(n), []).append(n)
    return sorted((sorted(g) for g in groups.values() if len(g) > 1), key=lambda g: g[0])

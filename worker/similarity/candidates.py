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

from worker.safety.injection import strip_invisible


class Source(StrEnum):
    COSINE = "cosine"
    CONSOLIDATION = "consolidation"
    SAME_FRAME = "same_frame"


_WORD = re.compile(r"[\w']+")
_GAP = "\x00"  # stands for the cut-out span in a frame key; never a token


def frame_tokens(text: str) -> list[str]:
    """Case-folded word tokens; punctuation and invisible characters never split a frame."""
    return _WORD.findall(strip_invisible(text).casefold())


@dataclass(frozen=True)
class FrameSettings:
    max_span: int = 3  # words that may differ on each side ("Slack" / "Microsoft Teams")
    min_frame: int = 2  # words both notes must share around the span
    max_tokens: int = 40  # longer notes are not slot-like facts; cosine covers them
    max_bucket: int = 32  # a frame shared by more notes is too generic to mean one attribute


@dataclass
class FrameReport:
    pairs: set[tuple[int, int]] = field(default_factory=set)
    generic_frames: int = 0  # buckets skipped for being larger than max_bucket


def same_frame_pairs(texts: Sequence[str], settings: FrameSettings = FrameSettings()) -> FrameReport:
    """Pairs (i < j) whose token sequences are equal but for one span of ≤ ``max_span`` words.

    Inverted index: each note is filed under every copy of itself with one span of 0..max_span
    words cut out (prefix, gap, suffix). Two notes P·X·S and P·Y·S meet under the key P·◇·S, so
    candidates come from shared keys (about n·(max_span+1) keys per note), never from all pairs.
    """
    buckets: dict[tuple[str, ...], list[int]] = {}
    for row, text in enumerate(texts):
        tokens = frame_tokens(text)
        if not settings.min_frame <= len(tokens) <= settings.max_tokens:
            continue
        keys: set[tuple[str, ...]] = set()
        for span in range(0, settings.max_span + 1):
            if len(tokens) - span < settings.min_frame:
                break
            for start in range(0, len(tokens) - span + 1):
                keys.add((*tokens[:start], _GAP, *tokens[start + span:]))
        for key in keys:
            buckets.setdefault(key, []).append(row)
    report = FrameReport()
    for rows in buckets.values():
        if len(rows) < 2:
            continue
        if len(rows) > settings.max_bucket:
            report.generic_frames += 1
            continue
        for x, i in enumerate(rows):
            for j in rows[x + 1:]:
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

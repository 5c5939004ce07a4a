"""Contradiction candidates of one scope from five sources that fail differently (their topics:
worker.similarity.topics). Pure: rows in, row-index pairs out.

Cosine neighbours miss two versions of a short fact that differ by one word (the hashing
embedder scores "never use a linter" / "always use a linter" below 0.70); the same-frame index
finds exactly those; consolidation's unmerged clusters carry the signal of a looser threshold;
shared rare terms join two short facts restated in other words ("The team chats on Slack" /
"Team chat runs on Zulip"), which neither cosine nor a frame connects (worker.similarity.terms);
a note another states word for word with more detail is a duplicate however far the detail
moves the cosine (the caller finds those with the text rules, below the cosine bar).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from itertools import count

import numpy as np

from worker.similarity.terms import frame_tokens


class Source(StrEnum):
    COSINE = "cosine"
    CONSOLIDATION = "consolidation"
    SAME_FRAME = "same_frame"
    SHARED_TERM = "shared_term"
    CONTAINED = "contained"
    SMALL_SCOPE = "small_scope"


@dataclass(frozen=True)
class FrameSettings:
    max_span: int = 4  # words a note may differ in ("Slack" / "Microsoft Teams every day")
    min_frame: int = 1  # words both notes must share around the spans
    max_tokens: int = 40  # longer notes are not slot-like facts; cosine covers them
    two_spans_up_to: int = 12  # notes this short may also differ in a second span (cost grows fast)
    max_bucket: int = 32  # a frame shared by more notes is too generic to mean one attribute


@dataclass
class FrameReport:
    pairs: set[tuple[int, int]] = field(default_factory=set)
    generic_frames: int = 0  # buckets skipped for being larger than max_bucket


# Polynomial hashes over uint64 (numpy wraps on overflow, which is the modulus we want).
_BASE = np.uint64(1_000_003)
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))


@lru_cache(maxsize=64)
def _cuts(n: int, max_span: int, two_spans: bool) -> tuple[np.ndarray, ...]:
    """Every way to cut a note of ``n`` words: segment bounds (kept head, middle, tail) as
    (start, end) columns, the words cut, and whether there are two gaps."""
    rows = []
    for l1 in range(0, max_span + 1):
        for i in range(0, n - l1 + 1):
            rows.append((0, i, i + l1, i + l1, i + l1, n, l1, 0))
            if not two_spans:
                continue
            # A second span after the first, separated by at least one kept word; either span
            # may be empty (the other note inserted words there).
            for l2 in range(0, max_span - l1 + 1):
                for j in range(i + l1 + 1, n - l2 + 1):
                    rows.append((0, i, i + l1, j, j + l2, n, l1 + l2, 1))
    table = np.asarray(rows, dtype=np.int64)
    return tuple(table[:, k] for k in range(8))


def same_frame_pairs(texts: Sequence[str], settings: FrameSettings = FrameSettings(), *,
                     tokens: Sequence[Sequence[str]] | None = None) -> FrameReport:
    """Pairs (i < j) whose token sequences are equal but for short differing spans.

    Inverted index: each note is filed under every copy of itself with a span of 0..max_span
    words cut out (or two spans of that many words together, for short notes: "Reports use
    metric units" / "All reports use imperial units"). Notes P·X·S and P·Y·S meet under the key
    P·◇·S, so candidates come from shared keys (hashed, sorted with numpy), never from all
    pairs. The words they share must be at least as many as the fewer words either cut, or with
    two spans the more ("use Slack" / "use Microsoft Teams" pass; "User likes green tea" /
    "User hates black coffee" do not). ``tokens``: the texts' ``frame_tokens``, when the caller
    has them already.
    """
    report = FrameReport()
    tokenized = tokens if tokens is not None else [frame_tokens(t) for t in texts]
    groups = [_entries(n, members, settings)
              for n, members in _by_length(tokenized, settings).items()]
    if not groups:
        return report
    key = np.concatenate([g.key for g in groups])
    # A note reaching one key by two cuts (repeated words) appears twice; pairs of it with
    # itself are skipped below, and a pair passes when any of its entries does. The test is
    # symmetric and a key fixes the words shared and the gaps, so a bucket's order does not
    # matter: the faster unstable sort. Only keys that may share a bucket are sorted.
    order = _crowded(key)
    order = order[np.argsort(key[order])]
    ordered = key[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[starts, len(ordered)])
    report.generic_frames = int((sizes > settings.max_bucket).sum())
    usable = (sizes >= 2) & (sizes <= settings.max_bucket)
    # Most keys hold one entry alone: only the entries of usable buckets are carried on.
    chosen = order[np.repeat(usable, sizes)]
    sizes = sizes[usable]
    starts = np.cumsum(sizes) - sizes
    report.pairs = _bucket_pairs(starts, sizes, *_describe(groups, chosen), settings.min_frame)
    return report


def one_span_apart(a: Sequence[str], b: Sequence[str],
                   settings: FrameSettings = FrameSettings()) -> bool:
    """Whether two notes' ``frame_tokens`` are a same-frame pair with one span: ``a`` = P·X·S
    and ``b`` = P·Y·S, X and Y at most ``max_span`` words, P and S together at least
    ``min_frame`` words and as many as the fewer of X and Y (what ``same_frame_pairs`` finds
    with ``two_spans_up_to`` 0, bucket sizes aside). For a few pairs at a time: the longest
    common head and tail make X and Y as short, and P·S as long, as any cut can."""
    la, lb = len(a), len(b)
    if not (1 <= la <= settings.max_tokens and 1 <= lb <= settings.max_tokens):
        return False
    shorter = min(la, lb)
    head = 0
    while head < shorter and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shorter - head and a[la - 1 - tail] == b[lb - 1 - tail]:
        tail += 1
    x, y = la - head - tail, lb - head - tail
    return (x <= settings.max_span and y <= settings.max_span
            and head + tail >= max(settings.min_frame, min(x, y)))


def _crowded(key: np.ndarray) -> np.ndarray:
    """Positions of the keys whose hash slot another key shares, in order. Most keys are alone
    (a note's cut copies rarely meet another note's): a key alone in its slot is in a bucket of
    one, which no pair and no count of generic frames uses, so it need not be sorted. Slots are
    the keys' top bits (the multiplicative mixing leaves the low bits poorly mixed), about four
    per key."""
    bits = min(24, max(10, (4 * len(key)).bit_length()))
    slot = (key >> np.uint64(64 - bits)).astype(np.intp)
    return np.flatnonzero(np.bincount(slot, minlength=1 << bits)[slot] >= 2)


def _by_length(tokens: Sequence[Sequence[str]],
               settings: FrameSettings) -> dict[int, list[tuple[int, list[int]]]]:
    """Each short enough note as (row, word ids), grouped by its number of words. A word's id
    is its order of first appearance, from 1 (a new word takes the next number as the
    dictionary looks it up: no Python call per word)."""
    vocabulary: defaultdict[str, int] = defaultdict(count(1).__next__)
    by_length: dict[int, list[tuple[int, list[int]]]] = {}
    for row, words in enumerate(tokens):
        if 1 <= len(words) <= settings.max_tokens:
            by_length.setdefault(len(words), []).append(
                (row, list(map(vocabulary.__getitem__, words))))
    return by_length


@dataclass(frozen=True)
class _Group:
    """The index entries of the notes of one length: a key per note and cut, note after note."""

    rows: np.ndarray  # the notes' rows
    table: _CutTable
    key: np.ndarray


def _entries(n: int, members: list[tuple[int, list[int]]], settings: FrameSettings) -> _Group:
    """Index entries of the notes of ``n`` words."""
    table = _cut_table(n, settings)
    with np.errstate(over="ignore"):
        tokens = np.asarray([ids for _, ids in members], dtype=np.uint64)
        prefix = tokens @ table.prefix
        # Each kept segment hashed with its length, so "a b ◇ c" never meets "a ◇ b c".
        key = np.zeros((len(members), len(table.cut)), dtype=np.uint64)
        for (start, end, power, length), mix in zip(table.segments, _MIX, strict=True):
            # key = (key ^ (prefix[end] - prefix[start] * power + length)) * mix, in place.
            segment = np.take(prefix, start, axis=1)
            segment *= power
            np.subtract(np.take(prefix, end, axis=1), segment, out=segment)
            segment += length
            key ^= segment
            key *= mix
        key ^= table.two
    return _Group(np.asarray([r for r, _ in members]), table, key.ravel())


def _describe(
    groups: list[_Group], chosen: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row, words cut, words shared and gaps of the ``chosen`` entries (positions in the
    groups' keys laid end to end); looked up for these few entries only."""
    widths = np.asarray([len(g.table.cut) for g in groups])
    counts = np.asarray([len(g.rows) for g in groups])
    ends = np.cumsum(widths * counts)
    group = np.searchsorted(ends, chosen, side="right")
    note, cut = np.divmod(chosen - (ends - widths * counts)[group], widths[group])
    row = np.concatenate([g.rows for g in groups])[(np.cumsum(counts) - counts)[group] + note]
    column = (np.cumsum(widths) - widths)[group] + cut
    return (row, np.concatenate([g.table.cut for g in groups])[column],
            np.concatenate([g.table.shared for g in groups])[column],
            np.concatenate([g.table.gaps for g in groups])[column])


@dataclass(frozen=True)
class _CutTable:
    """The kept cuts of one note length, with what hashing them needs: per kept segment (head,
    middle, tail) its start and end columns, _BASE**length and length."""

    segments: tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], ...]
    # Word ids @ prefix = the hashes of every prefix, Horner's sum_i id_i * _BASE**(k-1-i) for
    # k = 0..n at once (integer matmul wraps like the hashes).
    prefix: np.ndarray
    cut: np.ndarray  # words cut
    shared: np.ndarray  # words kept
    gaps: np.ndarray  # 1 or 2
    two: np.ndarray  # 1 where there are two gaps, as mixed into the key


@lru_cache(maxsize=64)
def _cut_table(n: int, settings: FrameSettings) -> _CutTable:
    """``_cuts`` of ``n`` words without those leaving fewer than ``min_frame`` words."""
    columns = _cuts(n, settings.max_span, n <= settings.two_spans_up_to)
    keep = (n - columns[6]) >= settings.min_frame
    s0, e0, s1, e1, s2, e2, cut, two = (x[keep] for x in columns)
    powers = _powers(settings.max_tokens)
    segments = tuple((start, end, powers[end - start], (end - start).astype(np.uint64))
                     for start, end in ((s0, e0), (s1, e1), (s2, e2)))
    word, end = np.arange(n)[:, None], np.arange(n + 1)[None, :]
    prefix = np.where(word < end, powers[np.clip(end - 1 - word, 0, None)], np.uint64(0))
    return _CutTable(segments, prefix, cut, n - cut, two + 1, two.astype(np.uint64))


@lru_cache(maxsize=8)
def _powers(max_tokens: int) -> np.ndarray:
    """_BASE**k for k = 0..max_tokens, wrapping like the hashes."""
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(max_tokens + 1, _BASE, dtype=np.uint64))
    out: np.ndarray = np.r_[np.uint64(1), powers[:-1]]
    return out


def _bucket_pairs(
    starts: np.ndarray, sizes: np.ndarray, row: np.ndarray, cut: np.ndarray, shared: np.ndarray,
    gaps: np.ndarray, min_frame: int,
) -> set[tuple[int, int]]:
    """Row pairs of every two entries x < y of one bucket that pass the shared-words test, all
    buckets at once (``starts``/``sizes``: the buckets, consecutive in the entry order)."""
    # Entry x pairs with the ``after[x]`` entries behind it in its bucket: y = x+1 .. x+after[x].
    after = np.repeat(starts + sizes, sizes) - np.arange(int(sizes.sum())) - 1
    x = np.repeat(np.arange(len(after)), after)
    y = x + 1 + np.arange(len(x)) - np.repeat(np.cumsum(after) - after, after)
    bucket = np.repeat(np.repeat(starts, sizes), after)
    # One span: the fewer words either cut; two spans: the more.
    needed = np.where(gaps[bucket] > 1, np.maximum(cut[x], cut[y]), np.minimum(cut[x], cut[y]))
    ok = (row[x] != row[y]) & (shared[bucket] >= np.maximum(min_frame, needed))
    i, j = row[x][ok], row[y][ok]
    return set(zip(np.minimum(i, j).tolist(), np.maximum(i, j).tolist(), strict=True))


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
    shared_term: Iterable[tuple[int, int]] = (),
    contained: Iterable[tuple[int, int]] = (),
    small_scope: Iterable[tuple[int, int]] = (),
) -> list[Edge]:
    """The union of the sources, one edge per pair, most similar first (ties by rows)."""
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
    for source, proposed in ((Source.SAME_FRAME, same_frame), (Source.SHARED_TERM, shared_term),
                             (Source.CONTAINED, contained), (Source.SMALL_SCOPE, small_scope)):
        for i, j in proposed:
            found.setdefault((min(i, j), max(i, j)), set()).add(source.value)
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

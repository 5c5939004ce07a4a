"""Consolidation's clustering against the numpy-per-step growth it replaced: the same clusters,
similarities and leftovers, bit for bit, on vectors that tie exactly, land on the bar or a
float32 step beside it, with topical links, pairs kept apart, length caps and throwaway notes.

``_reference_plan`` is the growth as it was (np.where and argmax over the candidates on every
step, the bar a Python float); only the pieces this change left alone are imported."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.domain.types import Note, Protection, Scope
from worker.phases.consolidate.core import (
    ClusterPlan,
    PlannedCluster,
    TopicalLinks,
    _adjacency,
    _components,
    clusterable,
    plan_clusters,
)

# ---- the growth as it was -----------------------------------------------------------------
_SEEN: list[tuple[float, int]] = []  # each mean the growth compared, and over how many
@dataclass(frozen=True)
class _RefGrowth:
    vectors: np.ndarray
    ids: list[str]
    threshold: float
    max_size: int
    links: dict[int, set[int]] | None = None
    lengths: np.ndarray | None = None
    max_chars: int = 0
    apart: dict[int, set[int]] | None = None


def _reference_plan(
    notes: Sequence[Note], vectors: np.ndarray, pairs: Sequence[tuple[int, int, float]],
    threshold: float, min_size: int, max_size: int, ephemeral_pairs: bool = True,
    topical: TopicalLinks | None = None, apart: Collection[tuple[int, int]] = (),
) -> ClusterPlan:
    eligible = {i for i, n in enumerate(notes) if clusterable(n)}
    ids = [n.id for n in notes]
    cosine = [(i, j) for i, j, _ in pairs]
    first = _RefGrowth(vectors, ids, threshold, max_size, apart=_adjacency(apart, eligible))
    plan = _ref_cluster(notes, _adjacency(cosine, eligible), first, min_size, ephemeral_pairs)
    if topical is None:
        return plan
    rest = eligible - {m for c in plan.clusters for m in c.members}
    if len(rest) < min_size:
        return plan
    links = _adjacency([*cosine, *topical.pairs], rest)
    lengths = np.asarray([len(n.content) + 1 for n in notes], dtype=np.int64)
    second = _RefGrowth(vectors, ids, threshold, max_size, links, lengths,
                        topical.max_chars + 1, _adjacency([*topical.apart, *apart], rest))
    found = _ref_cluster(notes, links, second, min_size, ephemeral_pairs=False)
    for c in found.clusters:
        c.topical = True
    taken = {m for c in found.clusters for m in c.members}
    return ClusterPlan([*plan.clusters, *found.clusters],
                       [i for i in plan.leftovers if i not in taken])


def _ref_cluster(notes: Sequence[Note], adjacency: dict[int, set[int]], growth: _RefGrowth,
                 min_size: int, ephemeral_pairs: bool) -> ClusterPlan:
    ids = growth.ids
    clusters: list[PlannedCluster] = []
    leftovers: list[int] = []
    ephemeral = Protection.EPHEMERAL.value
    for component in _components(adjacency, ids):
        pool = set(component)
        while pool:
            if len(pool) < min_size and not (ephemeral_pairs and any(
                    notes[m].protection == ephemeral for m in pool)):
                leftovers.extend(pool)
                break
            seed = min(pool, key=lambda i: (-len(adjacency[i] & pool), ids[i]))
            members = _ref_grow(seed, pool, growth)
            throwaway = any(notes[m].protection == ephemeral for m in members)
            if len(members) >= min_size or (ephemeral_pairs and throwaway and len(members) >= 2):
                pool.difference_update(members)
                ordered = sorted(members, key=lambda m: ids[m])
                sims = [float(growth.vectors[a] @ growth.vectors[b])
                        for k, a in enumerate(ordered) for b in ordered[k + 1:]]
                clusters.append(PlannedCluster(ordered, round(sum(sims) / len(sims), 4),
                                               round(min(sims), 4)))
            else:
                pool.discard(seed)
                leftovers.append(seed)
    clusters.sort(key=lambda c: ids[c.members[0]])
    return ClusterPlan(clusters, sorted(leftovers, key=lambda m: ids[m]))


def _ref_grow(seed: int, pool: set[int], g: _RefGrowth) -> list[int]:
    members = [seed]
    rest = sorted(pool - {seed}, key=lambda i: g.ids[i])
    if not rest:
        return members
    candidates = g.vectors[rest]
    at = {r: k for k, r in enumerate(rest)} if g.links is not None or g.apart else {}
    sums = _ref_lifted(candidates @ g.vectors[seed], seed, at, g)
    alive = np.ones(len(rest), dtype=bool)
    _ref_shut_out(alive, seed, at, g)
    lengths = g.lengths[rest] if g.lengths is not None else None
    room = g.max_chars - int(g.lengths[seed]) if g.lengths is not None else 0
    bar = g.threshold - 1e-6
    while len(members) < g.max_size:
        usable = alive if lengths is None else alive & (lengths <= room)
        means = np.where(usable, sums / len(members), -np.inf)
        best = int(np.argmax(means))
        _SEEN.append((float(means[best]), len(members)))
        if means[best] < bar:
            break
        members.append(rest[best])
        alive[best] = False
        _ref_shut_out(alive, rest[best], at, g)
        if lengths is not None:
            room -= int(lengths[best])
        sums += _ref_lifted(candidates @ candidates[best], rest[best], at, g)
    return members


def _ref_shut_out(alive: np.ndarray, member: int, at: dict[int, int], g: _RefGrowth) -> None:
    if g.apart:
        for i in g.apart.get(member, ()):
            if i in at:
                alive[at[i]] = False


def _ref_lifted(sims: np.ndarray, member: int, at: dict[int, int], g: _RefGrowth) -> np.ndarray:
    if g.links is None:
        return sims
    linked = [at[i] for i in g.links.get(member, ()) if i in at]
    if linked:
        sims[linked] = np.maximum(sims[linked], g.threshold)
    return sims


# ---- the cases ----------------------------------------------------------------------------
_PROTECTIONS = ["standard"] * 5 + ["ephemeral"] * 3 + ["immutable", "protected"]


def _vectors(rng: np.random.Generator, n: int, dim: int, kind: str) -> np.ndarray:
    """``grid``: quarters, so dot products are exact and tie; ``near``: a few directions
    nudged by a float32 step or more; ``loose``: anything. Some rows repeat others exactly."""
    if kind == "grid":
        x = rng.integers(-4, 5, size=(n, dim)).astype(np.float32) / 4
    elif kind == "near":
        centres = rng.standard_normal((3, dim)).astype(np.float32)
        nudge = rng.choice([1e-7, 1e-6, 1e-4, 1e-2], size=(n, 1)).astype(np.float32)
        x = centres[rng.integers(0, 3, size=n)] + nudge * rng.standard_normal((n, dim))
    else:
        x = rng.standard_normal((n, dim))
    x = x.astype(np.float32)
    if rng.random() < 0.7:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = (x / np.where(norms == 0, 1, norms)).astype(np.float32)
    for k in range(n):
        if rng.random() < 0.25:
            x[k] = x[rng.integers(0, n)]
    return np.ascontiguousarray(x, dtype=np.float32)


def _near(rng: np.random.Generator, case: dict[str, Any]) -> float:
    """A threshold whose bar (``threshold - 1e-6``, compared as a float32) one of the means the
    growth compared under ``case``'s threshold meets exactly, or misses by a float32 step or a
    fraction of one: the bar or a tie decides there."""
    _SEEN.clear()
    _reference_plan(**case)
    seen = [(m, n) for m, n in _SEEN if 0 <= m <= 1]  # not -inf: no candidate could join
    rounded = [(m, n) for m, n in seen if n & (n - 1)]  # the division rounded these
    if rounded and rng.random() < 0.5:
        seen = rounded
    if not seen:
        return float(case["threshold"])
    target = seen[int(rng.integers(0, len(seen)))][0]
    offset = float(np.spacing(np.float32(target))) * float(rng.choice([-1, 0, 0, 0.25, 0.5, 1]))
    return min(max(target + offset + 1e-6, 0.0), 1.0)


@st.composite
def _cases(draw: st.DrawFn) -> dict[str, Any]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(2, 12))
    vectors = _vectors(rng, n, draw(st.sampled_from([3, 8, 64, 512])),
                       draw(st.sampled_from(["grid", "near", "loose"])))
    names = [f"n{k:02d}" for k in rng.permutation(n)]  # id order is not row order
    threshold = float(rng.random())
    every = list(combinations(range(n), 2))
    share = draw(st.sampled_from([0.0, 0.6, 1.0]))  # 0: what neighbour_pairs would find
    pairs = [(i, j, 0.0) for i, j in every if rng.random() < share
             or (not share and vectors[i] @ vectors[j] >= threshold - 1e-3)]

    def some(share: float) -> list[tuple[int, int]]:
        return [p for p in every if rng.random() < share]

    notes = [Note(id=names[k], scope=Scope("a"), content="w" * int(rng.integers(1, 40)),
                  protection=_PROTECTIONS[int(rng.integers(0, len(_PROTECTIONS)))],
                  flags=["injection:x"] if rng.random() < 0.05 else [])
             for k in range(n)]
    min_size = draw(st.integers(2, 4))
    topical = (TopicalLinks(some(0.3), int(rng.integers(1, 120)), some(0.1))
               if draw(st.booleans()) else None)
    case = {"notes": notes, "vectors": vectors, "pairs": pairs, "threshold": threshold,
            "min_size": min_size, "max_size": draw(st.integers(2, 7)),
            "ephemeral_pairs": draw(st.booleans()), "topical": topical,
            "apart": some(0.1) if draw(st.booleans()) else ()}
    if draw(st.booleans()):
        case["threshold"] = _near(rng, case)
    return case


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_clusters_are_those_of_the_growth_it_replaced(case: dict[str, Any]) -> None:
    assert repr(plan_clusters(**case)) == repr(_reference_plan(**case))


def test_a_nan_vector_joins_as_argmax_took_it() -> None:
    """A NaN similarity counted as the highest (numpy's argmax): the same plan still."""
    rng = np.random.default_rng(7)
    vectors = _vectors(rng, 6, 8, "near")
    vectors[3] = np.nan
    notes = [Note(id=f"n{k}", scope=Scope("a"), content="w") for k in range(6)]
    pairs = [(i, j, 0.0) for i, j in combinations(range(6), 2)]
    case: dict[str, Any] = {"notes": notes, "vectors": vectors, "pairs": pairs,
                            "threshold": 0.6, "min_size": 2, "max_size": 4}
    assert repr(plan_clusters(**case)) == repr(_reference_plan(**case))

"""Topics: connected groups of candidate pairs, capped in size, each held together by its
strongest links. Pure: node ids and weighted edges in, groups out."""

from __future__ import annotations

from collections.abc import Iterable


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

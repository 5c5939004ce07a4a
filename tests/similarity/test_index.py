"""Range search: unordered unique pairs above the threshold, deterministic order."""

import faiss
import numpy as np

from worker.similarity.index import BLAS_FROM, neighbour_pairs


def _unit(rows: np.ndarray) -> np.ndarray:
    unit: np.ndarray = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return unit


def test_pairs_are_unique_unordered_and_sorted() -> None:
    """Each pair once (i < j), never a self pair, most similar first."""
    rng = np.random.default_rng(3)
    x = _unit(rng.normal(size=(50, 16)))
    x[10] = x[2]
    x[20] = _unit((x[2] + 0.3 * x[5])[None, :])[0]
    pairs = neighbour_pairs(x, 0.9)
    assert pairs[0][:2] == (2, 10)
    assert all(i < j for i, j, _ in pairs)
    assert len({(i, j) for i, j, _ in pairs}) == len(pairs)
    sims = [s for _, _, s in pairs]
    assert sims == sorted(sims, reverse=True)
    # Plain Python numbers, each score exactly the float32 the index computed.
    assert all(type(i) is int and type(j) is int and type(s) is float for i, j, s in pairs)
    assert all(s == float(np.float32(s)) for s in sims)


def test_approximate_index_finds_planted_duplicates() -> None:
    """Above the ANN threshold the IVF index still finds exact duplicates."""
    rng = np.random.default_rng(4)
    x = _unit(rng.normal(size=(3000, 32)))
    x[2999] = x[7]
    pairs = neighbour_pairs(x, 0.99, ann_threshold=1000)
    assert (7, 2999) in {(i, j) for i, j, _ in pairs}


def test_identical_vectors_are_a_pair_even_at_threshold_one() -> None:
    """Two copies of one vector have cosine 1, which float32 gives as 1 give or take a few
    units in the last place (before: at threshold 1.0 about two duplicate pairs in five went
    missing, more with the BLAS kernel than without). Every copy pairs with every other at 1.0;
    nothing else does, zero vectors (texts with no words) included."""
    rng = np.random.default_rng(5)
    x = _unit(rng.normal(size=(60, 512)))
    x = np.concatenate([x, x, x[:5], np.zeros((2, 512), dtype=np.float32)])
    twins = {(k, k + 60) for k in range(60)} | {(k, k + 120) for k in range(5)} | {
        (k + 60, k + 120) for k in range(5)}
    for n in (len(x), 12):  # a scope of a few notes as well
        rows = [r for r in range(len(x)) if r % 60 < n // 2 or r >= 120]
        pairs = neighbour_pairs(x[rows], 1.0)
        assert {(rows[i], rows[j]) for i, j, _ in pairs} == {
            (a, b) for a, b in twins if a in rows and b in rows}
        assert all(s >= 1.0 for _, _, s in pairs)
    # A threshold just below 1 finds the same pairs without the help.
    assert {(i, j) for i, j, _ in neighbour_pairs(x, 0.99)} == twins


def _kernel_scores(x: np.ndarray, blas_threshold: int) -> dict[tuple[int, int], float]:
    """Every pair's score as FAISS computes it with ``blas_threshold`` (query components)."""
    before = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = blas_threshold
    try:
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x)
        lims, dists, ids = index.range_search(x, -2.0)
    finally:
        faiss.cvar.distance_compute_blas_threshold = before
    return {(q, int(ids[k])): float(dists[k]) for q in range(len(x))
            for k in range(int(lims[q]), int(lims[q + 1])) if ids[k] > q}


def test_blas_takes_over_from_blas_from_notes() -> None:
    """Scopes under BLAS_FROM notes keep the pairwise loop, larger ones take BLAS, whatever
    the dimensions (before: FAISS counts its threshold in vectors times dimensions, so 20 put
    every scope on BLAS, the slower of the two for a few notes)."""
    rng = np.random.default_rng(8)
    for n, dims in ((5, 512), (BLAS_FROM - 1, 384), (BLAS_FROM, 64), (60, 512)):
        x = _unit(rng.normal(size=(n, dims)))
        loop, blas = _kernel_scores(x, 2**31 - 1), _kernel_scores(x, 1)
        assert loop != blas  # the two kernels round differently: the test can tell them apart
        found = {(i, j): s for i, j, s in neighbour_pairs(x, -1.0)}
        assert found == (loop if n < BLAS_FROM else blas)

"""FAISS inner-product index over one scope's normalised vectors, and range search over it."""

from __future__ import annotations

import math
import os

import faiss
import numpy as np

SMALL_SCOPE = 5000
# Exact search computes inner products with BLAS only from this many query vectors on; faiss
# 1.15 counts its threshold in query components (vectors times dimensions: BLAS when
# nx * d >= distance_compute_blas_threshold) and defaults to 128,000, which sends every
# ordinary scope down the pairwise loop: a 100-note range search took 282 µs against 116 µs
# with BLAS (30 notes: 36 against 27; 1,000 notes about even). Below 20 notes the loop is
# the faster (10 notes, 512 dimensions: 10 µs against 13). Every scope's queries are its own
# vectors, so BLAS from 20 on.
BLAS_FROM = 20


# Two identical vectors have cosine 1, which float32 inner products give as 1 give or take a
# few units in the last place (BLAS one way, the pairwise loop another): at a threshold of 1
# range search dropped about two duplicate pairs in five. Above this threshold identical rows
# are paired by their values, whatever the kernel computed.
NEAR_ONE = 0.999


def _default_threads() -> int:
    return max(1, os.cpu_count() or 1)


def build_index(vectors: np.ndarray, ann_threshold: int = 20000) -> faiss.Index:
    """Exact ``IndexFlatIP`` for ordinary scopes; IVF (approximate) above ``ann_threshold`` rows."""
    n, dim = vectors.shape
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    if n <= ann_threshold:
        index = faiss.IndexFlatIP(dim)
        index.add(x)
        return index
    nlist = max(16, int(4 * math.sqrt(n)))
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    # Training on a deterministic sample keeps the same store → the same clusters.
    rng = np.random.default_rng(0)
    sample = x[rng.choice(n, size=min(n, nlist * 40), replace=False)]
    ivf.cp.seed = 1234
    ivf.train(sample)
    ivf.add(x)
    ivf.nprobe = min(nlist, 16)
    return ivf


def neighbour_pairs(
    vectors: np.ndarray, threshold: float, ann_threshold: int = 20000
) -> list[tuple[int, int, float]]:
    """All unordered pairs (i < j) with cosine ≥ threshold, most similar first, ties by index."""
    n = vectors.shape[0]
    if n < 2 or vectors.shape[1] == 0:
        return []
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    # OpenMP threads cost more than they save on a small scope (measured: 14 ms vs 2 ms for 100
    # notes on 2 busy cores), and scopes already run in parallel across worker processes.
    faiss.omp_set_num_threads(1 if n < SMALL_SCOPE else _default_threads())
    faiss.cvar.distance_compute_blas_threshold = BLAS_FROM * x.shape[1]
    index = build_index(x, ann_threshold)
    # FAISS range search keeps scores strictly greater than the radius.
    lims, dists, ids = index.range_search(x, float(np.nextafter(np.float32(threshold), -1)))
    rows = np.repeat(np.arange(n), np.diff(lims.astype(np.int64)))
    keep = ids > rows
    i, j, s = rows[keep], ids[keep], dists[keep]
    if threshold > NEAR_ONE:
        i, j, s = _with_identical(x, i, j, s)
    order = np.lexsort((j, i, -np.round(s, 6)))
    # tolist gives the same Python ints and floats as int() / float() of each element.
    return list(zip(i[order].tolist(), j[order].tolist(), s[order].tolist(), strict=True))


def _with_identical(x: np.ndarray, i: np.ndarray, j: np.ndarray,
                    s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs (``i``, ``j``, ``s``) and every pair of identical rows they lack, at 1.0. A
    zero row (a text with no words) is like nothing, itself included."""
    _, group = np.unique(x, axis=0, return_inverse=True)
    group = group.reshape(-1)
    alike: dict[int, list[int]] = {}
    for row in np.flatnonzero(np.einsum("ij,ij->i", x, x) > 0.5).tolist():
        alike.setdefault(int(group[row]), []).append(row)
    found = set(zip(i.tolist(), j.tolist(), strict=True))
    extra = [(a, b) for rows in alike.values() if len(rows) > 1
             for k, a in enumerate(rows) for b in rows[k + 1:] if (a, b) not in found]
    if not extra:
        return i, j, s
    ei, ej = (np.asarray(column, dtype=np.int64) for column in zip(*extra, strict=True))
    return (np.concatenate([i, ei]), np.concatenate([j, ej]),
            np.concatenate([s, np.ones(len(extra), dtype=s.dtype)]))

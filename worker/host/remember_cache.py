"""Remember's per-process feature cache: each (scope, type)'s distinct contents by hash, with
their lengths, token ids and vectors, so a write compares against them in one vectorised step."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from worker.app import App


class _Grow:
    """Append-only numpy buffer with amortised doubling (no full copy per append)."""

    def __init__(self, dtype: Any, width: int | None = None) -> None:
        shape = (64,) if width is None else (64, width)
        self.data = np.zeros(shape, dtype=dtype)
        self.n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.data):
            cap = max(need, 2 * len(self.data))
            grown = np.zeros((cap, *self.data.shape[1:]), dtype=self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.data[self.n : need] = values
        self.n = need

    @property
    def view(self) -> np.ndarray:
        return self.data[: self.n]


class _ScopeFeatures:
    """Features of one (scope, type)'s distinct contents, keyed by content hash. Content never
    changes under a hash, so a cached row can be unused (note retired) but never wrong."""

    def __init__(self, dims: int) -> None:
        self.hashes = _Grow(np.uint64, 4)  # sha256 as four 64-bit words
        self.lengths = _Grow(np.int64)
        self.sizes = _Grow(np.int64)
        self.tok_flat = _Grow(np.int64)
        self.tok_owner = _Grow(np.int64)
        self.vectors = _Grow(np.float32, dims) if dims else None
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def n(self) -> int:
        return self.lengths.n

    def add(self, hash_: str, normalised: str, token_ids: np.ndarray,
            vector: np.ndarray | None) -> None:
        r = self.n
        self.hashes.extend(hash_words(hash_))
        self.lengths.extend(np.array([len(normalised)]))
        self.sizes.extend(np.array([len(token_ids)]))
        self.tok_flat.extend(token_ids)
        self.tok_owner.extend(np.full(len(token_ids), r, dtype=np.int64))
        if self.vectors is not None and vector is not None:
            self.vectors.extend(np.asarray(vector, dtype=np.float32)[None, :])
        self._sorted = None

    def rows(self, wanted: np.ndarray) -> np.ndarray:
        """Row of each wanted hash (n × 4 words), or -1 where unknown: a binary search on the
        first word, confirmed on all four (so a prefix collision is a miss, never a wrong row)."""
        if self.n == 0 or len(wanted) == 0:
            return np.full(len(wanted), -1, dtype=np.int64)
        if self._sorted is None:
            order = np.argsort(self.hashes.view[:, 0], kind="stable")
            self._sorted = (self.hashes.view[order, 0], order)
        first, order = self._sorted
        pos = np.minimum(np.searchsorted(first, wanted[:, 0]), len(first) - 1)
        rows = order[pos]
        same = (self.hashes.view[rows] == wanted).all(axis=1)
        return np.where(same, rows, -1)


def hash_words(hex_hashes: str) -> np.ndarray:
    """Concatenated 64-char hex sha256 digests → an (n, 4) uint64 matrix, decoded in C."""
    return np.frombuffer(bytes.fromhex(hex_hashes), dtype=np.uint64).reshape(-1, 4)


def hex_words(words: np.ndarray) -> str:
    return words.astype(np.uint64).tobytes().hex()


class RememberCache:
    def __init__(self, max_scopes: int = 256, max_rows: int = 200_000) -> None:
        self.lock = threading.Lock()
        self.id_key: str | None = None  # the database's note_ids key, read once
        self.vocab: dict[str, int] = {}
        self.scopes: OrderedDict[tuple[str, str, str], _ScopeFeatures] = OrderedDict()
        # Bounded memory: least recently written scopes go first (≈ 2 KB a row with cosine).
        self.max_scopes = max_scopes
        self.max_rows = max_rows

    def token_ids(self, tokens: set[str]) -> np.ndarray:
        vocab = self.vocab
        return np.fromiter((vocab.setdefault(t, len(vocab)) for t in sorted(tokens)),
                           dtype=np.int64, count=len(tokens))

    def features(self, key: tuple[str, str, str], dims: int, live: int) -> _ScopeFeatures:
        feats = self.scopes.get(key)
        if feats is None or feats.n > 4 * max(live, 1024):
            feats = _ScopeFeatures(dims)  # new, or mostly retired contents: start over
            self.scopes[key] = feats
        self.scopes.move_to_end(key)
        while len(self.scopes) > 1 and (
                len(self.scopes) > self.max_scopes
                or sum(f.n for f in self.scopes.values()) > self.max_rows):
            self.scopes.popitem(last=False)
        if len(self.vocab) > 2_000_000:
            self.vocab.clear()  # token ids are re-derived; drop every scope that used the old ones
            self.scopes.clear()
            self.scopes[key] = feats = _ScopeFeatures(dims)
        return feats


_CACHE_LOCK = threading.Lock()


def cache_of(app: App) -> RememberCache:
    """``app``'s cache, made on its first use (an erasure drops it: read again after)."""
    with _CACHE_LOCK:
        if app.remember_cache is None:
            app.remember_cache = RememberCache()
        return app.remember_cache

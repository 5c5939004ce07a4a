"""Deterministic feature-hashing embedder: words, word bigrams and character trigrams; numpy only."""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections.abc import Sequence

import numpy as np

_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """No model, no network: the embedded default. Same text → same vector in every process."""

    def __init__(self, dimensions: int = 512) -> None:
        self.dimensions = dimensions
        self.model_name = f"hashing-v1-{dimensions}"
        # feature string → signed column (+col+1 or -(col+1)); shared across calls in a process.
        self._cache: dict[str, int] = {}
        # word → columns of the word and its character trigrams; words repeat far more than text.
        self._words: dict[str, list[int]] = {}

    def _column(self, feature: str) -> int:
        col = self._cache.get(feature)
        if col is None:
            h = zlib.crc32(feature.encode("utf-8"))
            col = (h % self.dimensions) + 1
            if (h >> 31) & 1:
                col = -col
            if len(self._cache) < 2_000_000:
                self._cache[feature] = col
        return col

    def _word_columns(self, word: str) -> list[int]:
        cols = self._words.get(word)
        if cols is None:
            padded = "#" + word + "#"
            cols = [self._column("w:" + word)]
            cols += [self._column("c:" + padded[i : i + 3]) for i in range(len(padded) - 2)]
            if len(self._words) < 500_000:
                self._words[word] = cols
        return cols

    def _signed_columns(self, text: str) -> list[int]:
        words = _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())
        column = self._column
        word_columns = self._word_columns
        cols = [column("b:" + a + " " + b) for a, b in zip(words, words[1:], strict=False)]
        for w in words:
            cols += word_columns(w)
        return cols

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        n = len(texts)
        out = np.zeros((n, self.dimensions), dtype=np.float32)
        if n == 0:
            return out
        rows: list[int] = []
        cols: list[int] = []
        for i, text in enumerate(texts):
            signed = self._signed_columns(text)
            rows.extend([i] * len(signed))
            cols.extend(signed)
        if cols:
            signed_arr = np.asarray(cols, dtype=np.int64)
            flat = np.asarray(rows, dtype=np.int64) * self.dimensions + (np.abs(signed_arr) - 1)
            weights = np.where(signed_arr > 0, 1.0, -1.0)
            counts = np.bincount(flat, weights=weights, minlength=n * self.dimensions)
            out = counts.reshape(n, self.dimensions).astype(np.float32)
        # Sublinear term frequency keeps one repeated word from dominating a short note.
        out = np.sign(out) * np.log1p(np.abs(out))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        unit: np.ndarray = (out / norms).astype(np.float32)
        return unit

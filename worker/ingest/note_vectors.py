"""The vector of an imported note: one the line gives, checked and normalised, or one the
configured embedder makes for the lines without (embedded before the import holds the store)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from worker.app import App
from worker.ingest.jsonl import InputError

# A float32 unit vector's norm, summed in float64, is 1 within a few float32 ulps.
UNIT_NORM_SLACK = 1e-6


def parse_embedding(embedding: object, number: int, dims: int | None) -> np.ndarray | None:
    """An imported vector, checked and normalised; None when the line has none (re-embedded)."""
    if embedding is None:
        return None
    if not isinstance(embedding, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in embedding
    ):
        raise InputError(f"line {number}: embedding must be an array of numbers")
    if dims is not None and len(embedding) != dims:
        raise InputError(
            f"line {number}: embedding has {len(embedding)} dimensions, the configured "
            f"embedder uses {dims} (DREAM_EMBEDDING_DIMENSIONS); drop the field to re-embed"
        )
    # float64 first: a value beyond float32's range would silently become inf.
    try:
        wide = np.asarray(embedding, dtype=np.float64)
    except OverflowError:  # an integer beyond float range
        wide = np.asarray([math.inf])
    if not np.isfinite(wide).all() or (np.abs(wide) > np.finfo(np.float32).max).any():
        raise InputError(f"line {number}: embedding values must be finite float32 numbers")
    norm = float(np.linalg.norm(wide))
    if norm == 0:
        raise InputError(f"line {number}: embedding is all zeros")
    if abs(norm - 1.0) <= UNIT_NORM_SLACK:  # already unit length (an export): kept bit for bit
        return wide.astype(np.float32)
    return (wide / norm).astype(np.float32)


def check_vectors(app: App, rows: list[dict[str, Any]]) -> list[str]:
    """Vectors given in the file must match what this deployment embeds with: its dimensions
    (else refused), and its model. A vector of another model, or of none named, is set aside
    and the note embedded here like a line without one: one store holds one model's vectors,
    and a host's vectors of the same width but another model (or a stamp of this one on them,
    as before) made every cosine between its notes and the store's own meaningless. Returns
    the warnings (one line, when some were set aside)."""
    expected = app.embedder.dimensions
    model = app.embedder.model_name
    other: list[dict[str, Any]] = []
    for r in rows:
        if r["embedding"] is None:
            continue
        if r["embedding"].shape[0] != expected:
            raise InputError(
                f"note {r['id']}: embedding has {r['embedding'].shape[0]} dimensions, the "
                f"configured embedder uses {expected}; drop the field to re-embed"
            )
        if r["embedding_model"] != model:
            other.append(r)
    for r in other:
        r["embedding"] = r["embedding_model"] = None
    if not other:
        return []
    return [f"{len(other)} notes gave an embedding without embedding_model {model!r} (another "
            f"model's, or no model named): embedded here with {model!r} instead; name the "
            "model in embedding_model to keep a vector it made"]


def embed_missing(app: App, rows: list[dict[str, Any]]) -> None:
    todo = [r for r in rows if r["embedding"] is None]
    if not todo:
        return
    texts = [r["content"] for r in todo]
    vectors = app.embedder.embed(texts)
    for r, v in zip(todo, vectors, strict=True):
        r["embedding"] = v
        r["embedding_model"] = app.embedder.model_name

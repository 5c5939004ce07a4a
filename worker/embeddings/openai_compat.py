"""Embeddings from any OpenAI-compatible endpoint, in batches, through the `openai` client."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import openai


class EmbeddingError(Exception):
    """The embedding endpoint failed or answered with vectors of the wrong shape."""


class OpenAICompatibleEmbedder:
    def __init__(
        self, *, base_url: str | None, api_key: str, model: str, dimensions: int,
        batch_size: int = 256, timeout: float = 30.0,
    ) -> None:
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=2)
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.model_name = f"openai:{model}:{dimensions}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        chunks: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            try:
                resp = self.client.embeddings.create(
                    model=self.model, input=batch, dimensions=self.dimensions
                )
            except openai.OpenAIError as exc:
                raise EmbeddingError(
                    f"embedding endpoint failed ({type(exc).__name__}); check "
                    "DREAM_EMBEDDING_BASE_URL and DREAM_EMBEDDING_MODEL"
                ) from None
            data = sorted(resp.data, key=lambda d: d.index)
            mat = np.asarray([d.embedding for d in data], dtype=np.float32)
            if mat.shape != (len(batch), self.dimensions):
                raise EmbeddingError(
                    f"embedding endpoint returned shape {mat.shape}, expected "
                    f"({len(batch)}, {self.dimensions}); set DREAM_EMBEDDING_DIMENSIONS to match"
                )
            chunks.append(mat)
        if not chunks:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        out = np.vstack(chunks)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

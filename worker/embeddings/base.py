"""The Embedder protocol and the factory that picks one from settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from worker.config import Settings
from worker.errors import ConfigError


class Embedder(Protocol):
    model_name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 matrix, one row per text."""
        ...


def make_embedder(settings: Settings) -> Embedder:
    if settings.embedding_provider == "openai":
        from worker.embeddings.openai_compat import OpenAICompatibleEmbedder

        if not (settings.embedding_base_url or settings.embedding_api_key
                or settings.llm_api_key):  # every note's text to api.openai.com with no key
            raise ConfigError("DREAM_EMBEDDING_PROVIDER=openai needs DREAM_EMBEDDING_BASE_URL "
                              "(an OpenAI-compatible server) or DREAM_EMBEDDING_API_KEY "
                              "(api.openai.com); set one, or DREAM_EMBEDDING_PROVIDER=hashing")

        return OpenAICompatibleEmbedder(
            base_url=settings.embedding_base_url,
            api_key=settings.embedding_api_key or settings.llm_api_key or "unused",
            model=settings.embedding_model,
            dimensions=settings.embedding_dimensions,
            batch_size=settings.embedding_batch_size,
            timeout=settings.llm_timeout,
        )
    from worker.embeddings.hashing import HashingEmbedder

    return HashingEmbedder(settings.embedding_dimensions)

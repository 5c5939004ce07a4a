"""Embeddings from any OpenAI-compatible endpoint, in batches, through the `openai` client."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any

import certifi
import numpy as np
import openai

from worker.errors import ModelFailure
from worker.llm.openai_compat import (
    RequestDeadlineExceeded,
    endpoint_problem,
    run_with_deadline,
)

CLIENT_RETRIES = 2


class EmbeddingError(ModelFailure):
    """The embedding endpoint failed or answered with vectors of the wrong shape."""

    says_no_note_text = True  # exception class names and shapes


class OpenAICompatibleEmbedder:
    def __init__(
        self, *, base_url: str | None, api_key: str, model: str, dimensions: int,
        batch_size: int = 256, timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url
        self._api_key = api_key
        self.timeout = timeout
        # Each batch as a whole (every attempt, headers and body) ends by this deadline: a
        # trickled reply would otherwise reset the per-read timeout forever.
        self.deadline_seconds = timeout * (1 + CLIENT_RETRIES) + 5.0
        self._ssl = ssl.create_default_context(cafile=certifi.where())
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.model_name = f"openai:{model}:{dimensions}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        chunks: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            try:
                resp = run_with_deadline(self._create(batch), self.deadline_seconds)
            except (openai.OpenAIError, RequestDeadlineExceeded) as exc:
                # An HTTP answer names what to fix (a refused key is not a wrong URL); no
                # answer at all (refused connection, deadline) points at the endpoint.
                raise EmbeddingError(
                    endpoint_problem(exc, "embedding", "DREAM_EMBEDDING")
                    or f"embedding endpoint failed ({type(exc).__name__}); check "
                    "DREAM_EMBEDDING_BASE_URL and DREAM_EMBEDDING_MODEL"
                ) from None
            except (AttributeError, TypeError, ValueError):
                resp = None  # the client's own post-processing choked on a non-answer
            if not isinstance(getattr(resp, "data", None), list):
                # An HTTP 200 that is not an embeddings answer (a proxy's HTML page, null).
                raise EmbeddingError("embedding endpoint answered HTTP 200 without embeddings; "
                                     "check DREAM_EMBEDDING_BASE_URL")
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
        unit: np.ndarray = out / norms
        return unit

    async def _create(self, batch: list[str]) -> Any:
        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self._api_key, timeout=self.timeout,
            max_retries=CLIENT_RETRIES,
            http_client=openai.DefaultAsyncHttpxClient(verify=self._ssl, timeout=self.timeout),
        )
        async with client:
            return await client.embeddings.create(
                model=self.model, input=batch, dimensions=self.dimensions)

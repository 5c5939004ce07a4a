"""Embeddings from any OpenAI-compatible endpoint, in batches, through the `openai` client."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any

import certifi
import numpy as np
import openai
import structlog

from worker.errors import ModelFailure
from worker.llm.base import too_long
from worker.llm.openai_compat import (
    RequestDeadlineExceeded,
    endpoint_problem,
    run_with_deadline,
)
from worker.text.plural import counted

log = structlog.get_logger(__name__)

CLIENT_RETRIES = 2
# The shortest text a refused one is clipped to (below, the endpoint's refusal stands).
MIN_CLIPPED = 256
_NOT_NUMBERS = ("embedding endpoint answered vectors holding something other than numbers; "
                "check the server behind DREAM_EMBEDDING_BASE_URL")


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
            chunks.append(self._embed_batch(list(texts[start : start + self.batch_size])))
        if not chunks:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        out = np.vstack(chunks)
        # In float64: a float32 vector near its limit (3.4e38) squares past float32's range.
        norms = np.linalg.norm(out.astype(np.float64), axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        unit: np.ndarray = (out / norms).astype(np.float32)
        return unit

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        """One request's vectors. A request the endpoint refuses as too long (a text past the
        model's input limit, or past its tokens per request) is split in halves, and a text
        alone still refused is embedded by its first half, down to ``MIN_CLIPPED`` characters:
        a refused request is not billed, and a few more requests bound it (about twice the
        halvings of the batch and of the text). Before, one note longer than the model takes
        failed the whole embedding every run: the scope's other notes were embedded (and
        paid for) again by each phase of each run, and its judging phases failed for ever."""
        try:
            resp = run_with_deadline(self._create(batch), self.deadline_seconds)
        except openai.APIStatusError as exc:
            if not too_long(exc) or (len(batch) == 1 and len(batch[0]) <= MIN_CLIPPED):
                raise self._failed(exc) from None
            if len(batch) > 1:
                half = len(batch) // 2
                return np.vstack([self._embed_batch(batch[:half]),
                                  self._embed_batch(batch[half:])])
            log.warning("embedding.clipped", chars=len(batch[0]), to=len(batch[0]) // 2)
            return self._embed_batch([batch[0][: len(batch[0]) // 2]])
        except (openai.OpenAIError, RequestDeadlineExceeded) as exc:
            raise self._failed(exc) from None
        except (AttributeError, TypeError, ValueError):
            resp = None  # the client's own post-processing choked on a non-answer
        if not isinstance(getattr(resp, "data", None), list):
            # An HTTP 200 that is not an embeddings answer (a proxy's HTML page, null).
            raise EmbeddingError("embedding endpoint answered HTTP 200 without embeddings; "
                                 "check DREAM_EMBEDDING_BASE_URL")
        return vectors_of(resp.data, len(batch), self.dimensions)

    @staticmethod
    def _failed(exc: Exception) -> EmbeddingError:
        # An HTTP answer names what to fix (a refused key is not a wrong URL); no answer at all
        # (refused connection, deadline) points at the endpoint.
        return EmbeddingError(
            endpoint_problem(exc, "embedding", "DREAM_EMBEDDING")
            or f"embedding endpoint failed ({type(exc).__name__}); check "
            "DREAM_EMBEDDING_BASE_URL and DREAM_EMBEDDING_MODEL")

    async def _create(self, batch: list[str]) -> Any:
        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self._api_key, timeout=self.timeout,
            max_retries=CLIENT_RETRIES,
            http_client=openai.DefaultAsyncHttpxClient(verify=self._ssl, timeout=self.timeout),
        )
        async with client:
            raw = await client.embeddings.with_raw_response.create(
                model=self.model, input=batch, dimensions=self.dimensions)
            refuse_non_numbers(raw.http_response)
            return raw.parse()


def refuse_non_numbers(answer: Any) -> None:
    """EmbeddingError when an embedding the answer sends as a JSON array holds anything but
    numbers. Checked on the body as sent: the client's parsing makes ``true`` 1.0. A body that
    is no such answer is left to the parsing (and ``vectors_of``)."""
    try:
        data = answer.json().get("data")
        rows = [d.get("embedding") for d in data]
    except (AttributeError, TypeError, ValueError):
        return
    if not all(isinstance(x, int | float) and not isinstance(x, bool)
               for row in rows if isinstance(row, list) for x in row):
        raise EmbeddingError(_NOT_NUMBERS)


def vectors_of(data: list[Any], count: int, dimensions: int) -> np.ndarray:
    """The ``count`` vectors of one answer, in input order; EmbeddingError for any answer that
    is not ``count`` finite vectors of ``dimensions`` numbers, one per index. Before, vectors of
    different lengths or of strings were a raw ValueError (a traceback), and NaN or infinity
    was stored and poisoned every similarity the note took part in."""
    if len(data) != count:
        raise EmbeddingError(f"embedding endpoint answered {counted(len(data), 'vector')} for "
                             f"{counted(count, 'text')}; check the server behind "
                             "DREAM_EMBEDDING_BASE_URL")
    indices = [getattr(d, "index", None) for d in data]
    if sorted(i if type(i) is int else -1 for i in indices) != list(range(count)):
        raise EmbeddingError("embedding endpoint answered duplicate or missing index values "
                             f"(each of 0 to {count - 1} once); check the server behind "
                             "DREAM_EMBEDDING_BASE_URL")
    rows = [getattr(d, "embedding", None) for d in sorted(data, key=lambda d: d.index)]
    widths = sorted({len(r) if isinstance(r, list) else -1 for r in rows})
    if widths[0] < 0:
        raise EmbeddingError("embedding endpoint answered an entry whose embedding is no list "
                             "of numbers; check the server behind DREAM_EMBEDDING_BASE_URL")
    if len(widths) > 1:
        raise EmbeddingError(f"embedding endpoint answered vectors of different lengths ("
                             f"{widths[0]} to {widths[-1]} numbers); check the server behind "
                             "DREAM_EMBEDDING_BASE_URL")
    # Each value by itself: numpy reads [true, 0.5] as [1.0, 0.5] (a boolean among numbers is
    # promoted with them), so the array's type cannot tell.
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool)
                  for row in rows if isinstance(row, list) for x in row)
    try:
        mat = np.asarray(rows) if numbers else np.asarray([], dtype=object)
    except (ValueError, TypeError):
        mat = np.asarray([], dtype=object)
    if mat.ndim != 2 or mat.dtype.kind not in "iuf":
        raise EmbeddingError(_NOT_NUMBERS)
    if mat.shape[1] != dimensions:
        raise EmbeddingError(f"embedding endpoint answered vectors of {mat.shape[1]} numbers, "
                             f"expected {dimensions}; set DREAM_EMBEDDING_DIMENSIONS to match")
    with np.errstate(over="ignore"):  # beyond float32 is infinity, refused below
        vectors = mat.astype(np.float32)
    if not np.isfinite(vectors).all():
        raise EmbeddingError("embedding endpoint answered NaN or infinite values (or numbers "
                             "beyond 3.4e38); check the server behind DREAM_EMBEDDING_BASE_URL")
    return vectors

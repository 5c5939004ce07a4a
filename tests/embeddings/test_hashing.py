"""The built-in hashing embedder: deterministic, normalised, and similarity that means something."""

import numpy as np

from worker.embeddings.hashing import HashingEmbedder


def test_deterministic_across_instances() -> None:
    """Same text → same vector, whatever instance (and process) computes it."""
    a = HashingEmbedder(256).embed(["User prefers Python 3.12"])
    b = HashingEmbedder(256).embed(["User prefers Python 3.12"])
    assert np.array_equal(a, b)


def test_rows_are_unit_length_and_empty_text_is_zero() -> None:
    """Rows are L2-normalised; text without words gives a zero row rather than NaN."""
    v = HashingEmbedder(128).embed(["hello world", "", "!!!"])
    assert np.isclose(np.linalg.norm(v[0]), 1.0)
    assert not np.isnan(v).any()
    assert np.linalg.norm(v[1]) == 0


def test_paraphrase_closer_than_unrelated() -> None:
    """A near-paraphrase scores far above an unrelated sentence."""
    v = HashingEmbedder(512).embed(
        ["User prefers Python for scripting", "The user prefers Python for scripts",
         "The weather in Lisbon is sunny"]
    )
    assert v[0] @ v[1] > 0.5 > v[0] @ v[2]

"""Embedders: the built-in hashing embedder and an OpenAI-compatible one."""

from worker.embeddings.base import Embedder, make_embedder
from worker.embeddings.hashing import HashingEmbedder

__all__ = ["Embedder", "HashingEmbedder", "make_embedder"]

"""Per-scope FAISS indexes, range search, clustering and pairing."""

from worker.similarity.index import build_index, neighbour_pairs

__all__ = ["build_index", "neighbour_pairs"]

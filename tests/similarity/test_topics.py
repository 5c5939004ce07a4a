"""Topics: candidate pairs grouped into connected groups of capped size."""

from __future__ import annotations

from worker.similarity.topics import topics


def test_topics_are_components_split_along_the_weakest_links() -> None:
    """Components become topics; one larger than the cap splits where it is weakest."""
    edges = [("a", "b", 0.9), ("b", "c", 0.8), ("c", "d", 0.3), ("d", "e", 0.85),
             ("x", "y", 0.5)]
    assert topics("abcdexyz", edges, max_size=8) == [["a", "b", "c", "d", "e"], ["x", "y"]]
    assert topics("abcdexyz", edges, max_size=3) == [["a", "b", "c"], ["d", "e"], ["x", "y"]]

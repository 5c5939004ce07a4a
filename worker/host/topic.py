"""Topics in a host's candidate listing, as a dream's own model is asked about them.

Pairs chained by shared notes (one attribute's history: "flies business class", "books
business class", "flies premium economy class once more") are one ``"topic"`` item, as a
dream groups its candidate pairs (``similarity.topics``): judged pair by pair, a host fused
each end of the chain into its own latest statement, and the two survivors, worded apart,
never met again.

A small scope's short notes are one ``"topic"`` item too. A dream's own model is asked about
a small scope whole (``contradictions.whole``): every pair of its short notes is a candidate,
so two statements of one attribute that share no word and no frame still meet. A host's model
gets the same question here, while some pair of them is neither kept apart nor in another
item. It fuses the notes of each attribute (a changed value into the statement said last) and
keeps the rest apart; once every pair of them is kept apart, the topic is no longer listed.
With ``DREAM_CONTRADICTIONS__LARGE_SCOPE_PIECES`` a larger scope's short notes come so too, in
pieces of at most a small scope's size (``topic_pieces``), as a dream's model is asked them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from worker.domain.types import Note
from worker.host.records import note_record
from worker.similarity.topics import topics

SOURCE = "small_scope"
REASON = ("a small scope's short notes, asked about whole as a dream's model is: fuse the notes "
          "that state one attribute (a changed value into the statement said last; never two "
          "of kept_apart) and keep the rest apart")
CHAINED = ("pairs chained by shared notes, asked about together as a dream's model is: fuse the "
           "notes that state one attribute (a changed value into the statement said last) and "
           "keep the rest apart")


def chained(items: list[dict[str, Any]], max_size: int,
            apart: set[frozenset[str]]) -> list[dict[str, Any]]:
    """``items`` (pair items) with each group of at least three notes their pairs chain
    (``similarity.topics``: at most ``max_size`` notes, split along the weakest links) as one
    topic item, where its first pair was; a pair across two groups stays a pair item, and so do
    the pairs of a group holding two notes kept apart (``apart``: never offered together)."""
    edges = [(it["note_ids"][0], it["note_ids"][1], float(it["similarity"])) for it in items]
    groups = [g for g in topics({n for a, b, _ in edges for n in (a, b)}, edges, max(2, max_size))
              if len(g) > 2 and not any(frozenset((a, b)) in apart
                                        for k, a in enumerate(g) for b in g[k + 1:])]
    group_of = {n: k for k, g in enumerate(groups) for n in g}
    members: dict[int, list[dict[str, Any]]] = {}
    out: list[dict[str, Any] | int] = []
    for it in items:
        a, b = it["note_ids"]
        k = group_of.get(a)
        if k is None or group_of.get(b) != k:
            out.append(it)
            continue
        if k not in members:
            out.append(k)  # the group's topic, in its first pair's place
        members.setdefault(k, []).append(it)
    return [_topic(groups[o], members[o]) if isinstance(o, int) else o for o in out]


def _topic(ids: list[str], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    records = {r["id"]: r for p in pairs for r in (p["record_a"], p["record_b"])}
    return {"type": "topic", "note_ids": ids, "records": [records[i] for i in ids],
            "similarity": max(p["similarity"] for p in pairs),
            "sources": sorted({s for p in pairs for s in p["sources"]}),
            "pairs": [{k: p[k] for k in ("note_ids", "similarity", "sources")} for p in pairs],
            "reason": CHAINED}


def topic_item(small: Sequence[str], by_id: dict[str, Note], shown: Iterable[Note],
               apart: set[frozenset[str]], listed: Iterable[Sequence[str]],
               max_notes: int) -> dict[str, Any] | None:
    """The topic over ``small`` (the scope's short notes, when it is small) of the notes a
    host may be ``shown``, or None: when no pair of them is left to judge (each kept apart, or
    judged independent, ``apart``; or in a ``listed`` item already), or when they are more than
    ``max_notes`` (what one fuse or keep-apart may name)."""
    allowed = {n.id for n in shown}
    notes = [by_id[i] for i in small if i in by_id and i in allowed]
    if not 2 <= len(notes) <= max_notes:
        return None
    return _item(notes, _covered(apart, listed), apart)


def topic_pieces(large: Sequence[str], by_id: dict[str, Note], shown: Iterable[Note],
                 apart: set[frozenset[str]], listed: Iterable[Sequence[str]],
                 max_notes: int) -> list[dict[str, Any]]:
    """``LARGE_SCOPE_PIECES``: a larger scope's short notes (``large``) as topic items of at most
    ``max_notes`` notes each, so every pair of them is in one: the notes cut into blocks of half
    that, each two blocks one item, listed while some pair of it is left to judge. What a dream's
    model is asked about such a scope, in the pieces it is asked in."""
    allowed = {n.id for n in shown}
    notes = [by_id[i] for i in large if i in by_id and i in allowed]
    half = max(1, max_notes // 2)
    blocks = [notes[k : k + half] for k in range(0, len(notes), half)]
    if len(blocks) < 2 or max_notes < 2:
        return []
    covered = _covered(apart, listed)
    items = (_item(blocks[i] + blocks[j], covered, apart)
             for i in range(len(blocks)) for j in range(i + 1, len(blocks)))
    return [item for item in items if item is not None]


def _covered(apart: set[frozenset[str]], listed: Iterable[Sequence[str]]) -> set[frozenset[str]]:
    covered = set(apart)
    for ids in listed:
        covered.update(frozenset((a, b)) for k, a in enumerate(ids) for b in ids[k + 1:])
    return covered


def _item(notes: list[Note], covered: set[frozenset[str]],
          apart: set[frozenset[str]]) -> dict[str, Any] | None:
    """One topic item over ``notes``, or None when every pair of them is ``covered``."""
    pairs = [(a, b) for k, a in enumerate(notes) for b in notes[k + 1:]]
    if all(frozenset((a.id, b.id)) in covered for a, b in pairs):
        return None
    # Every note some pair not kept apart joins: the notes the host's answer sorts.
    joined = {n.id for a, b in pairs if frozenset((a.id, b.id)) not in apart for n in (a, b)}
    members = [n for n in notes if n.id in joined]
    return {"type": "topic", "note_ids": [n.id for n in members],
            "records": [note_record(n) for n in members], "similarity": None,
            "sources": [SOURCE], "reason": REASON,
            # Settled: a host or a reviewer kept them apart, or a dream judged them independent.
            "kept_apart": [[a.id, b.id] for k, a in enumerate(members) for b in members[k + 1:]
                           if frozenset((a.id, b.id)) in apart]}

"""A small scope's short notes as one ``"topic"`` item of a host's candidate listing.

A dream's own model is asked about a small scope whole (``contradictions.whole``): every pair
of its short notes is a candidate, so two statements of one attribute that share no word and
no frame still meet. A host's model gets the same question here: the notes of the scope that
some pair, not kept apart and not listed as a pair or an item already, joins. It fuses the
notes of each attribute (a changed value into the statement said last) and keeps the rest
apart; once every pair of them is kept apart, the topic is no longer listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from worker.domain.types import Note
from worker.host.records import note_record

SOURCE = "small_scope"
REASON = ("a small scope's short notes, asked about whole as a dream's model is: fuse the notes "
          "that state one attribute (a changed value into the statement said last) and keep the "
          "rest apart")


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
    covered = set(apart)
    for ids in listed:
        covered.update(frozenset((a, b)) for k, a in enumerate(ids) for b in ids[k + 1:])
    unjudged = [(a, b) for k, a in enumerate(notes) for b in notes[k + 1:]
                if frozenset((a.id, b.id)) not in covered]
    if not unjudged:
        return None
    # Every note some pair joins that is not kept apart: the notes the host's answer sorts.
    joined = {n.id for a, b in unjudged for n in (a, b)} | {
        n.id for k, a in enumerate(notes) for b in notes[k + 1:]
        if frozenset((a.id, b.id)) not in apart for n in (a, b)}
    members = [n for n in notes if n.id in joined]
    return {"type": "topic", "note_ids": [n.id for n in members],
            "records": [note_record(n) for n in members], "similarity": None,
            "sources": [SOURCE], "reason": REASON}

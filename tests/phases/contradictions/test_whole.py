"""A scope asked about whole later in the run (``whole.late_whole``): offered only for a scope
of more than ``SMALL_SCOPE_NOTES`` short notes and at most three times as many, and answering
with pairs only once the rounds have retired enough of them; with ``LARGE_SCOPE_PIECES``, with
every pair of the short notes left (the judge asks them in topics of a small scope's size)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from worker.domain.types import Note, Scope
from worker.phases.contradictions.core import CandidatePair
from worker.phases.contradictions.whole import LATE_FACTOR, late_whole, without
from worker.similarity.candidates import Edge
from worker.similarity.terms import words_of

SCOPE = Scope("agent-1")
LONG = " ".join(["word"] * 41)  # over 40 words: never in a whole-scope topic


@dataclass
class Snap:
    notes: list[Note]
    vectors: Any


def _snap(short: int, long: int = 0) -> tuple[Snap, list[Any]]:
    texts = [f"The user fact number {k} holds" for k in range(short)] + [LONG] * long
    notes = [Note(id=f"n{k:03d}", scope=SCOPE, content=t) for k, t in enumerate(texts)]
    return Snap(notes, np.zeros((len(notes), 4), dtype=np.float32)), words_of(texts)


def _fresh(edges: list[Edge], notes: list[Note]) -> list[CandidatePair]:
    return [CandidatePair(notes[e.i].id, notes[e.j].id, e.similarity, "fp") for e in edges]


def test_offered_only_between_the_limit_and_three_times_it() -> None:
    for short, offered in ((4, False), (5, True), (12, True), (13, False)):
        snap, words = _snap(short, long=3)  # the long notes count for nothing
        notes = snap.notes
        late = late_whole(words, snap, 4, False, lambda e: _fresh(e, notes))  # noqa: B023
        assert (late is not None) == offered, short
    assert LATE_FACTOR == 3


def test_pairs_once_the_short_notes_left_are_few_enough() -> None:
    snap, words = _snap(6, long=1)
    late = late_whole(words, snap, 4, False, lambda e: _fresh(e, snap.notes))
    assert late is not None
    assert late({"n000"}) == []  # five short notes left: still too many
    pairs = late({"n000", "n001"})
    assert sorted(p.ids for p in pairs) == [
        ("n002", "n003"), ("n002", "n004"), ("n002", "n005"), ("n003", "n004"),
        ("n003", "n005"), ("n004", "n005")]  # every pair of the four left; the long note none
    held = without(late, {"n004"})
    assert held is not None
    assert sorted(p.ids for p in held({"n000", "n001"})) == [
        ("n002", "n003"), ("n002", "n005"), ("n003", "n005")]  # an open item's note waits
    assert without(None, {"n004"}) is None


def test_in_pieces_every_pair_of_the_short_notes_left() -> None:
    snap, words = _snap(6, long=1)
    late = late_whole(words, snap, 4, True, lambda e: _fresh(e, snap.notes))
    assert late is not None
    # Five short notes left, more than a small scope's four: every pair of them all the same
    # (without pieces none, until the rounds retire enough: a scope of many distinct facts
    # never would).
    assert sorted(p.ids for p in late({"n000"})) == [
        (f"n{a:03d}", f"n{b:03d}") for a in range(1, 6) for b in range(a + 1, 6)]
    big, big_words = _snap(13)
    assert late_whole(big_words, big, 4, True, lambda e: []) is None  # over three times: never

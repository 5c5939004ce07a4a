"""A scope asked about whole: with a model judge, every pair of a small scope's short notes is
a candidate and one topic holds them, so two statements of one attribute that share no word
meet; a larger scope is asked so later in the run, once its first rounds have shrunk it (or,
with ``LARGE_SCOPE_PIECES``, in topics no larger than a small scope, however many it holds)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.domain.types import Note
from worker.phases.contradictions.apply import reads_like_instructions
from worker.phases.contradictions.core import CandidatePair
from worker.similarity.candidates import Edge, union_edges
from worker.similarity.terms import short_rows, small_scope_pairs

# A scope of up to this many times ``SMALL_SCOPE_NOTES`` short notes is asked about whole after
# its first rounds (``late_whole``); a larger one never is (its pairs grow as its square).
LATE_FACTOR = 3


def small_scope(words: list[Any], notes: list[Note], max_notes: int) -> list[tuple[int, int]]:
    """Every pair of a small scope's short notes but those touching a note that reads like
    instructions: each such pair would be asked alone (R14), one call per note of the scope."""
    whole = small_scope_pairs(words, max_notes)
    rows = {r for pair in whole for r in pair}
    steering = {r for r in rows if reads_like_instructions(notes[r])}
    return [(i, j) for i, j in whole if i not in steering and j not in steering]


def large_rows(words: list[Any], notes: list[Note], max_notes: int) -> list[int]:
    """The rows of a larger scope's short notes (more than ``max_notes``, at most ``LATE_FACTOR``
    times as many) but those that read like instructions, else none: what a host is offered in
    pieces (``LARGE_SCOPE_PIECES``), as a dream's model is asked them (``late_whole``)."""
    short = short_rows(words)
    if not max_notes < len(short) <= LATE_FACTOR * max_notes:
        return []
    return [r for r in short if not reads_like_instructions(notes[r])]


def late_whole(words: list[Any], snap: Any, max_notes: int, pieces: bool,
               fresh: Callable[[list[Edge]], list[CandidatePair]],
               ) -> Callable[[set[str]], list[CandidatePair]] | None:
    """For a scope holding more than ``max_notes`` short notes (at most ``LATE_FACTOR`` times
    as many): given the notes the first rounds retired, every fresh pair (``fresh``: not
    remembered, not kept apart) of the short notes left, when they are now few enough to be
    asked about whole (``small_scope_pairs``), else none: what the scope's next run would ask
    (a long history retires most of its versions at once), asked in this one.

    ``pieces`` (``LARGE_SCOPE_PIECES``): every fresh pair of the short notes left, however many,
    which the judge asks in topics of at most ``max_notes`` notes, round after round, until each
    has been asked or the run's calls are spent. A scope that keeps more distinct facts than a
    small scope holds then has two versions of an attribute worded apart compared ("Alarm set
    for 6:30" / "She gets up around 7:15"), at a cost that grows as the square of its notes
    (calls, and a verdict remembered per pair)."""
    short = short_rows(words)
    if not max_notes < len(short) <= LATE_FACTOR * max_notes:
        return None

    def late(retired: set[str]) -> list[CandidatePair]:
        rows = [r for r in short if snap.notes[r].id not in retired]
        if len(rows) > max_notes and not pieces:
            return []
        found = small_scope([words[r] for r in rows], [snap.notes[r] for r in rows],
                            max(len(rows), max_notes))
        return fresh(union_edges(snap.vectors, [], small_scope=[(rows[i], rows[j])
                                                                 for i, j in found]))
    return late


def without(late: Callable[[set[str]], list[CandidatePair]] | None, held: set[str],
             ) -> Callable[[set[str]], list[CandidatePair]] | None:
    """``late`` leaving out the pairs that touch a note of ``held``."""
    if late is None:
        return None
    return lambda retired: [p for p in late(retired) if not set(p.ids) & held]

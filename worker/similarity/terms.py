"""Words and rare terms of one scope's notes: the lexical signals that join what the hashing
cosine misses. Pure: texts in, row-index pairs out.

``shared_term_pairs``: short notes restating one attribute in other words (contradiction
candidates). ``topical_pairs``: notes of any length on one topic of one subject (consolidation's
second signal for its clusters).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from worker.text.words import STOPWORDS, stem, strip_invisible

_WORD = re.compile(r"[\w']+")


def frame_tokens(text: str) -> list[str]:
    """Stemmed, case-folded words ("requests" = "request"); punctuation and invisible
    characters never split a frame."""
    return list(map(stem, _WORD.findall(strip_invisible(text).casefold())))


# Words that say how often something holds, or that a fact was said again, not what it is
# about: two notes sharing only these ("… every day", "… again") are most often about different
# things. Compared as stems. A named day or date is kept: sharing one is sharing a value.
_NOT_ATTRIBUTES = frozenset(stem(w) for w in (
    "again", "once", "more", "anymore", "back", "already", "ever", "lately", "recently", "later",
    "earlier", "today", "yesterday", "tomorrow", "really", "actually",
    "every", "each", "all", "always", "never", "sometimes", "often", "usually", "rarely",
    "daily", "weekly", "monthly", "yearly", "day", "week", "month", "year", "morning",
    "afternoon", "evening", "night", "weekend", "weekday"))
_NOT_TERMS = _NOT_ATTRIBUTES | frozenset(map(stem, STOPWORDS))


def _content_terms(stems: Iterable[str]) -> set[str]:
    """A note's terms: its stems but numbers, function words and words of frequency."""
    return {w for w in set(stems) - _NOT_TERMS if not w.isdigit()}


def _most_notes(notes: int, max_notes: int) -> int:
    """How many notes a rare term may be in: ``max_notes``, and in a small scope at most half
    of them, or three."""
    return min(max_notes, max(3, notes // 2))


def _shared_counts(
    terms: Sequence[set[str]], most: int, pairable: Sequence[bool] | None = None,
) -> dict[tuple[int, int], int]:
    """Rare terms shared per pair (i < j) of ``pairable`` notes, from posting lists (never all
    pairs). Rarity counts every note."""
    notes_with: dict[str, list[int]] = {}
    for row, found in enumerate(terms):
        for t in found:
            notes_with.setdefault(t, []).append(row)
    shared: dict[tuple[int, int], int] = {}
    for rows in notes_with.values():
        if not 2 <= len(rows) <= most:
            continue
        held = rows if pairable is None else [r for r in rows if pairable[r]]
        for x, i in enumerate(held):
            for j in held[x + 1:]:
                shared[(i, j)] = shared.get((i, j), 0) + 1
    return shared


def _alike(pairs: list[tuple[int, int]], vectors: np.ndarray | None,
           min_similarity: float) -> set[tuple[int, int]]:
    """The pairs whose cosine reaches ``min_similarity`` (all of them without vectors)."""
    if vectors is None or not pairs or vectors.shape[1] == 0:
        return set(pairs)
    ends = np.asarray(pairs)
    alike = np.einsum("ij,ij->i", vectors[ends[:, 0]], vectors[ends[:, 1]]) >= min_similarity
    return {p for p, ok in zip(pairs, alike.tolist(), strict=True) if ok}


@dataclass(frozen=True)
class TermSettings:
    max_words: int = 12  # both notes this short: slot-like facts (longer ones are left to cosine)
    max_notes: int = 8  # a term in more of the scope's notes is too common to name one attribute
    min_share: float = 0.25  # shared rare terms / content terms of the note with fewer


def shared_term_pairs(
    texts: Sequence[str], settings: TermSettings = TermSettings(),
    vectors: np.ndarray | None = None, min_similarity: float = -1.0, *,
    tokens: Sequence[list[str]] | None = None,
) -> set[tuple[int, int]]:
    """Pairs (i < j) of short notes sharing rare content terms: restatements of one attribute
    in other words ("Preferred code editor: Vim" / "The user writes code in Emacs").

    A term is a stemmed word that is not a function word, a number or a word of frequency or
    repetition (``_NOT_ATTRIBUTES``); rare: in two to ``max_notes`` of the scope's notes, and in
    a small scope in at most half of them, or three (counted over every note, so a word the
    scope repeats everywhere, such as its user's name, joins nothing). A pair needs one rare
    term per ``1 / min_share`` content terms of its shorter note. Posting lists, never all
    pairs. With ``vectors`` (rows aligned with ``texts``), a pair also needs cosine
    ``min_similarity``: a shared word with nothing else alike is mostly two attributes meeting
    on a common verb or a weekday. ``tokens``: the texts' ``frame_tokens``, if already made.
    """
    if settings.max_notes < 2:
        return set()
    words = list(tokens if tokens is not None else map(frame_tokens, texts))
    terms = [_content_terms(w) for w in words]
    shared = _shared_counts(terms, _most_notes(len(terms), settings.max_notes),
                            [len(w) <= settings.max_words for w in words])
    pairs = [(i, j) for (i, j), n in shared.items()
             if n >= max(1.0, settings.min_share * min(len(terms[i]), len(terms[j])))]
    return _alike(pairs, vectors, min_similarity)


def topical_pairs(
    texts: Sequence[str], max_notes: int = 8, vectors: np.ndarray | None = None,
    min_similarity: float = -1.0,
) -> set[tuple[int, int]]:
    """Pairs (i < j) of notes of any length on one topic of one subject: they share a rare
    term (rare as ``shared_term_pairs`` counts it: "pottery", "cello"), their cosine reaches
    ``min_similarity``, and they do not name two different subjects.

    One rare term is enough, whatever the notes' length (long notes restating one topic rarely
    share a quarter of their words); the cosine floor drops two notes meeting on one incidental
    word, and whoever groups the pairs should ask more of a group than one link. A subject is a
    name the scope keeps repeating: a term written capitalised wherever it occurs and too common
    to be rare (the two people of a conversation). Two notes that both name subjects must share
    one ("Priya lost her job at the bakery" / "Tomas lost his job at the bakery" are two facts
    about two people); a note naming none may be about either.
    """
    if max_notes < 2 or len(texts) < 2:
        return set()
    words = [_WORD.findall(strip_invisible(t)) for t in texts]
    stems = [list(map(stem, w)) for w in words]
    terms = [_content_terms(s) for s in stems]
    most = _most_notes(len(terms), max_notes)
    subjects = _subjects(words, stems, terms, most)
    pairs = [(i, j) for i, j in _shared_counts(terms, most)
             if not subjects[i] or not subjects[j] or subjects[i] & subjects[j]]
    return _alike(pairs, vectors, min_similarity)


def _subjects(words: Sequence[list[str]], stems: Sequence[list[str]],
              terms: Sequence[set[str]], most: int) -> list[set[str]]:
    """Each note's subjects: its terms that are names the scope repeats (in more than ``most``
    notes, and never written lower case)."""
    notes_with: dict[str, int] = {}
    for found in terms:
        for t in found:
            notes_with[t] = notes_with.get(t, 0) + 1
    common = {t for t, n in notes_with.items() if n > most}
    if not common:
        return [set() for _ in terms]
    lowered = {s for ws, ss in zip(words, stems, strict=True)
               for w, s in zip(ws, ss, strict=True) if not w[:1].isupper()}
    names = common - lowered
    return [found & names for found in terms]

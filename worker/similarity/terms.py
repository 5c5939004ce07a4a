"""Words and rare terms of one scope's notes: the lexical signals that join what the hashing
cosine misses. Pure: texts in, row-index pairs out.

``shared_term_pairs``: short notes restating one attribute in other words (contradiction
candidates). ``topical_pairs``: notes of any length on one topic of one subject (consolidation's
second signal for its clusters). ``NoteWords``: a note's words made once for all of them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from itertools import chain, combinations, compress, filterfalse
from operator import itemgetter, not_
from typing import NamedTuple

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
# Words that only say a fact was said before, as frames are stemmed: "again", "anymore", and
# "more" after "once" or "any".
_AGAIN = frozenset(map(stem, ("again", "anymore")))
_MORE, _ONCE_ANY = stem("more"), frozenset(map(stem, ("once", "any")))


def as_stated(frame: tuple[str, ...]) -> tuple[str, ...]:
    """``frame`` without the words that only say it was said before: "The user always flies
    premium economy class once more" states the frame of "The user always books business
    class" (a value said again after another, while the notes saying it first are retired)."""
    if _AGAIN.isdisjoint(frame) and _MORE not in frame:
        return frame
    out: list[str] = []
    for word in frame:
        if word in _AGAIN:
            continue
        if word == _MORE and out and out[-1] in _ONCE_ANY:
            out.pop()
            continue
        out.append(word)
    return tuple(out)


def _content_terms(stems: Iterable[str]) -> frozenset[str]:
    """A note's terms: its stems but numbers, function words and words of frequency."""
    terms = frozenset(stems).difference(_NOT_TERMS)
    return frozenset(filterfalse(str.isdigit, terms)) if any(map(str.isdigit, terms)) else terms


class NoteWords(NamedTuple):
    """One note's words as every lexical signal reads them: what ``frame_tokens`` makes and
    its content terms (same-frame and shared-term pairs), and the words as written, stemmed:
    their content terms and the stems of those not capitalised (topical pairs, subjects)."""

    frame: tuple[str, ...]
    terms: frozenset[str]
    topical: frozenset[str]
    lowered: frozenset[str]


_FIRST = itemgetter(0)


def note_words(text: str) -> NoteWords:
    """The words of ``text``, tokenised and stemmed once (each step over all words at once)."""
    plain = strip_invisible(text)
    written = _WORD.findall(plain)
    stems = tuple(map(stem, written))
    topical = _content_terms(stems)
    lowered = frozenset(compress(stems, map(not_, map(str.isupper, map(_FIRST, written)))))
    if plain.isascii():
        # Case folding ASCII neither splits nor joins a word, and stem folds case itself: the
        # frame is the words as written, stemmed.
        return NoteWords(stems, topical, topical, lowered)
    frame = tuple(frame_tokens(plain))  # "İ" folds to two characters, one no word character
    return NoteWords(frame, _content_terms(frame), topical, lowered)


def words_of(texts: Sequence[str],
             known: MutableMapping[str, NoteWords] | None = None) -> list[NoteWords]:
    """``note_words`` of each text; with ``known`` (text → its words, as an earlier signal of
    the run made them) only the texts it lacks are read, and added to it."""
    if known is None:
        return list(map(note_words, texts))
    out = []
    for text in texts:
        found = known.get(text)
        if found is None:
            found = known[text] = note_words(text)
        out.append(found)
    return out


def _most_notes(notes: int, max_notes: int) -> int:
    """How many notes a rare term may be in: ``max_notes``, and in a small scope at most half
    of them, or three."""
    return min(max_notes, max(3, notes // 2))


def _rarity(terms: Sequence[frozenset[str]], most: int) -> tuple[set[str], set[str]]:
    """The terms in two to ``most`` of the notes (rare), and those in more (common)."""
    rare: set[str] = set()
    common: set[str] = set()
    for t, n in Counter(chain.from_iterable(terms)).items():
        if n > most:
            common.add(t)
        elif n > 1:
            rare.add(t)
    return rare, common


def _postings(terms: Sequence[frozenset[str]], rare: set[str],
              pairable: Sequence[bool] | None = None) -> dict[str, list[int]]:
    """The rows of the ``pairable`` notes holding each rare term, in row order."""
    notes_with: dict[str, list[int]] = {}
    for row, found in enumerate(terms):
        if pairable is None or pairable[row]:
            for t in found & rare:
                notes_with.setdefault(t, []).append(row)
    return notes_with


def _shared_pairs(terms: Sequence[frozenset[str]], rare: set[str]) -> list[tuple[int, int]]:
    """The pairs (i < j) sharing a rare term, in the order ``_shared_counts`` finds them (its
    keys, without counting: built in C)."""
    posted = _postings(terms, rare).values()
    return list(dict.fromkeys(chain.from_iterable(combinations(rows, 2) for rows in posted)))


def _shared_counts(
    terms: Sequence[frozenset[str]], rare: set[str], pairable: Sequence[bool] | None = None,
) -> dict[tuple[int, int], int]:
    """Rare terms shared per pair (i < j) of ``pairable`` notes, from posting lists of the rare
    terms alone (never all pairs)."""
    notes_with = _postings(terms, rare, pairable)
    shared: dict[tuple[int, int], int] = {}
    for rows in notes_with.values():
        for x, i in enumerate(rows):
            for j in rows[x + 1:]:
                shared[(i, j)] = shared.get((i, j), 0) + 1
    return shared


def _alike(pairs: list[tuple[int, int]], vectors: np.ndarray | None,
           min_similarity: float) -> set[tuple[int, int]]:
    """The pairs whose cosine reaches ``min_similarity`` (all of them without vectors)."""
    if vectors is None or not pairs or vectors.shape[1] == 0:
        return set(pairs)
    ends = np.asarray(pairs)
    alike = np.einsum("ij,ij->i", vectors[ends[:, 0]], vectors[ends[:, 1]]) >= min_similarity
    return set(compress(pairs, alike.tolist()))


@dataclass(frozen=True)
class TermSettings:
    # Both notes this short: one fact each, as written or as an extraction model words it
    # (LoCoMo's observation facts: median 14 words, 99th percentile 25; a fact inside a clause
    # about where it was said, 33-40); longer ones are left to cosine, as frames are (40).
    max_words: int = 40
    max_notes: int = 8  # a term in more of the scope's notes is too common to name one attribute
    min_share: float = 0.25  # shared rare terms / content terms of the note with fewer
    enough: int = 3  # … or this many, whatever the notes' length


def shared_term_pairs(
    texts: Sequence[str], settings: TermSettings = TermSettings(),
    vectors: np.ndarray | None = None, min_similarity: float = -1.0, *,
    words: Sequence[NoteWords] | None = None,
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
    on a common verb or a weekday. ``words``: the texts' ``note_words``, if already made.
    """
    if settings.max_notes < 2:
        return set()
    found = words if words is not None else words_of(texts)
    terms = [w.terms for w in found]
    rare, _ = _rarity(terms, _most_notes(len(terms), settings.max_notes))
    shared = _shared_counts(terms, rare, [len(w.frame) <= settings.max_words for w in found])
    pairs = [(i, j) for (i, j), n in shared.items()
             if n >= max(1.0, min(settings.enough, settings.min_share * min(len(terms[i]),
                                                                           len(terms[j]))))]
    return _alike(pairs, vectors, min_similarity)


def topical_pairs(
    texts: Sequence[str], max_notes: int = 8, vectors: np.ndarray | None = None,
    min_similarity: float = -1.0, *, words: Sequence[NoteWords] | None = None,
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
    about two people); a note naming none may be about either. ``words``: the texts'
    ``note_words``, if already made.
    """
    if max_notes < 2 or len(texts) < 2:
        return set()
    found = words if words is not None else words_of(texts)
    terms = [w.topical for w in found]
    rare, common = _rarity(terms, _most_notes(len(terms), max_notes))
    pairs = _shared_pairs(terms, rare)
    # A name is never written lower case (``any`` stops at the first note writing it so).
    names = {t for t in common if not any(t in w.lowered for w in found)}
    if names:
        subjects = [t & names for t in terms]
        pairs = [(i, j) for i, j in pairs
                 if not subjects[i] or not subjects[j] or subjects[i] & subjects[j]]
    return _alike(pairs, vectors, min_similarity)


def short_rows(words: Sequence[NoteWords], max_words: int = TermSettings.max_words) -> list[int]:
    """The rows of the notes of at most ``max_words`` words: one fact each."""
    return [row for row, w in enumerate(words) if len(w.frame) <= max_words]


def small_scope_pairs(words: Sequence[NoteWords], max_notes: int,
                      max_words: int = TermSettings.max_words) -> list[tuple[int, int]]:
    """Every pair (i < j) of the short notes (slot-like facts of at most ``max_words`` words)
    when the scope holds two to ``max_notes`` of them, else none: a small scope is asked about
    whole, so two statements of one attribute sharing no word ("Deployments go out on
    Tuesdays" / "The team ships releases on Thursdays") still meet."""
    short = short_rows(words, max_words)
    if not 2 <= len(short) <= max_notes:
        return []
    return [(i, j) for x, i in enumerate(short) for j in short[x + 1:]]

"""Is a fused text faithful to its sources (R13)? One check for the consolidate phase and the
host API: whole tokens, every content word grounded, negations kept, relations not turned
round, facts not dropped."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress
from operator import attrgetter

from worker.text.direction import Pair, reversals, stated_pairs
from worker.text.temporal import relative_time_expressions
from worker.text.words import Kind, Token, tokens

# A source whose content words are mostly missing from the fusion was dropped, not merged.
DROPPED_BELOW = 0.5
# A source's negated fact counts as restated positively when a fused clause, outside any
# negation, has at least this share of its words ("does not drink coffee after 2pm" →
# "drinks coffee"); a lower share would flag "uses macOS, not Windows" against "does not use
# Windows".
FLIP_SHARE = 2 / 3
_LETTERS = re.compile(r"[^\W\d_]+")
_LINKS = frozenset((Kind.URL, Kind.EMAIL))
_KEY, _KIND = attrgetter("key"), attrgetter("kind")
_CONTENT, _NEGATOR = attrgetter("content"), attrgetter("negator")


@dataclass(frozen=True)
class Clause:
    """Content tokens of one clause, split by whether a negator scopes them."""

    positive: tuple[Token, ...]
    negated: tuple[Token, ...]
    negators: tuple[str, ...]


@dataclass(frozen=True)
class Grounding:
    """What a fused text gets wrong about its sources; empty everywhere means faithful."""

    invented: tuple[str, ...]  # content tokens no source states (surface forms, in order)
    negation_flips: tuple[str, ...]  # "never drinks green tea": polarity no source has
    omitted: tuple[str, ...]  # source phrases missing from the fusion ("session store")
    dropped: tuple[int, ...]  # indices of sources whose content is mostly missing
    relative_time: tuple[str, ...]  # relative time expressions left in the fusion
    # "anna reports to bob" from "Bob reports to Anna": a relation turned round (direction.py)
    reversed: tuple[str, ...] = ()

    @property
    def grounded(self) -> bool:
        return not self.invented and not self.negation_flips and not self.reversed


def clauses(toks: Sequence[Token]) -> list[Clause]:
    """Clauses split at punctuation and clause conjunctions; a negator scopes the rest of its
    clause ("User never drinks coffee" negates drink and coffee, not user)."""
    out: list[Clause] = []
    positive: list[Token] = []
    negated: list[Token] = []
    negators: list[str] = []

    def close() -> None:
        if positive or negated:
            out.append(Clause(tuple(positive), tuple(negated), tuple(negators)))
        positive.clear()
        negated.clear()
        negators.clear()

    for t in toks:
        if t.kind is Kind.BREAK:
            close()
            continue
        if t.content:
            # A polarity verb ("stopped") is stated in its own polarity; it negates what follows.
            (negated if negators and not t.negator else positive).append(t)
        if t.negator:
            negators.append(t.surface)
    close()
    return out


def check_fusion(
    sources: Sequence[str], fused: str, *, allowed: Iterable[str] = ()
) -> Grounding:
    """Compare ``fused`` with ``sources``: invented facts, negation flips, reversed relations,
    omissions, dropped sources and relative time left in. ``allowed`` are extra tokens a fusion
    may add (dates a source's "last week" resolves to); it is iterated only when the fusion has
    a content token no source holds, so it may be a lazy iterable."""
    readings = [read_source(s) for s in sources]
    fused_tokens = tokens(fused)
    fused_keys = set(map(_KEY, fused_tokens))
    fused_keys.discard("")  # a break's key: every other token's key has a character
    # Each source's facts the fusion lacks: its omitted phrases and whether it was dropped.
    missing = [r.facts - fused_keys for r in readings]
    return Grounding(
        invented=_invented(readings, fused_tokens, allowed),
        negation_flips=tuple(_negation_flips(readings, fused_tokens)),
        omitted=tuple(_omitted(readings, missing)),
        dropped=tuple(i for i, (r, gone) in enumerate(zip(readings, missing, strict=True))
                      if _dropped(r.facts, gone)),
        relative_time=tuple(relative_time_expressions(fused)),
        reversed=tuple(reversals(lambda: _stated(readings), fused_tokens)),
    )


class SourceReading:
    """What one source text contributes to every check of a fusion of it, read once: the same
    sources are checked against every reply and re-ask of their cluster."""

    __slots__ = ("_pairs", "facts", "groundable", "negated", "negated_facts", "toks")

    def __init__(self, text: str) -> None:
        toks = self.toks = tokens(text)  # a fresh list, never changed
        keys = list(map(_KEY, toks))
        # Its tokens' keys (only a break's key is empty), and a word written inside its URL or
        # address ("python.org").
        groundable = set(keys)
        groundable.discard("")
        if not _LINKS.isdisjoint(map(_KIND, toks)):
            groundable |= {w.casefold() for t in toks if t.kind in _LINKS
                           for w in _LETTERS.findall(t.key)}
        self.groundable = frozenset(groundable)
        self.facts = frozenset(compress(keys, map(_CONTENT, toks)))
        # Its negated facts: the keys a negator scopes, and per clause the words a fused clause
        # must state positively to flip it, with the phrase a re-ask names. No negator, none.
        cl = clauses(toks) if any(map(_NEGATOR, toks)) else []
        self.negated = frozenset(t.key for c in cl for t in c.negated)
        self.negated_facts = tuple(
            (fact, math.ceil(FLIP_SHARE * len(fact)),
             " ".join((*c.negators[:1], *(t.surface for t in c.negated))))
            for c in cl if (fact := frozenset(t.key for t in c.negated)))
        self._pairs: frozenset[Pair] | None = None

    def pairs(self) -> frozenset[Pair]:
        """The relations it orders; read on demand (only a fusion that orders one needs them)."""
        if self._pairs is None:
            self._pairs = stated_pairs(self.toks)
        return self._pairs


# Sources come back with every reply and re-ask of a cluster, and to the host's check: a
# bounded memo keyed by the text alone (the same bound as the token memo it reads from).
@lru_cache(maxsize=1 << 11)
def read_source(text: str) -> SourceReading:
    return SourceReading(text)


def _stated(readings: list[SourceReading]) -> set[Pair]:
    return {pair for r in readings for pair in r.pairs()}


def _invented(readings: list[SourceReading], fused_tokens: list[Token],
              allowed: Iterable[str]) -> tuple[str, ...]:
    groundable = frozenset().union(*(r.groundable for r in readings))
    unknown = [t for t in fused_tokens if t.content and t.key not in groundable]
    if unknown:  # only then the allowed dates: most fusions add no word of their own
        extra = {t.key for a in allowed for t in tokens(a)}
        unknown = [t for t in unknown if t.key not in extra]
    return tuple(dict.fromkeys(t.surface for t in unknown))


def _negation_flips(readings: list[SourceReading], fused_tokens: list[Token]) -> list[str]:
    source_facts = [f for r in readings for f in r.negated_facts]
    fused_negates = any(map(_NEGATOR, fused_tokens))
    if not source_facts and not fused_negates:  # no negation on either side: nothing flips
        return []
    fused_clauses = clauses(fused_tokens)
    flips: list[str] = []
    # A negation the fusion adds: every word it negates must be negated by some source.
    if fused_negates:
        negated_in_sources = frozenset().union(*(r.negated for r in readings))
        for c in fused_clauses:
            added = [t for t in c.negated if t.key not in negated_in_sources]
            if added:
                flips.append(" ".join((*c.negators[:1], *(t.surface for t in c.negated))))
    # A negation the fusion drops: a fused clause states most of a source's negated fact
    # outside any negation.
    positives = [{t.key for t in c.positive} for c in fused_clauses]
    for fact, need, phrase in source_facts:
        if any(len(fact & keys) >= need for keys in positives):
            flips.append(phrase)
    return list(dict.fromkeys(flips))


def _omitted(readings: list[SourceReading], missing: list[frozenset[str]]) -> list[str]:
    """Runs of adjacent source content tokens the fusion lacks, as phrases ("session store")."""
    phrases: list[str] = []
    for r, gone in zip(readings, missing, strict=True):
        if not gone:  # every fact of it is in the fusion: no run to find
            continue
        run: list[str] = []
        for t in [*r.toks, None]:
            if t is not None and t.content and t.key in gone:
                run.append(t.surface)
                continue
            if run:
                phrases.append(" ".join(run))
                run = []
    # "last week" resolved to a date is converted, not lost (the date itself is grounded).
    return [p for p in dict.fromkeys(phrases) if relative_time_expressions(p) != [p]]


def _dropped(facts: frozenset[str], missing: frozenset[str]) -> bool:
    return bool(facts) and (len(facts) - len(missing)) / len(facts) < DROPPED_BELOW

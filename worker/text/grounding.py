"""Is a fused text faithful to its sources (R13)? One check for the consolidate phase and the
host API: whole tokens, every content word grounded, negations kept, relations not turned
round, facts not dropped."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from worker.text.direction import reversals
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
    omissions, dropped sources and relative time left in. ``allowed`` are extra tokens a fusion may add (dates a
    source's "last week" resolves to)."""
    source_tokens = [tokens(s) for s in sources]
    fused_tokens = tokens(fused)
    groundable = {t.key for toks in source_tokens for t in toks if t.kind is not Kind.BREAK}
    groundable |= {t.key for a in allowed for t in tokens(a)}
    # A word written inside a source's URL or address is in the source too ("python.org").
    groundable |= {w.casefold() for toks in source_tokens for t in toks
                   if t.kind in (Kind.URL, Kind.EMAIL) for w in _LETTERS.findall(t.key)}
    invented = [t.surface for t in fused_tokens if t.content and t.key not in groundable]

    fused_keys = {t.key for t in fused_tokens if t.kind is not Kind.BREAK}
    return Grounding(
        invented=tuple(dict.fromkeys(invented)),
        negation_flips=tuple(_negation_flips(source_tokens, fused_tokens)),
        omitted=tuple(_omitted(source_tokens, fused_keys)),
        dropped=tuple(i for i, toks in enumerate(source_tokens) if _dropped(toks, fused_keys)),
        relative_time=tuple(relative_time_expressions(fused)),
        reversed=tuple(reversals(source_tokens, fused_tokens)),
    )


def _negation_flips(source_tokens: list[list[Token]], fused_tokens: list[Token]) -> list[str]:
    source_clauses = [c for toks in source_tokens for c in clauses(toks)]
    fused_clauses = clauses(fused_tokens)
    negated_in_sources = {t.key for c in source_clauses for t in c.negated}
    flips: list[str] = []
    # A negation the fusion adds: every word it negates must be negated by some source.
    for c in fused_clauses:
        added = [t for t in c.negated if t.key not in negated_in_sources]
        if added:
            flips.append(" ".join((*c.negators[:1], *(t.surface for t in c.negated))))
    # A negation the fusion drops: a fused clause states most of a source's negated fact
    # outside any negation.
    for src in source_clauses:
        fact = {t.key for t in src.negated}
        if not fact:
            continue
        need = math.ceil(FLIP_SHARE * len(fact))
        if any(len(fact & {t.key for t in c.positive}) >= need for c in fused_clauses):
            flips.append(" ".join((*src.negators[:1], *(t.surface for t in src.negated))))
    return list(dict.fromkeys(flips))


def _omitted(source_tokens: list[list[Token]], fused_keys: set[str]) -> list[str]:
    """Runs of adjacent source content tokens the fusion lacks, as phrases ("session store")."""
    phrases: list[str] = []
    for toks in source_tokens:
        run: list[str] = []
        for t in [*toks, None]:
            if t is not None and t.content and t.key not in fused_keys:
                run.append(t.surface)
                continue
            if run:
                phrases.append(" ".join(run))
                run = []
    # "last week" resolved to a date is converted, not lost (the date itself is grounded).
    return [p for p in dict.fromkeys(phrases) if relative_time_expressions(p) != [p]]


def _dropped(toks: list[Token], fused_keys: set[str]) -> bool:
    facts = {t.key for t in toks if t.content}
    return bool(facts) and len(facts & fused_keys) / len(facts) < DROPPED_BELOW

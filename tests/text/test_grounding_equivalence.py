"""The grounding check's fast paths against the plain reading they replaced: the same tokens for
ASCII text, the same relative time, and the same verdicts from ``check_fusion`` with its
per-source memo as from reading every source again on every check."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.domain.types import Note, Scope
from worker.text.direction import relation_pairs
from worker.text.grounding import (
    DROPPED_BELOW,
    FLIP_SHARE,
    Grounding,
    check_fusion,
    clauses,
    read_source,
)
from worker.text.temporal import allowed_dates, allowed_dates_lazily, relative_time_expressions
from worker.text.words import Kind, Token, tokens

# Text that takes the general path: a non-ASCII word, then a break that no token of the text
# after it can join ("\n" ends every pattern's match and starts none of the text's).
_GENERAL = "é.\n"


def _reference(sources: Sequence[str], fused: str, allowed: Iterable[str] = ()) -> Grounding:
    """``check_fusion`` as it was before the memo: every source read again on every check."""
    source_tokens = [tokens(s) for s in sources]
    fused_tokens = tokens(fused)
    groundable = {t.key for toks in source_tokens for t in toks if t.kind is not Kind.BREAK}
    groundable |= {t.key for a in allowed for t in tokens(a)}
    groundable |= {w.casefold() for toks in source_tokens for t in toks
                   if t.kind in (Kind.URL, Kind.EMAIL) for w in re.findall(r"[^\W\d_]+", t.key)}
    invented = [t.surface for t in fused_tokens if t.content and t.key not in groundable]
    fused_keys = {t.key for t in fused_tokens if t.kind is not Kind.BREAK}
    return Grounding(
        invented=tuple(dict.fromkeys(invented)),
        negation_flips=tuple(_flips(source_tokens, fused_tokens)),
        omitted=tuple(_omitted(source_tokens, fused_keys)),
        dropped=tuple(i for i, toks in enumerate(source_tokens)
                      if (facts := {t.key for t in toks if t.content})
                      and len(facts & fused_keys) / len(facts) < DROPPED_BELOW),
        relative_time=tuple(relative_time_expressions(fused)),
        reversed=tuple(_reversals(source_tokens, fused_tokens)),
    )


def _flips(source_tokens: list[list[Token]], fused_tokens: list[Token]) -> list[str]:
    source_clauses = [c for toks in source_tokens for c in clauses(toks)]
    fused_clauses = clauses(fused_tokens)
    negated_in_sources = {t.key for c in source_clauses for t in c.negated}
    flips = [" ".join((*c.negators[:1], *(t.surface for t in c.negated))) for c in fused_clauses
             if [t for t in c.negated if t.key not in negated_in_sources]]
    for src in source_clauses:
        fact = {t.key for t in src.negated}
        need = math.ceil(FLIP_SHARE * len(fact))
        if fact and any(len(fact & {t.key for t in c.positive}) >= need for c in fused_clauses):
            flips.append(" ".join((*src.negators[:1], *(t.surface for t in src.negated))))
    return list(dict.fromkeys(flips))


def _omitted(source_tokens: list[list[Token]], fused_keys: set[str]) -> list[str]:
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
    return [p for p in dict.fromkeys(phrases) if relative_time_expressions(p) != [p]]


def _reversals(source_tokens: list[list[Token]], fused_tokens: list[Token]) -> list[str]:
    stated = {pair for toks in source_tokens for pair, *_ in relation_pairs(toks)}
    found: dict[int, tuple[int, int]] = {}
    for (relation, a, b), i, m, j in relation_pairs(fused_tokens):
        if (relation, b, a) in stated and (relation, a, b) not in stated:
            first, last = found.get(m, (i, j))
            found[m] = (min(first, i), max(last, j))
    return list(dict.fromkeys(
        " ".join(t.surface for t in fused_tokens[i:j + 1]) for i, j in found.values()))


_ASCII_PIECES = ["User", "PREFERS", "dark", "mode", "never", "not", "don't", "Bob's", "tea",
                 "twenty", "five", "hundred", "3.12", "-18", "1,000", "2pm", "5KG", "2026-05-04",
                 "https://Ex.org/a.", "WWW.ex.org", "a@Ex.org", "@", "://", ",", ".", ";", " - ",
                 "(", ")", "\n", "\t", "\x00", "'", "yesterday", "Last Week", "3 days ago",
                 "Friday", "every Monday", "May 8", "in two weeks", "and", "but", "to", "over",
                 "than", "before", "after", "from", "replaced by", "married to", "stopped"]


@settings(max_examples=400)
@given(st.lists(st.sampled_from(_ASCII_PIECES) | st.text(st.characters(max_codepoint=127)),
                max_size=12).map(" ".join))
def test_ascii_text_reads_as_the_general_path_reads_it(text: str) -> None:
    """ASCII text is lowered once and matched without the link patterns when it holds no "@",
    "://" or "www."; that gives exactly the general path's tokens, and the relative-time word
    filter exactly the patterns' matches."""
    assert tokens(_GENERAL + text)[3:] == tokens(text)
    assert relative_time_expressions(_GENERAL + text) == relative_time_expressions(text)


_WORDS = [*_ASCII_PIECES, "Café", "naïve", "–", "−18", "Kelvin", "ſtop", "coffee", "alice",
          "bob", "green", "does", "drink", "session", "store", "Postgres", "nor", "neither"]
_SOURCE = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=10).map(" ".join)


@settings(max_examples=400)
@given(st.lists(_SOURCE, min_size=1, max_size=4), _SOURCE, st.booleans())
def test_check_fusion_gives_the_verdicts_of_a_fresh_reading(
        sources: list[str], extra: str, hinted: bool) -> None:
    """Against any sources, a fusion (one source, all joined, or with words of its own) gets
    the warnings and rejections a fresh reading of every source gives, the first time and
    again from the memo; allowed dates read lazily change nothing."""
    written = datetime(2026, 5, 4, tzinfo=UTC)
    notes = [Note(id=str(k), scope=Scope("a"), created_at=written,
                  content=s + (" last week" if hinted else "")) for k, s in enumerate(sources)]
    texts = [n.content for n in notes]
    for fused in (texts[0], " ; ".join(texts), f"{texts[-1]} {extra} 2026-04-30"):
        expected = _reference(texts, fused, allowed_dates(notes))
        assert check_fusion(texts, fused, allowed=allowed_dates(notes)) == expected
        assert check_fusion(texts, fused, allowed=allowed_dates_lazily(notes)) == expected


def test_a_source_is_read_once_and_its_reading_serves_every_fusion() -> None:
    """The memo hands back the same reading for the same text, and a reading first built for
    one fusion gives a later, different fusion the fresh reading's verdicts."""
    sources = ["Bob never reports to Anna", "Anna leads the billing team at https://ex.org"]
    assert read_source(sources[0]) is read_source(sources[0])
    for fused in ["Anna reports to Bob", "Bob reports to Anna; Anna leads ex billing",
                  "Anna leads the billing team", "Bob never reports to Anna yesterday"]:
        assert check_fusion(sources, fused) == _reference(sources, fused)

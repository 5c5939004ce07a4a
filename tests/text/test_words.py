"""Whole-token reading: the memos of texts and words return what reading afresh returns, and the
number-phrase shortcut folds exactly the phrases a search at every token would."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.text import words
from worker.text.words import Token, tokens

# Case, compatibility forms (NFKC), invisible characters, curly apostrophes, number words,
# clause words, URLs and addresses: everything the reading folds or treats apart.
_PIECES = ["User", "USER", "user's", "User’s", "don't", "DON’T", "ﬁle", "file", "Straße",
           "STRASSE", "café", "cafe\u0301", "zero\u200bwidth", "twenty", "five", "Hundred",
           "thousand", "and", "but", "never", "stopped", "3.12", "1,000", "2pm", "one", "nine",
           "https://Ex.org/A/", "A@Ex.org", ",", ".", " - ", "(", "\n", "x"]


def _fold_at_every_token(raw: list[Token]) -> Iterator[Token]:
    """The number fold without its shortcut: a phrase is tried at every token."""
    k = 0
    while k < len(raw):
        j, value = words._number_phrase(raw, k)
        if j == k:
            yield raw[k]
            k += 1
            continue
        yield Token(words.Kind.NUMBER, " ".join(t.surface for t in raw[k:j]), str(value),
                    content=True)
        k = j


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=14).map(" ".join), min_size=1,
                max_size=6))
def test_memoised_reading_equals_reading_afresh(texts: list[str]) -> None:
    """Tokens from the memo (texts read twice, words seen before) equal a fresh reading, and
    the number fold finds the phrases a search at every token finds."""
    for text in [*texts, *texts]:
        raw = list(words._raw_tokens(words._normal(text)))
        assert tokens(text) == list(_fold_at_every_token(raw))
        assert tokens(text) == list(words._tokens.__wrapped__(text))
    for piece in _PIECES:
        word = piece.casefold()
        assert words._word(word) == words._word.__wrapped__(word)


def test_a_caller_cannot_change_the_memo() -> None:
    """tokens returns a fresh list each time: changing one leaves the next reading whole."""
    first = tokens("User drinks twenty five coffees")
    first.clear()
    assert [t.key for t in tokens("User drinks twenty five coffees") if t.content] == [
        "drink", "25", "coffe"]

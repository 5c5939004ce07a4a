"""Whole-token reading: the memos of texts and words return what reading afresh returns, and the
number-phrase shortcut folds exactly the phrases a search at every token would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
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


@pytest.mark.parametrize(
    ("text", "blank"),
    [
        # Nothing anyone can read: refused as a note by import, remember and fuse.
        ("", True),
        (" \t\n\u3000\u00a0", True),  # whitespace of every kind
        ("\u200b\u200d\u2060\ufeff", True),  # zero-width space, joiner, word joiner, BOM
        ("\u3164\u3164", True),  # Hangul filler: the classic "blank name" (before: accepted)
        ("\uffa0 \u115f\u1160", True),  # the halfwidth, choseong and jungseong fillers
        ("\u2800\u2800\u2800", True),  # blank braille cells (before: accepted)
        ("\ufe0f\U000e0100\u034f", True),  # variation selectors, the grapheme joiner alone
        ("\u17b4\u180b\U0001d173\U0001bca0", True),  # Khmer, Mongolian, music, shorthand
        # Text in any script, emoji alone, combining marks: something to read.
        ("用户喜欢绿茶", False),
        ("\u061cيفضل المستخدم الشاي الأخضر", False),  # Arabic letter mark in front
        ("کتاب\u200cها", False),  # Persian, a zero-width non-joiner inside a word
        ("사용자는 녹차를 좋아한다", False),
        ("\u115f\u1161", False),  # a filler with the vowel it carries (old Hangul)
        ("👍", False),
        ("❤\ufe0f", False),  # an emoji with its presentation selector
        ("👩\u200d💻", False),  # a ZWJ sequence
        ("1\ufe0f\u20e3", False),  # a keycap
        ("🇫🇷", False),
        ("cafe\u0301", False),  # a decomposed accent
        ("हिन्दी", False),
        ("\u0301", False),  # a combining mark alone still shows (on a dotted circle)
        ("\u2800x", False),
    ],
)
def test_is_blank_means_nothing_visible(text: str, blank: bool) -> None:
    """Blank is whitespace, invisible formatting and the characters that show nothing on their
    own (fillers, selectors, the blank braille cell); a letter, digit, emoji or mark is text."""
    assert words.is_blank(text) is blank

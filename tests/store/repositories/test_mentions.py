"""Which records quote an erased note (``Mentions``): a longer text, or one holding a digit or an
@, or a name of capitalised words, wherever it recurs as words; a text of one or two words
only where it stands alone, never a record that shares a word."""

from __future__ import annotations

from typing import Any

import pytest

from worker.store.repositories.mentions import Mentions


@pytest.mark.parametrize("text, record, quoted", [
    # A one-word note: a record quoting it as a whole value, or set off by quotation marks,
    # brackets or a line break, quotes it ...
    ("tea", "tea", True),
    ("tea", {"content": "tea"}, True),
    ("tea", {"reason": 'z repeats "tea".'}, True),
    ("tea", "the note 'tea' again", True),
    ("tea", "notes:\ntea\nmilk", True),
    ("tea", "(tea)", True),
    ("tea", ["coffee", "tea"], True),
    # ... a record that merely uses the word does not (before: all of these were scrubbed).
    ("tea", "likes tea", False),
    ("tea", "tea and coffee", False),
    ("tea", {"content": "Drinks coffee, likes tea"}, False),
    ("tea", "asked about tea.", False),
    # Never inside another word.
    ("tea", "steady team", False),
    # Two words are still words unrelated records share.
    ("green tea", "User likes green tea daily", False),
    ("green tea", {"content": "green tea"}, True),
    # Three words and more recur word for word only when quoted, with or without marks.
    ("likes green tea", "The user likes green tea daily", True),
    ("likes green tea", "He dislikes green teapots", False),
    # A short note holding a digit or an @ is an identifier, not words records share: a phone
    # number, an e-mail address, a code is quoted wherever it recurs as words (before: a model's
    # reason or a comment repeating it in a sentence kept it after the erasure) ...
    ("555-0199", {"reason": "the number 555-0199 is outdated"}, True),
    ("ana@example.com", "wrote to ana@example.com twice", True),
    ("locker 4417", "asked for locker 4417 again", True),
    # ... and still never inside a longer number or word.
    ("555-0199", "call 555-01990", False),
    ("4417", "locker 44170", False),
    # A name of two or more words, each capitalised, is quoted wherever it recurs as words
    # (before: "John Smith" erased, a reason "merged John Smith's notes" kept it) ...
    ("John Smith", {"reason": "merged John Smith's notes"}, True),
    ("Acme Corp", "the Acme Corp account", True),
    # ... a one-word capitalised note is no name we can tell from a sentence's first word,
    # and two words not all capitalised are still words records share.
    ("Tea", "Tea with milk", False),
    ("Green tea", "Green tea daily", False),
    ("John Smith", "Johnny Smithers", False),
])
def test_what_quotes_an_erased_note(text: str, record: Any, quoted: bool) -> None:
    """One row per kind of record: quoted or not."""
    assert Mentions(["n-erased"], [text]).mentions(record) is quoted


def test_a_record_quoting_a_one_word_note_is_scrubbed_field_by_field() -> None:
    """The field quoting the note goes; the field that only uses the word stays."""
    erased = Mentions(["n-erased"], ["tea"])
    assert erased.scrub({"quote": 'said "tea"', "comments": "likes tea"}) == {
        "quote": "[erased]", "comments": "likes tea"}


@pytest.mark.parametrize("record, kept", [
    # A line naming the erased note keeps what happened and loses why: a judge's reason
    # retells the note in its own words, which no quote of its text matches.
    ("[Contradiction resolved: superseded by n-erased. the user moved to Berlin]",
     "[Contradiction resolved: superseded by [erased note]]"),
    ("Consolidated into n-erased: one note adds the Berlin address",
     "Consolidated into [erased note]"),
    # Other lines of the comment stay as they were.
    ("imported by ana\n[Contradiction flagged for review: conflicts with n-erased. Berlin]",
     "imported by ana\n[Contradiction flagged for review: conflicts with [erased note]]"),
    ("[Contradiction check: superseded by n-erased]",
     "[Contradiction check: superseded by [erased note]]"),
    # An id that only contains the erased one is another note's.
    ("Consolidated into n-erased2: the Berlin note", "Consolidated into n-erased2: the Berlin note"),
])
def test_a_line_naming_an_erased_note_loses_its_reason(record: str, kept: str) -> None:
    """``unsay``, as ``scrub`` applies it to each string of a log image."""
    erased = Mentions(["n-erased"], ["User lives in Berlin"])
    assert erased.unsay(record) == kept
    assert erased.scrub({"comments": record}) == {"comments": kept}

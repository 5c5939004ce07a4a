"""What every shell takes as an id or as text someone reads (worker.domain.limits)."""

from __future__ import annotations

import pytest

from worker.domain.limits import ident_problem, json_text_problem, line_problem, visible_problem

NOTHING = "has no visible text"


@pytest.mark.parametrize(("value", "problem"), [
    ("agent-1", None),  # printable ASCII: the common id, no scan
    ("søren", None),  # visible non-ASCII
    # before: accepted, ids that print like another id ("x", "alice") or reversed
    ("\u3164x", "has an invisible character"),  # a Hangul filler
    ("alice\u200b", "has an invisible character"),  # a zero-width space
    ("ali\u200dce", "has an invisible character"),  # a zero-width joiner
    ("bob\u202eyz", "has an invisible character"),  # a bidi override: prints "bobzy"
    ("x\ufe0f", "has an invisible character"),  # a variation selector
    ("alice ", "starts or ends with whitespace"),
    ("\u00a0alice", "starts or ends with whitespace"),  # a no-break space
    ("ali ce", None),  # a space inside shows
    ("Jos\u00e9", None),  # NFC: one accented letter
    ("Jose\u0301", "is not in Unicode normal form C"),  # prints as "José" too
    ("\u212b", "is not in Unicode normal form C"),  # the angstrom sign, NFC "\u00c5"
    ("", "must be a non-empty string"),
    ("  ", "must be a non-empty string"),
    # before: accepted, a scope part that shows as nothing in every list of runs
    ("\u200b", "has no visible character"),
    ("\u3164\u2800", "has no visible character"),
    ("\x01", "has no visible character"),  # a control character alone
    ("a" * 65, "has 65 characters"),
    # before: accepted, and printed as they are by every list of runs, notes and review items
    ("n1\nitem 9 approved", "has a line break or control character"),
    ("a\tb", "has a line break or control character"),
    ("x\x1b[31m", "has a line break or control character"),  # a terminal escape sequence
    ("søren\x85", "has a line break or control character"),  # NEL, a C1 control
    ("a\u2028b", "has a line break or control character"),  # str.splitlines breaks here
    ("a\x7f", "has a line break or control character"),
])
def test_ident_problem(value: str, problem: str | None) -> None:
    """An id names something a person picks out of a list: it must show."""
    found = ident_problem(value)
    assert found == problem if problem is None else (found or "").startswith(problem)


@pytest.mark.parametrize(("value", "problem"), [
    ("cancelled by the operator", None),
    ("", NOTHING),
    (" \t\n", NOTHING),
    ("\u200b\u2060\ufeff", NOTHING),  # zero-width space, word joiner, byte-order mark
    ("\u3164 \u2800", NOTHING),  # a Hangul filler, a blank braille cell
    ("ok\x00", "contains a NUL character"),
])
def test_visible_problem(value: str, problem: str | None) -> None:
    """Text someone reads (an example, a reason, a name) shows something and can be stored."""
    found = visible_problem(value)
    assert found == problem if problem is None else (found or "").startswith(problem)


@pytest.mark.parametrize(("value", "problem"), [
    ("declined: duplicate of n7", None),
    ("déclinée — doublon", None),
    ("a\nb", "has a line break"),
    ("a\u2029b", "has a line break"),  # the paragraph separator, as splitlines reads it
    ("a\x9bb", "has a line break"),  # CSI, a C1 control
    # before: accepted, and the rest of each listing line printed reversed
    ("fine\u202e enil", "has a bidi override"),
    ("x\u2067y", "has a bidi override"),  # a right-to-left isolate
    ("שלום עולם", None),  # right-to-left text needs no override
])
def test_line_problem(value: str, problem: str | None) -> None:
    """A reason is one line of a listing, whatever script it is written in."""
    found = line_problem(value)
    assert found == problem if problem is None else (found or "").startswith(problem)


@pytest.mark.parametrize(("value", "problem"), [
    ({"content": "tea \ud800"}, "content is not valid Unicode"),
    ({"scope": {"agent_id": "a", "user_id": "u\x00"}}, "scope.user_id contains a NUL character"),
    ({"source_ids": ["n1", "\udc00"]}, "source_ids.1 is not valid Unicode"),
    ({"source_versions": {"\ud800": 1}}, "a key of source_versions is not valid Unicode"),
    ({"\ud800": 1}, "a key is not valid Unicode"),
    # a key that is no plain name is not repeated (it is whatever the sender wrote)
    ({"x y\n": ["\ud800"]}, "<key>.0 is not valid Unicode"),
    ({"a": "fine", "b": [{"c": "\x00"}], "z": "\ud800"}, "b.0.c contains a NUL"),  # first sent
    ("\ud800", "the value is not valid Unicode"),
    ({"content": "tea \U0001f375", "n": [1, None, True]}, None),  # ("\ud83c\udf75" in JSON)
])
def test_json_text_problem_names_the_field(value: object, problem: str | None) -> None:
    found = json_text_problem(value)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found

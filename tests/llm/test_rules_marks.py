"""The rule judge reads a value's marks: a decimal point, a sign, a comparison, a symbol, "ß".
An audit found each pair below merged as identical or as the same content words (the word
analysis reads ".5" as "5", "O-" as "O", drops "<" and "❌", folds "ß"), a protected or manual
note's newer correction retired into it; and of two notes stated at one time, the id, not the
order they were recorded in, chose whose text was kept."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker.domain.types import Note, Scope
from worker.llm.rules import keeps_over, rule_groups, same_or_contained
from worker.phases.contradictions.core import rule_verdict

PAIRS = [
    ("User takes 5 mg of melatonin at night", "User takes .5 mg of melatonin at night"),
    ("Laptop budget: < $1500", "Laptop budget: > $1500"),
    ("Passport renewal status: ❌", "Passport renewal status: ✅"),
    ("User's blood type is O-", "User's blood type is O"),
    ("The freezer is set to 18 °C", "The freezer is set to –18 °C"),
    ("Nutzer trinkt Alkohol in Maßen", "Nutzer trinkt Alkohol in Massen"),
    ("User writes C", "User writes C++"),
]


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_a_changed_mark_is_never_the_same_fact(a: str, b: str) -> None:
    assert not same_or_contained(a, b) and not same_or_contained(b, a)


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_contradictions_leave_the_pair_open(a: str, b: str) -> None:
    """Before: "equivalent", and the newer note retired into the older protected one."""
    old = Note(id="old", scope=Scope("a"), content=a, protection="protected",
               created_at=datetime(2026, 1, 10, tzinfo=UTC))
    new = Note(id="new", scope=Scope("a"), content=b, created_at=datetime(2026, 3, 10, tzinfo=UTC))
    assert rule_verdict(old, new)[0] == "open"
    assert rule_verdict(new, old)[0] == "open"


@pytest.mark.parametrize(("small", "big"), [
    ("User likes tea.", "user likes tea"),  # ordinary folds still merge
    ("Laptop budget: < $1500", "Laptop budget: < $1500 for work"),  # marks kept, words added
    ("User prefers Python", "User prefers Python 3.12"),  # a refinement adds a number
    ("Passport renewal status", "Passport renewal status: ✅ since May"),
    ("The freezer is set to –18 °C", "the freezer is set to -18 °C."),  # en dash as minus
])
def test_what_keeps_its_marks_still_merges(small: str, big: str) -> None:
    assert same_or_contained(small, big)


def _note(nid: str, text: str, seq: int) -> Note:
    return Note(id=nid, scope=Scope("a"), content=text, write_seq=seq,
                created_at=datetime(2026, 3, 10, tzinfo=UTC))


def test_a_tie_in_time_goes_to_the_later_recorded_note_not_the_higher_id() -> None:
    """Two lines of one import dated alike: n2 (line 1) then n1 (line 2). Before, the id broke
    the tie: n2's text was kept and n1, recorded later, retired into it."""
    earlier, later = _note("n2", "User prefers tea.", 1), _note("n1", "user prefers tea", 2)
    groups, open_ids = rule_groups([earlier, later])
    assert [(g.keep_id, g.note_ids, g.rule) for g in groups] == [
        ("n1", ("n1", "n2"), "identical")]
    assert open_ids == []
    assert keeps_over(later, earlier) and not keeps_over(earlier, later)
    # the audit's dose pair: no longer identical, so both stay open
    dose = [_note("n2", "User takes 5 mg of melatonin at night", 1),
            _note("n1", "User takes .5 mg of melatonin at night", 2)]
    assert rule_groups(dose) == ([], ["n1", "n2"])

"""The rule-based judge: what it settles, what it leaves open."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker.domain.types import Note, Scope
from worker.llm.rules import rule_groups, rule_judge_pairs, same_or_contained


@pytest.mark.parametrize(("small", "big", "merged"), [
    ("User prefers Python", "user prefers python.", True),  # identical after normalisation
    ("Café  ÉTÉ", "cafe\u0301 été", True),  # Unicode form and case
    ("User prefers Python", "User prefers Python 3.12 specifically", True),  # refinement
    ("User prefers Python 3.12", "User prefers Python 3.12 with type hints", True),
    ("User prefers Python 3.11", "User prefers Python 3.12 with type hints", False),  # number
    ("User prefers Python 3.12", "User prefers Python 3.11 and 3.12", False),  # numbers differ
    ("User likes coffee", "User does not like coffee", False),  # negation added
    ("User doesn't like coffee", "User doesn't like coffee in the morning", True),
    ("User isn't vegan", "User is vegan", False),
    ("Meeting with Alice on Friday", "Meeting with Bob and Alice on Friday", False),  # names
    ("The dog chases the cat", "The cat chases the dog", False),  # order
    ("A man is cutting a box", "The man is cutting the tape on the box", False),  # adjacency
    ("User prefers tea", "User prefers coffee", False),
    ("", "User prefers tea", False),
    # quantity and frequency words state the value (found by the evolving-fact suite)
    ("The user has all of the vacation days left", "The user has half of the vacation days left",
     False),
    ("Always run the linter", "Sometimes run the linter before committing", False),
    ("Run the linter before committing", "Always run the linter before committing", True),
    ("The user has all of the vacation days", "The user has all of the vacation days for 2025",
     True),
    # (a word right after the last one is read as continuing its phrase, "days left" too: the
    # rules cannot tell it from "a car wash", so the pair stays open for a model or the host)
    ("The user has all of the vacation days", "The user has all of the vacation days left", False),
    # a value's sign and symbols are the value (before: merged, "-18" kept as "18")
    ("Freezer is set to 18 degrees", "Freezer is set to -18 degrees", False),
    ("Freezer is set to -18 degrees", "Freezer is set to 18 degrees", False),
    ("Freezer is set to −18 degrees", "Freezer is set to 18 degrees", False),  # U+2212
    ("Freezer is set to -18 degrees", "Freezer is set to −18 degrees in the garage", True),
    ("User writes C at work", "User writes C++ at work", False),
    ("Discount is 100", "Discount is 100% today", False),
    ("Pages 5-6 matter", "Pages 5-6 matter most", True),  # a range keeps its hyphen
    ("Always run the linter", "Always run the linter before committing", True),
    # another subject or owner, said before the words or by a pronoun (an audit found these
    # merged: the user's own allergy kept as Anna's, the user's home as the mother's)
    ("User is allergic to peanuts", "Anna is allergic to peanuts", False),
    ("User lives in Paris", "User's mother lives in Paris", False),
    ("User lives in Paris", "User’s mother lives in Paris", False),
    ("He lives in Paris", "She lives in Paris", False),
    ("User drinks coffee", "On weekends user drinks coffee", False),  # a qualifier in front
    ("The user lives in Paris", "User lives in Paris with two cats", True),
    # a qualifier that turns the fact round, in English or another language
    ("User is a smoker", "User is a former smoker", False),
    ("User eats meat", "User hardly ever eats meat", False),
    ("User has children", "User has zero children", False),
    ("Nutzer trinkt Kaffee", "Nutzer trinkt Kaffee nicht mehr", False),
    ("L'utilisateur boit du café", "L'utilisateur ne boit plus du café", False),
    ("Usuario come carne", "Usuario nunca come carne", False),
    # a word right after the shorter note's last one that continues its phrase names another
    # thing (an audit found these merged, "owns a car" lost into "owns a car wash")
    ("The user owns a car", "The user owns a car wash", False),
    ("The user has a dog", "The user has a dog walker", False),
    ("The user plays football", "The user plays football video games", False),
    ("The user drinks coffee", "The user drinks coffee liqueur at Christmas", False),
    ("The user has a dog", "The user has a dog friendly flat", False),  # not an adverb
    # ... a function word, punctuation, a number or an adverb after it refines the same thing
    ("Priya plays the cello", "Priya plays the cello in a quartet this season", True),
    ("The user drinks coffee", "The user drinks coffee, mostly espresso", True),
    ("The user drinks coffee", "The user drinks coffee every morning", True),
    ("The man is driving a car", "The man is driving a car carefully", True),
    ("One man is running", "One man is running down the road", True),
    # a time's half of the day is part of its number, like "9pm"
    ("The standup is at 9 am", "The standup is at 9 pm", False),
    ("The standup is at 9", "The standup is at 9 p.m.", False),
    ("The standup is at 9 am", "The standup is at 9 a.m. on Mondays", True),
    # a change of tense is another fact: "was married" may say the marriage ended (an audit
    # found these merged as one content: the equivalence then retired the newer note when the
    # older was protected or manual, or was more read, or dated 2099)
    ("The user is married", "The user was married", False),
    ("The user was married", "The user is married", False),
    ("User has a cat named Mochi", "User had a cat named Mochi", False),
    ("User is vegan", "User has been vegan", False),
    ("User was vegan", "User has been vegan", False),
    ("User likes tea", "User likes tea and had a cat", False),
    ("User is vegan", "User is vegan and has a cat", True),  # both present
    ("User was vegan", "User was vegan in 2019", True),  # both past
    # a negation moved is another fact, though the words and negations are the same (an audit
    # found these merged as one content: a manual or protected note revoked, the newer lost)
    ("User is allergic to peanuts, not to shellfish",
     "User is not allergic to peanuts, but to shellfish", False),
    ("User is not allergic to peanuts, but to shellfish",
     "User is allergic to peanuts, not to shellfish", False),
    ("Send the weekly reports to Anna, not to Bob",
     "Send the weekly reports not to Anna, but to Bob", False),
    ("User never drinks coffee at work, but at home",
     "User drinks coffee at work, but never at home", False),
    ("User is allergic to peanuts, not to shellfish",
     "User is allergic to peanuts, not to shellfish or crab", True),
    ("User does not eat meat", "User does not eat meat on Fridays", True),
])
def test_same_or_contained(small: str, big: str, merged: bool) -> None:
    """Identity or in-place containment with no differing numbers, negations, quantity
    words or names."""
    assert same_or_contained(small, big) is merged


def test_rule_judge_pairs_is_symmetric() -> None:
    """The eval entry point checks both directions of each pair."""
    assert rule_judge_pairs([("User prefers Python 3.12 specifically", "User prefers Python"),
                             ("User likes tea", "User likes coffee")]) == [True, False]


def _note(nid: str, text: str, day: int) -> Note:
    return Note(id=nid, scope=Scope("a"), content=text, created_at=datetime(2026, 1, day, tzinfo=UTC))


def test_groups_keep_the_richest_newest_text_and_leave_the_rest_open() -> None:
    """Contained notes join the richest note that contains them; unrelated ones stay open."""
    notes = [_note("a", "User prefers Python", 1), _note("b", "user prefers python!", 2),
             _note("c", "User prefers Python 3.12 specifically", 3),
             _note("d", "User moved from pytest to unittest", 4)]
    groups, open_ids = rule_groups(notes)
    assert [(g.keep_id, g.note_ids, g.rule) for g in groups] == [("c", ("a", "b", "c"), "contained")]
    assert open_ids == ["d"]
    groups_rev, open_rev = rule_groups(list(reversed(notes)))
    assert groups_rev == groups and open_rev == open_ids


def test_identical_group_keeps_the_newest() -> None:
    """Identical notes: the newest one's wording is kept."""
    groups, open_ids = rule_groups([_note("x", "User prefers tea.", 1), _note("y", "user prefers tea", 5)])
    assert groups[0].keep_id == "y" and groups[0].rule == "identical" and open_ids == []


def test_an_older_fuller_note_never_takes_a_newer_ones_place() -> None:
    """The rules keep a note's text over another's only when it was stated no earlier, or in
    the same words: a newer, shorter statement may have dropped the word that made the older
    one wrong ("former", "had a small brown dog" → "has a dog"). Both stay open for a model."""
    cases = [("User is a former smoker", "User is a smoker"),
             ("User had a small brown dog", "User has a dog"),
             ("User prefers Python 3.12 with type hints", "User prefers Python 3.12")]
    for older, newer in cases:
        groups, open_ids = rule_groups([_note("old", older, 1), _note("new", newer, 9)])
        assert (groups, open_ids) == ([], ["new", "old"]), (older, newer)
    # the other way round the newer, fuller note keeps its text and retires the older
    groups, _ = rule_groups([_note("old", "User prefers Python 3.12", 1),
                             _note("new", "User prefers Python 3.12 with type hints", 9)])
    assert [(g.keep_id, g.note_ids) for g in groups] == [("new", ("new", "old"))]
    # the same words said again: the older wording stands for both, whichever is kept
    groups, _ = rule_groups([_note("old", "User prefers tea.", 1), _note("new", "user prefers tea", 9)])
    assert groups[0].note_ids == ("new", "old") and groups[0].rule == "identical"


def test_related_callback_can_veto() -> None:
    """The similarity bar applies on top of the text rules."""
    notes = [_note("a", "User prefers Python", 1), _note("c", "User prefers Python 3.12", 3)]
    groups, open_ids = rule_groups(notes, related=lambda a, b: False)
    assert groups == [] and open_ids == ["a", "c"]


@pytest.mark.parametrize("small, big", [
    ("The user writes code in Vim", "The user writes code in Vim again"),
    ("Reports use metric units", "Reports use metric units once more"),
    ("The team chats on Slack", "The team chats on Slack still"),
    ("The user walks the dog", "The user walks the dog daily"),
])
def test_a_word_of_time_or_repetition_after_the_phrase_is_a_restatement(small: str,
                                                                         big: str) -> None:
    """The phrase rule ("owns a car" / "owns a car wash") leaves a restatement that only adds
    when or how often alone: "again", "once more", "still", "daily" continue no noun. Without
    them in the closers the rule judge left most restated versions of the end-state suite open
    (superseded retired 404 → 58 of 1,060, tests.bench.eval_endstate --judge rules)."""
    assert same_or_contained(small, big)


@pytest.mark.parametrize(("older", "newer"), [
    ("The user is vegetarian", "The user was vegetarian"),
    ("The user was vegetarian", "The user is vegetarian"),
    ("User has a cat named Mochi", "User had a cat named Mochi"),
])
def test_a_change_of_tense_is_never_grouped(older: str, newer: str) -> None:
    """Consolidation's ``contained`` rule revoked a manual "is vegetarian" for an automatic
    "was vegetarian" (R26): notes in two tenses stay open for a model or a person."""
    groups, open_ids = rule_groups([_note("old", older, 1), _note("new", newer, 9)])
    assert (groups, open_ids) == ([], ["new", "old"])


def test_a_moved_negation_is_never_grouped() -> None:
    """Consolidation merged "allergic to peanuts, not to shellfish" into "not allergic to
    peanuts, but to shellfish" (same words, same negation): they stay open."""
    notes = [_note("old", "User is allergic to peanuts, not to shellfish", 1),
             _note("new", "User is not allergic to peanuts, but to shellfish", 9)]
    assert rule_groups(notes) == ([], ["new", "old"])


@pytest.mark.parametrize(("small", "big", "merged"), [
    # a letter that states something is content, not the article (an audit found "vitamin A"
    # merged into "vitamin B12", a chain through "B12 and iron" losing it too)
    ("User is deficient in vitamin A", "User is deficient in vitamin B12", False),
    ("User is deficient in vitamin A", "User is deficient in vitamin B12 and iron", False),
    ("User is deficient in vitamin a", "User is deficient in vitamin B12", False),
    ("The user chose plan A", "The user chose plan B2", False),
    ("User's blood type is A", "User's blood type is AB", False),
    ("User got grade A, first try", "User got grade B, first try", False),
    ("User is deficient in vitamin A", "User is deficient in vitamin A and iron", True),
    ("User is deficient in vitamin B12", "User is deficient in vitamin B12 and iron", True),
    ("A cat lives with the user", "A cat lives with the user and a dog", True),  # the article
    ("User has a cat. A dog too", "User has a cat. A dog too, since May", True),
    ("I drink tea", "I drink tea every morning", True),  # "I" stays a stop word
    # a name with a number in it after the last word names another thing; a number refines
    ("User is deficient in vitamin", "User is deficient in vitamin B12", False),
    ("User prefers Python", "User prefers Python 2", True),
])
def test_a_letter_or_a_numbered_name_is_content(small: str, big: str, merged: bool) -> None:
    """"A" was a stop word everywhere and a token with a digit always closed a phrase."""
    assert same_or_contained(small, big) is merged


def test_vitamin_a_is_never_grouped_into_another_vitamin() -> None:
    """The audit's chain: January's vitamin A merged into March's B12, then into "B12 and
    iron"; the vitamin A note stays open."""
    notes = [_note("a", "User is deficient in vitamin A", 1),
             _note("b", "User is deficient in vitamin B12", 5),
             _note("c", "User is deficient in vitamin B12 and iron", 9)]
    groups, open_ids = rule_groups(notes)
    assert [(g.keep_id, g.note_ids) for g in groups] == [("c", ("b", "c"))]
    assert open_ids == ["a"]


@pytest.mark.parametrize(("small", "big", "merged"), [
    # another person appended, in brackets or after a possessive (an audit found the first
    # merged as ``contained``: the user's own allergy lost into the wife's)
    ("Allergic to penicillin", "Allergic to penicillin (his wife)", False),
    ("Allergic to penicillin", "Allergic to penicillin [her husband]", False),
    ("Allergic to penicillin", "Allergic to penicillin, like his wife", False),
    ("User is allergic to penicillin", "User is allergic to penicillin and so is user's son",
     False),
    ("Allergic to penicillin (his wife)", "Allergic to penicillin (his wife) since 2019", True),
    ("User's wife likes tea", "User's wife likes tea and her sister too", False),
    ("User's wife likes tea", "User's wife likes tea and coffee", True),
    # the families that stay as they were
    ("User likes tea", "User likes tea and coffee", True),
    ("The user owns a car", "The user owns a car wash", False),
    ("User prefers Python", "User prefers Python 2", True),
    ("User likes tea", "User no longer likes tea", False),
])
def test_another_person_added_is_not_contained(small: str, big: str, merged: bool) -> None:
    """A fuller note whose added words are in brackets or name another relative may say the
    shorter note's fact of someone else: the pair stays open."""
    assert same_or_contained(small, big) is merged


def test_the_users_allergy_is_never_grouped_into_another_persons() -> None:
    """The audit's case: January's "Allergic to penicillin" merged as ``contained`` into
    March's "Allergic to penicillin (his wife)"; both stay open."""
    notes = [_note("old", "Allergic to penicillin", 1),
             _note("new", "Allergic to penicillin (his wife)", 9)]
    assert rule_groups(notes) == ([], ["new", "old"])

"""Rare terms of a scope: short restatements of one attribute (contradiction candidates) and
notes on one topic of one subject (consolidation's second signal)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.embeddings.hashing import HashingEmbedder
from worker.similarity.candidates import same_frame_pairs
from worker.similarity.terms import (
    _WORD,
    NoteWords,
    TermSettings,
    _content_terms,
    _rarity,
    _shared_counts,
    _shared_pairs,
    as_stated,
    frame_tokens,
    note_words,
    shared_term_pairs,
    topical_pairs,
    words_of,
)
from worker.text.words import stem, strip_invisible

# ---- shared rare terms ----------------------------------------------------------------------
RESTATED = [
    ("The team chats on Slack every day", "Team chat runs on Zulip"),
    ("Preferred code editor: Emacs", "The user writes code in Vim"),
    ("Remaining vacation this year: 3 days", "The user has 20 vacation days left this year"),
]


@pytest.mark.parametrize(("a", "b"), RESTATED)
def test_a_fact_restated_in_other_words_shares_a_rare_term(a: str, b: str) -> None:
    """Neither a frame nor the hashing cosine joins these; the word they share does."""
    assert same_frame_pairs([a, b]).pairs == set()
    vectors = HashingEmbedder(512).embed([a, b])
    assert float(vectors[0] @ vectors[1]) < 0.70
    assert shared_term_pairs([a, b]) == {(0, 1)}


def test_only_discourse_frequency_or_function_words_in_common_join_nothing() -> None:
    texts = ["Reports use metric units again", "Pull requests need two approvals again",
             "The user is in the office", "The user is on holiday",
             "Deployments go out on every weekday", "The team chats on Zulip every day",
             "The user has 10 vacation days left"]
    assert shared_term_pairs(texts) == set()
    # A named day is a value: two notes sharing one may state one attribute.
    assert shared_term_pairs(["Deployments go out on Thursdays",
                              "The team ships releases on Thursdays"]) == {(0, 1)}


def test_a_term_too_many_notes_hold_is_not_rare() -> None:
    """A word in more of the scope's notes than max_notes names no one attribute (in a scope
    large enough that half of it is more: the other notes share nothing)."""
    texts = [f"Project {name} ships soon" for name in
             ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota")]
    others = [f"Note {k} stands alone" for k in range(20)]
    assert shared_term_pairs(texts + others, TermSettings(max_notes=8)) == set()
    assert len(shared_term_pairs(texts[:8] + others, TermSettings(max_notes=8))) == 28
    assert shared_term_pairs(texts[:3], TermSettings(max_notes=1)) == set()  # the source off


def test_long_notes_and_a_small_share_of_terms_are_left_to_cosine() -> None:
    long = ("The user spent the whole afternoon comparing espresso machines for the new office "
            "kitchen, read reviews of each, asked two colleagues which they liked and finally "
            "picked the cheapest one they could find, which arrives on Monday with a free bag of "
            "beans")  # over 40 words: more than one fact
    assert shared_term_pairs([long, "The office kitchen has a new fridge"]) == set()
    # One shared term among the five of the note with fewer is too little (a quarter: two).
    texts = ["Kitchen rota: Alice Bob Carol Dave", "Kitchen duty: Erin Frank Grace Heidi Ivan"]
    assert shared_term_pairs(texts, TermSettings(min_share=0.25)) == set()
    assert shared_term_pairs(texts, TermSettings(min_share=0.15)) == {(0, 1)}


def test_a_floor_on_cosine_drops_two_attributes_meeting_on_a_weekday() -> None:
    texts = ["Deployments go out on Thursdays", "The user swims on Thursday evenings"]
    assert shared_term_pairs(texts) == {(0, 1)}
    apart = np.asarray([[1.0, 0.0], [0.1, 0.995]], dtype=np.float32)
    assert shared_term_pairs(texts, vectors=apart, min_similarity=0.15) == set()
    assert shared_term_pairs(texts, vectors=apart, min_similarity=0.05) == {(0, 1)}


def test_a_word_most_of_a_small_scope_holds_is_not_rare() -> None:
    """Seven notes about Alice: her name is in five (more than half), which is no attribute;
    the chat versions still meet on the words only they share."""
    texts = ["Alice prefers green tea in the afternoon", "Never call Alice before 9am",
             "Alice's account number ends in 4411", "Alice walks to the office",
             "Alice keeps a cat", "The team chats on Slack every day", "Team chat runs on Zulip"]
    assert shared_term_pairs(texts) == {(5, 6)}


# ---- topical pairs (consolidation) ------------------------------------------------------------
# Long notes of one person's memory: the name is in every note (no term), the topics are not.
POTTERY = [
    "Dana signed up for a pottery course at the community arts centre near her flat",
    "Her pottery teacher says the glaze on the bowls Dana makes is getting much better",
    "Dana is saving up for a second-hand pottery wheel to put in the spare bedroom",
]
OTHERS = [
    "Dana works night shifts as a nurse at the children's hospital in town",
    "Dana reads crime novels on the train to work and swaps them with a colleague",
    "Dana's sister lives in Porto and comes to visit every spring with her kids",
    "Dana is learning to play the cello and practises scales before breakfast",
    "Dana cooks a big pot of lentil soup on Sundays and freezes the rest",
    "Dana walks along the river to clear her head after a long shift",
]


def test_notes_on_one_topic_share_a_rare_term_whatever_their_length() -> None:
    """Three long notes sharing "pottery" are linked pairwise; the short-note source leaves
    them to cosine, and the name every note holds links nothing."""
    texts = POTTERY + OTHERS
    assert shared_term_pairs(texts) == set()
    found = topical_pairs(texts)
    assert {(0, 1), (0, 2), (1, 2)} <= found
    assert all(i < 3 and j < 3 for i, j in found if i < 3 or j < 3)


def test_a_term_too_many_notes_hold_links_nothing_and_below_two_is_off() -> None:
    """A word in more of the scope's notes than ``max_notes`` names no topic; ``max_notes``
    below 2 turns the signal off."""
    texts = [f"The user keeps a {thing} on the balcony" for thing in
             ("lemon tree", "bicycle", "grill", "chair", "hammock", "bird feeder")]
    others = [f"Note {k} stands alone" for k in range(12)]
    assert topical_pairs(texts + others, max_notes=5) == set()
    assert len(topical_pairs(texts + others, max_notes=6)) == 15
    assert topical_pairs(texts + others, max_notes=1) == set()


def _two_people(word: str = "likes") -> list[str]:
    """Eight notes about each of two people: their names are the scope's subjects."""
    return ([f"Priya {word} {x}" for x in ("hiking", "jazz", "chess", "tea", "rain", "maps",
                                           "kites", "plums")]
            + [f"Tomas {word} {x}" for x in ("cycling", "opera", "cards", "soup", "snow",
                                             "figs", "boats", "moths")])


def test_notes_about_two_subjects_are_not_linked_by_their_topic() -> None:
    """In a conversation's notes the two names are everywhere: a note about each meeting on
    "bakery" is two facts about two people; a note naming neither, or both, may join either."""
    texts = ["Priya lost her job at the bakery last month",  # 0: Priya
             "Tomas lost his job at the bakery as well",  # 1: Tomas
             "The bakery on the corner closed for good",  # 2: no subject
             "Tomas and Priya both miss the bakery's rye bread"]  # 3: both
    found = topical_pairs(texts + _two_people())
    assert (0, 1) not in found
    assert {(0, 2), (1, 2), (0, 3), (1, 3), (2, 3)} <= found


def test_a_word_capitalised_only_where_it_opens_a_note_is_no_subject() -> None:
    """"Coffee" opens two notes and is written lower case in the others: a common word, not a
    name the two notes share, so Priya's and Tomas's bakery notes stay apart."""
    texts = ["Coffee from the bakery keeps Priya going", "Coffee from the bakery is all Tomas buys"]
    assert (0, 1) not in topical_pairs(texts + _two_people("drinks coffee with"))
    # Without the two names repeated, nothing is a subject and the pair is linked.
    assert (0, 1) in topical_pairs(texts + [f"Note {k} stands alone" for k in range(16)])


def test_a_floor_on_cosine_drops_two_notes_meeting_on_one_incidental_word() -> None:
    """With vectors, a linked pair must also be this alike."""
    texts = POTTERY[:2] + OTHERS
    apart = np.zeros((len(texts), 2), dtype=np.float32)
    apart[:, 0] = 1.0
    apart[1] = [0.3, 0.954]
    assert (0, 1) in topical_pairs(texts, vectors=apart, min_similarity=0.25)
    assert (0, 1) not in topical_pairs(texts, vectors=apart, min_similarity=0.35)


# ---- a note's words, made once ----------------------------------------------------------------
WORDS = ["The team chats on Slack every day", "Dana's pottery wheel arrives on 3 May",
         "İlkay moved to İzmir", "STRASSE and Straße", "zero\u200bwidth Words", "ﬁle ǅemal",
         "Priya plays the cello", "priya's cello"]


@pytest.mark.parametrize("text", WORDS)
def test_a_notes_words_are_what_each_signal_reads_alone(text: str) -> None:
    """One tokenisation serves the frame source (case-folded, so "İ" splits a word as folding
    makes it two characters) and the topical pass (words as written, for capitals)."""
    words = note_words(text)
    assert words.frame == tuple(frame_tokens(text))
    assert words.terms == _content_terms(frame_tokens(text))
    written = _WORD.findall(strip_invisible(text))
    assert words.topical == _content_terms(map(stem, written))
    assert words.lowered == {stem(w) for w in written if not w[0].isupper()}


def test_words_made_once_give_the_pairs_of_words_made_by_each_signal() -> None:
    """The signals given the words find what they find making them; ``words_of`` with a
    mapping reads what it holds (the same objects) and adds what it lacks."""
    texts = POTTERY + OTHERS + WORDS + [t for pair in RESTATED for t in pair] + _two_people()
    known: dict[str, NoteWords] = {}
    first = words_of(texts[:5], known)
    words = words_of(texts, known)
    assert words[:5] == first and all(a is b for a, b in zip(first, words, strict=False))
    assert words == words_of(texts) and set(known) == set(texts)
    vectors = np.asarray(HashingEmbedder(512).embed(texts), dtype=np.float32)
    for floor in (-1.0, 0.15, 0.35):
        assert topical_pairs(texts, 8, vectors, floor, words=words) == topical_pairs(
            texts, 8, vectors, floor)
        assert shared_term_pairs(texts, TermSettings(), vectors, floor, words=words) == (
            shared_term_pairs(texts, TermSettings(), vectors, floor))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.frozensets(st.sampled_from("abcdefgh"), max_size=5), max_size=30))
def test_topical_pairs_are_the_shared_counts_pairs_in_their_order(
        terms: list[frozenset[str]]) -> None:
    """The pairs ``topical_pairs`` reads from the posting lists (without counting) are the
    pairs ``_shared_counts`` counts, in the order it finds them (what ``_alike`` is given)."""
    rare, _ = _rarity(terms, 4)
    assert _shared_pairs(terms, rare) == list(_shared_counts(terms, rare))


def test_words_that_only_say_a_fact_was_said_before_leave_its_frame() -> None:
    again = frame_tokens("The user always flies premium economy class once more")
    assert as_stated(tuple(again)) == tuple(frame_tokens(
        "The user always flies premium economy class"))
    assert as_stated(tuple(frame_tokens("Deployments go out on Mondays again"))) == tuple(
        frame_tokens("Deployments go out on Mondays"))
    # "once" and "more" alone say something else; a frame without them is itself.
    kept = tuple(frame_tokens("The user visited Kyoto once and wants more matcha"))
    assert as_stated(kept) == kept


def test_three_rare_terms_in_common_join_two_long_notes() -> None:
    """A quarter of a 30-word note's content terms is four or more: two long statements of one
    habit sharing three rare words ("rowing", "club", "harbour") met nothing."""
    # 15 content terms each: a quarter would be four in common.
    texts = ["While planning spring weekends over coffee and toast, the user explained that "
             "they go rowing with the harbour club every Saturday before the farmers market "
             "opens near the station",
             "Complaining later about the new timetable, cold mornings and rising fees, the "
             "user said the harbour club now takes its rowing crews out on Thursday evenings "
             "after the bakery closes",
             "The user's sister teaches chemistry", "Lunch is ordered from the Thai place"]
    assert shared_term_pairs(texts) == {(0, 1)}
    assert shared_term_pairs(texts, TermSettings(enough=4)) == set()

"""Lead-ins set aside: two statements of one attribute wrapped in different words of saying meet
as a same-frame pair; a fact's own first words are never taken for a wrapping."""

from __future__ import annotations

import pytest

from worker.similarity.candidates import FrameSettings, same_frame_pairs
from worker.similarity.lead_ins import LeadInSettings, frame_pairs, lead_in_cores, lead_in_pairs
from worker.similarity.terms import frame_tokens

CALL = "During the weekly planning call the user mentioned that "
TOLD = "The user told the assistant in passing, while chatting about other things, that "
END = ", according to what the user said near the end of the session"
OTHER = ["the printer on the third floor is broken", "the user plays the cello",
         "lunch is ordered from the Thai place", "the kids start school in August",
         "the car needs new tyres", "the user reads crime novels",
         "the dentist moved to Elm Street", "the garden has three apple trees",
         "the user collects vinyl records", "the office plant needs water on Fridays",
         "the user is allergic to penicillin", "the flat has a blue front door",
         "the user learned to sail in Brittany", "the dog is called Biscuit",
         "the user's sister lives in Leeds"]
W = len(OTHER)  # the rows of the two versions: W and W + 1


def _frames(texts: list[str]) -> list[list[str]]:
    return [frame_tokens(t) for t in texts]


def _scope(slack: str, teams: str) -> list[str]:
    """Fifteen unrelated facts under three wrappings (each opening or closing five notes, the
    least ``LeadInSettings.min_notes`` takes for a habit), and the two versions of one
    attribute, ``slack`` and ``teams``, last."""
    wrapped = [CALL + t for t in OTHER[:5]] + [TOLD + t for t in OTHER[5:10]] + \
              [t[0].upper() + t[1:] + END for t in OTHER[10:]]
    return [*wrapped, slack, teams]


def test_two_versions_under_different_lead_ins_meet_and_the_whole_notes_did_not() -> None:
    texts = _scope(CALL + "the team chats on Slack every day",
                   TOLD + "the team chats on Microsoft Teams")
    frames = _frames(texts)
    assert (W, W + 1) not in same_frame_pairs(texts).pairs  # the wrappings differ by 13+ words
    assert (W, W + 1) in lead_in_pairs(frames)
    # A closing lead-in too, and one note with none at all.
    texts = _scope("The team chats on Slack every day" + END, "The team chats on Zulip")
    assert (W, W + 1) in lead_in_pairs(_frames(texts))


def test_unrelated_facts_under_lead_ins_do_not_meet() -> None:
    """Setting the wrapping aside leaves each core to share a frame: the other facts, all
    wrapped, pair with nothing."""
    texts = _scope(CALL + "the team chats on Slack every day",
                   TOLD + "the team chats on Microsoft Teams")
    assert {p for p in lead_in_pairs(_frames(texts)) if max(p) < W} == set()


def test_a_wrapping_fewer_notes_share_is_no_lead_in() -> None:
    """A few notes opening alike are a few notes, not a scope's habit of wrapping its facts."""
    texts = [CALL + "the team chats on Slack every day", TOLD + "the team chats on Zulip",
             *(CALL + t for t in OTHER[:3]), *OTHER[3:]]
    assert lead_in_cores(_frames(texts)) == []
    assert lead_in_pairs(_frames(texts)) == set()
    assert lead_in_pairs(_frames(_scope(CALL + "the team chats on Slack", TOLD +
                                        "the team chats on Zulip")),
                         settings=LeadInSettings(min_notes=7)) == set()


def test_a_facts_own_verb_is_not_a_lead_in() -> None:
    """Notes opening "Went to a …" or "Has a cousin who organises a …" are many facts whose
    verb comes first; two about one event are two facts. Under a wrapping, the wrapping is set
    aside and the verb kept."""
    events = ["jazz concert in Porto in May", "book fair in Oslo in June",
              "chess tournament in Quito in July", "food market in Perth in March",
              "film festival in Hanoi in April", "pottery class in Kyoto in October"]
    went = [f"Went to a {e}" for e in events]
    cousin = [f"Has a cousin who organises a {e.replace(' in ', ' every ', 1)}"
              for e in events]
    texts = went + cousin
    frames = _frames(texts)
    assert lead_in_cores(frames) == []
    # Each wrapping before both kinds of fact, as a scope's wrappings are.
    wrapped = [(CALL if k % 2 else TOLD) + t[0].lower() + t[1:] for k, t in enumerate(texts)]
    cores = lead_in_cores(_frames(wrapped))
    assert {len(core) for row, core in cores if row == 0} == {len(frames[0])}
    assert {len(core) for row, core in cores if row == 7} == {len(frames[7])}
    # Cores "went to a jazz concert …" / "has a cousin who organises a jazz concert …" differ
    # by more than a frame's span: no pair the unwrapped notes would not make.
    unwrapped = same_frame_pairs(texts).pairs
    assert lead_in_pairs(_frames(wrapped)) <= unwrapped


def test_spans_follow_the_frame_settings() -> None:
    texts = _scope(CALL + "the team chats on Slack every day",
                   TOLD + "the team chats on Microsoft Teams")
    assert (W, W + 1) not in lead_in_pairs(_frames(texts), FrameSettings(max_span=2))


def test_a_lead_in_of_one_note_is_refused_not_read_as_two() -> None:
    """``frame_pairs`` read ``lead_in_notes=1`` as 2 (``max(2, …)``); the setting refuses 1 at
    start-up, and the function no longer stands another count in for it."""
    texts = _scope(CALL + "the team chats on Slack every day",
                   TOLD + "the team chats on Microsoft Teams")
    assert (W, W + 1) in frame_pairs(_frames(texts), FrameSettings(), 2).pairs
    with pytest.raises(ValueError, match="at least 2 notes, not 1"):
        frame_pairs(_frames(texts), FrameSettings(), 1)
    with pytest.raises(ValueError):
        LeadInSettings(min_notes=1)

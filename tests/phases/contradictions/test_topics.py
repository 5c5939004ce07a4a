"""Topic planning and decisions: fair order, re-planning after retirements, isolation of notes
that read like instructions, reply checks, and attribute/value answers turned into policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from worker.domain.types import Note, Scope
from worker.phases.contradictions.core import CandidatePair, PolicySettings
from worker.phases.contradictions.topics import (
    Attribute,
    Topic,
    TopicVerdict,
    ValueClass,
    check_topic_reply,
    follow_retirements,
    independent_pairs,
    isolate_suspicious,
    pack_calls,
    plan_topics,
    prompt_topics,
    topic_decisions,
)

T0 = datetime(2026, 5, 1, tzinfo=UTC)
POLICY = PolicySettings()


def note(nid: str, days: float = 0, **kw: object) -> Note:
    return Note(id=nid, scope=Scope("a"), content=f"text of {nid}",
                created_at=T0 + timedelta(days=days), **kw)  # type: ignore[arg-type]


def pair(a: str, b: str, sim: float = 0.5, judged: bool = False) -> CandidatePair:
    return CandidatePair(min(a, b), max(a, b), sim, "fp", judged)


def test_plan_topics_never_judged_first_then_longest_waiting() -> None:
    """Fairness: a topic with a pair never judged comes before one judged at another version;
    among equals, the one whose pair became a candidate earliest comes first."""
    notes = {n.id: n for n in (note("a", 0), note("b", 50), note("c", 10), note("d", 20),
                               note("e", 1), note("f", 2))}
    plan = plan_topics([pair("a", "b", judged=True), pair("c", "d"), pair("e", "f")], notes, 8)
    assert [t.note_ids for t in plan] == [("e", "f"), ("c", "d"), ("a", "b")]
    assert plan[0].waiting_since == notes["f"].created_at


def test_follow_retirements_moves_pairs_to_the_survivor_and_drops_asked_ones() -> None:
    """A split topic: A→B and C→D were resolved apart; the unasked pair A–C becomes B–D."""
    notes = {n: note(n) for n in "bd"}
    pending = [pair("a", "b"), pair("c", "d"), pair("a", "c", 0.4)]
    moved = follow_retirements(pending, {"a": "b", "c": "d"}, {("a", "b"), ("c", "d")}, notes)
    assert [p.ids for p in moved] == [("b", "d")]


def test_suspicious_notes_are_asked_alone_pair_by_pair() -> None:
    """Issue 12 item 2: a note that may steer the model never shares a prompt with other
    topics; its pairs are asked alone and the trusted rest of its topic stays together."""
    t1 = Topic(("a", "b", "s"), (pair("a", "b"), pair("a", "s"), pair("b", "s")), False, T0)
    t2 = Topic(("x", "y"), (pair("x", "y"),), False, T0)
    split = isolate_suspicious([t1, t2], frozenset({"s"}))
    assert [t.note_ids for t in split] == [("a", "b"), ("a", "s"), ("b", "s"), ("x", "y")]
    calls = pack_calls(split, frozenset({"s"}), notes_per_call=24)
    assert [(c.note_ids, c.isolated) for c in calls] == [
        (["a", "b", "x", "y"], False), (["a", "s"], True), (["b", "s"], True)]


def test_prompt_aliases_hide_ids_and_dates_order_notes() -> None:
    """The model sees t1.. and n1.. (never stored ids), notes oldest first with their dates."""
    notes = {"id-new": note("id-new", 9), "id-old": note("id-old", 1)}
    calls = pack_calls([Topic(("id-new", "id-old"), (pair("id-new", "id-old"),), False, T0)],
                       frozenset(), 24)
    items, alias_of, by_topic = prompt_topics(calls[0], notes)
    assert alias_of == {"n1": "id-old", "n2": "id-new"} and list(by_topic) == ["t1"]
    assert "id-" not in repr(items).replace("text of id-", "")
    assert items[0]["notes"][0]["created_at"] == "2026-05-02"  # type: ignore[index]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ([], "no answer for the topic"),
        ([{"topic": "t1"}, {"topic": "t1"}], "more than one answer for the topic"),
        ([{"topic": "t1", "attributes": [{"values": [{"notes": ["n3"]}]}]}],
         "note n3 belongs to another topic"),
        ([{"topic": "t1", "attributes": [{"values": [{"notes": ["n1"]}, {"notes": ["n1"]}]}]}],
         "note n1 named more than once"),
        ([{"topic": "t1", "attributes": [{"values": [{"notes": ["n9"]}]}]}],
         "unknown note alias 'n9'"),
        ([{"topic": "t1", "attributes": [{"values": [{"notes": ["n1"], "fullest": "n2"}]}]}],
         "fullest 'n2' is not one of its value's notes"),
    ],
)
def test_check_topic_reply_drops_unclean_topics(reply: list[dict[str, Any]],
                                                 reason: str) -> None:
    """R12: a topic answered twice, not at all, or naming notes outside it changes nothing."""
    t1 = Topic(("a", "b"), (pair("a", "b"),), False, T0)
    t2 = Topic(("c", "d"), (pair("c", "d"),), False, T0)
    alias_of = {"n1": "a", "n2": "b", "n3": "c", "n4": "d"}
    verdicts, dropped = check_topic_reply([*reply, {"topic": "t2", "attributes": []}],
                                          alias_of, {"t1": t1, "t2": t2})
    assert dropped == {"t1": reason}
    assert [v.topic.key for v in verdicts] == ["c"]


def _decisions(values: list[list[str]], notes: dict[str, Note], confidence: float = 0.9,
               fullest: dict[int, str] | None = None) -> list[tuple[str, str, str | None]]:
    topic = Topic(tuple(sorted(notes)), (), False, T0)
    classes = tuple(ValueClass(tuple(v), (fullest or {}).get(k)) for k, v in enumerate(values))
    verdict = TopicVerdict(topic, [Attribute("slot", classes, confidence)])
    return [(d.decision.action, d.decision.loser_id or "", d.decision.winner_id)
            for d in topic_decisions(verdict, notes, POLICY)]


def test_a_chain_of_three_values_ends_with_the_newest() -> None:
    """A → B → C weeks apart: A goes into B, B into C, in that order (one run)."""
    notes = {n.id: n for n in (note("a", 0), note("b", 20), note("c", 40))}
    assert _decisions([["c"], ["a"], ["b"]], notes) == [
        ("revoke", "a", "b"), ("revoke", "b", "c")]


def test_a_revert_counts_from_the_latest_restatement() -> None:
    """X, then Y, then X again: X's notes merge, and X (restated last) beats Y."""
    notes = {n.id: n for n in (note("x1", 0), note("y", 20), note("x2", 40))}
    assert _decisions([["x1", "x2"], ["y"]], notes) == [
        ("revoke", "x1", "x2"), ("revoke", "y", "x2")]


def test_values_stated_in_one_session_settle_in_the_order_they_were_recorded() -> None:
    """Every note dated at its session's start: X, then Y, then X again in one session, and
    Z said in it before them. The order recorded decides as dates would: X (restated last)
    is current, and a value counts from its latest statement's place, not its first."""
    notes = {n.id: n for n in (note("z", write_seq=1), note("x1", write_seq=2),
                               note("y", write_seq=3), note("x2", write_seq=4))}
    assert _decisions([["y"], ["x1", "x2"], ["z"]], notes) == [
        ("revoke", "x1", "x2"), ("revoke", "z", "y"), ("revoke", "y", "x2")]


def test_the_fullest_statement_of_a_value_survives() -> None:
    """Equal values: the note the model names fullest keeps the value, even if older."""
    notes = {n.id: n for n in (note("rich", 0), note("short", 20))}
    assert _decisions([["rich", "short"]], notes, fullest={0: "rich"}) == [
        ("revoke", "short", "rich")]


def test_a_protected_old_value_is_flagged_and_the_chain_goes_on() -> None:
    """A protected A loses to B (flagged, kept); B still loses to C; nothing flips the winner.
    A stays active, so it meets C too (flagged again): before, the pair A–C was decided by
    nothing and asked again every run."""
    notes = {n.id: n for n in (note("a", 0, protection="protected"), note("b", 20),
                               note("c", 40))}
    assert _decisions([["a"], ["b"], ["c"]], notes) == [
        ("flag", "a", "b"), ("flag", "a", "c"), ("revoke", "b", "c")]


def test_a_kept_loser_goes_on_meeting_values_until_its_notes_are_retired() -> None:
    """A manual note's value (its automatic restatement merged into it) loses to B and stays,
    flagged: it meets C as well. B, retired into C, meets nothing more."""
    notes = {n.id: n for n in (note("m", 0, is_auto_generated=False), note("x", 1),
                               note("b", 20), note("c", 40), note("d", 60))}
    assert _decisions([["m", "x"], ["b"], ["c"], ["d"]], notes) == [
        ("revoke", "x", "m"), ("flag", "m", "b"), ("flag", "m", "c"), ("revoke", "b", "c"),
        ("flag", "m", "d"), ("revoke", "c", "d")]


def test_two_tied_values_both_meet_the_newer_one() -> None:
    """A and B the same day (a tie: both stand, flagged), then C weeks later: C settles against
    A as well as B, so no pair of the attribute is left to be asked again next run."""
    notes = {n.id: n for n in (note("a", 0), note("b", 0), note("c", 40))}
    assert _decisions([["a"], ["b"], ["c"]], notes) == [
        ("flag", "", None), ("revoke", "a", "c"), ("revoke", "b", "c")]


def test_a_value_beaten_by_a_standing_one_meets_no_other() -> None:
    """A and B tie; C, newer by half an hour only (within the clock skew) and less used,
    loses to A and is retired once: it is never compared with B as well (that verdict would
    be wasted)."""
    notes = {n.id: n for n in (note("a", 0, access_count=9), note("b", 0, access_count=9),
                               note("c", 0.02))}
    decisions = _decisions([["a"], ["b"], ["c"]], notes)
    assert [d for d in decisions if d[1] == "c"] == [("revoke", "c", "a")]


def test_low_confidence_changes_nothing() -> None:
    """An attribute answered below min_confidence retires and flags nothing."""
    notes = {n.id: n for n in (note("a", 0), note("b", 20))}
    assert _decisions([["a"], ["b"]], notes, confidence=0.5) == []


def test_only_pairs_outside_one_attribute_are_settled_as_independent() -> None:
    """A pair of two values of one attribute is settled by the decisions applied to it, not by
    the answer: if the guard stops them it must be asked again, so it is never remembered."""
    topic = Topic(("a", "b", "c", "x"), (pair("a", "c"), pair("b", "c"), pair("a", "x")), False, T0)
    verdict = TopicVerdict(topic, [Attribute("slot", (ValueClass(("a",)), ValueClass(("b",)),
                                                      ValueClass(("c",))), 0.9)])
    assert [p.ids for p in independent_pairs(verdict)] == [("a", "x")]

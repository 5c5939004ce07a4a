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


def test_only_pairs_outside_one_attribute_are_settled_as_independent() -> None:
    """A pair of two values of one attribute is settled by the decisions applied to it, not by
    the answer: if the guard stops them it must be asked again, so it is never remembered."""
    topic = Topic(("a", "b", "c", "x"), (pair("a", "c"), pair("b", "c"), pair("a", "x")), False, T0)
    verdict = TopicVerdict(topic, [Attribute("slot", (ValueClass(("a",)), ValueClass(("b",)),
                                                      ValueClass(("c",))), 0.9)])
    assert [p.ids for p in independent_pairs(verdict)] == [("a", "x")]

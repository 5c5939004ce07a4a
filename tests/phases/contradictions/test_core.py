"""Pure contradiction policy: who wins a pair, the rule judge, the order verdicts apply in."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from worker.domain.types import Note, Scope
from worker.phases.contradictions.core import (
    OPEN,
    CandidatePair,
    PolicySettings,
    Verdict,
    apply_order,
    decide,
    restates,
    rule_verdict,
)

T0 = datetime(2026, 5, 1, tzinfo=UTC)
SCOPE = Scope("agent-1")
POLICY = PolicySettings(min_confidence=0.7, newer_wins_days=7, high_importance=0.8)


def note(nid: str, *, days: float = 0, access: int = 0, protection: str = "standard",
         importance: float = 0.5, content: str = "x", scope: Scope = SCOPE,
         manual: bool = False) -> Note:
    return Note(id=nid, scope=scope, content=content, created_at=T0 + timedelta(days=days),
                access_count=access, protection=protection, importance=importance,
                is_auto_generated=not manual)


def verdict(a: Note, b: Note, relation: str, confidence: float = 0.9) -> Verdict:
    return Verdict(CandidatePair(a.id, b.id, 0.9, "fp"), relation, confidence, "because")


@pytest.mark.parametrize(
    ("a_kw", "b_kw", "relation", "confidence", "expected"),
    [
        # conflicting: created 14 days apart → the newer wins
        ({"days": 0}, {"days": 14}, "conflicting", 0.9, ("revoke", "conflict", "b", "a")),
        ({"days": 14}, {"days": 0}, "conflicting", 0.9, ("revoke", "conflict", "a", "b")),
        # same day: the more used note wins
        ({"access": 25}, {"access": 2}, "conflicting", 0.9, ("revoke", "conflict", "a", "b")),
        ({"days": 7, "access": 1}, {"access": 9}, "conflicting", 0.9,
         ("revoke", "conflict", "b", "a")),  # exactly 7 days is not "more than 7"
        # full tie (same time, same use) → flagged, nothing revoked
        ({}, {}, "conflicting", 0.9, ("flag", "conflict", None, None)),
        # same use, not decisively newer (3 days under the 7 configured): the later wins
        ({"days": 3}, {}, "conflicting", 0.9, ("revoke", "conflict", "a", "b")),
        # the loser is protected / immutable → flagged
        ({"protection": "protected"}, {"days": 14}, "conflicting", 0.9,
         ("flag", "conflict", "b", "a")),
        ({"protection": "immutable"}, {"days": 14}, "conflicting", 0.9,
         ("flag", "conflict", "b", "a")),
        # a protected winner is fine
        ({"days": 0}, {"days": 14, "protection": "immutable"}, "conflicting", 0.9,
         ("revoke", "conflict", "b", "a")),
        # the loser was written by a person → flagged; a manual note may win, never lose
        ({"manual": True}, {"days": 14}, "conflicting", 0.9, ("flag", "conflict", "b", "a")),
        ({"manual": True, "access": 1}, {"access": 9}, "conflicting", 0.9,
         ("flag", "conflict", "b", "a")),
        ({"days": 0}, {"days": 14, "manual": True}, "conflicting", 0.9,
         ("revoke", "conflict", "b", "a")),
        # both of high importance: decisively newer still wins (importance is not "never
        # changes"); told apart only by use or a slightly later time → flagged
        ({"importance": 0.9}, {"days": 30, "importance": 0.8}, "conflicting", 0.9,
         ("revoke", "conflict", "b", "a")),
        ({"importance": 0.9, "access": 9}, {"importance": 0.8}, "conflicting", 0.9,
         ("flag", "conflict", None, None)),
        ({"importance": 0.9}, {"days": 3, "importance": 0.8}, "conflicting", 0.9,
         ("flag", "conflict", None, None)),
        ({"importance": 0.9}, {"days": 3, "importance": 0.5}, "conflicting", 0.9,
         ("revoke", "conflict", "b", "a")),
        # low confidence → nothing
        ({}, {"days": 30}, "conflicting", 0.69, ("none", "low_confidence", None, None)),
        ({}, {"days": 30}, "independent", 1.0, ("none", "independent", None, None)),
        # subsumption: the subsumed one goes into the richer one, never the other way round
        ({}, {"days": 30}, "a_subsumes_b", 0.9, ("revoke", "subsumed", "a", "b")),
        ({"days": 30}, {}, "b_subsumes_a", 0.9, ("revoke", "subsumed", "b", "a")),
        ({}, {"protection": "protected"}, "a_subsumes_b", 0.9, ("none", "subsumed", "a", "b")),
        # equivalent: the older one goes, unless only the newer one may be retired
        ({"days": 3}, {"days": 1}, "equivalent", 0.9, ("revoke", "equivalent", "a", "b")),
        ({"days": 1, "protection": "protected"}, {"days": 3}, "equivalent", 0.9,
         ("revoke", "equivalent", "a", "b")),
        ({"protection": "protected"}, {"protection": "immutable"}, "equivalent", 0.9,
         ("none", "equivalent", None, None)),
        # a manual note is never the one retired as subsumed or as the older duplicate
        ({}, {"manual": True}, "a_subsumes_b", 0.9, ("none", "subsumed", "a", "b")),
        ({"days": 1, "manual": True}, {"days": 3}, "equivalent", 0.9,
         ("revoke", "equivalent", "a", "b")),
        ({"manual": True}, {"manual": True, "days": 3}, "equivalent", 0.9,
         ("none", "equivalent", None, None)),
    ],
)
def test_policy_table(a_kw: dict[str, Any], b_kw: dict[str, Any], relation: str,
                      confidence: float, expected: tuple[str, str, str | None, str | None],
                      ) -> None:
    """Code, not the model, decides: newer (>7 days, as configured here) wins, else (unless
    both are important) more used, else later; ties, protected and manual losers are flagged,
    never revoked."""
    a, b = note("a", **a_kw), note("b", **b_kw)
    d = decide(verdict(a, b, relation, confidence), a, b, POLICY)
    action, kind, winner, loser = expected
    assert (d.action, d.kind) == (action, kind)
    if action == "revoke":
        assert (d.winner_id, d.loser_id) == (winner, loser)
    if action == "flag" and winner:
        assert (d.winner_id, d.loser_id) == (winner, loser)


@pytest.mark.parametrize(("b_days", "expected"), [
    # two days later: the later value is current, however much more the old one was read
    (2, ("revoke", "b", "a")),
    (0.05, ("revoke", "b", "a")),  # 72 minutes: later by more than the clock skew (an hour)
    # 59 minutes: within the skew two writers' clocks may disagree by; the more used wins
    (0.041, ("revoke", "a", "b")),
    (-0.041, ("revoke", "a", "b")),  # either way round
    (-2, ("revoke", "a", "b")),  # a is the later one and the more used
])
def test_by_default_the_later_value_wins_beyond_the_clock_skew(
        b_days: float, expected: tuple[str, str, str]) -> None:
    """The default policy (``NEWER_WINS_DAYS`` 0): a value stated more than an hour after the
    other replaces it; closer than that, age says nothing and use decides (a: read 25 times,
    b: twice)."""
    a, b = note("a", access=25), note("b", days=b_days, access=2)
    d = decide(verdict(a, b, "conflicting"), a, b, PolicySettings())
    assert (d.action, d.winner_id, d.loser_id) == expected


@pytest.mark.parametrize(("conversations", "b_minutes", "importance", "expected"), [
    # one conversation, b said 20 minutes after a: b corrects a, though a was read since
    (("c1", "c1"), 20, 0.5, ("revoke", "b", "a")),
    (("c1", "c1"), -20, 0.5, ("revoke", "a", "b")),  # either way round
    (("c1", "c1"), 20, 0.9, ("revoke", "b", "a")),  # important notes too: one clock
    (("c1", "c1"), 0, 0.5, ("revoke", "a", "b")),  # same instant: no order, use decides
    # two conversations, or none recorded: within the skew the more used wins
    (("c1", "c2"), 20, 0.5, ("revoke", "a", "b")),
    ((None, None), 20, 0.5, ("revoke", "a", "b")),
    ((None, None), 20, 0.9, ("flag", None, None)),  # and two important notes are flagged
])
def test_a_value_corrected_later_in_the_same_conversation_replaces_the_first(
        conversations: tuple[str | None, str | None], b_minutes: int, importance: float,
        expected: tuple[str, str | None, str | None]) -> None:
    """Within the hour two writers' clocks may disagree by, one conversation's notes still have
    one clock: the later statement is the correction (a: read 3 times, b: never)."""
    a = replace(note("a", access=3, importance=importance),
                source_conversation_id=conversations[0])
    b = replace(note("b", days=b_minutes / 1440, importance=importance),
                source_conversation_id=conversations[1])
    d = decide(verdict(a, b, "conflicting"), a, b, PolicySettings())
    assert (d.action, d.winner_id, d.loser_id) == expected


@pytest.mark.parametrize(("seqs", "conversations", "kw", "expected"), [
    # one timestamp (a corpus dating only its sessions): the one recorded later is later
    ((1, 2), (None, None), {}, ("revoke", "b", "a")),
    ((2, 1), (None, None), {}, ("revoke", "a", "b")),  # either way round
    # one list's order, like one conversation's: it outranks use and importance (the note
    # listed first has had more time to be read)
    ((1, 2), ("c1", "c1"), {"importance": 0.9}, ("revoke", "b", "a")),
    ((1, 2), (None, None), {"a_access": 3}, ("revoke", "b", "a")),
    ((1, 2), (None, None), {"importance": 0.9}, ("revoke", "b", "a")),
    # no order on record (written before the store kept one, or one number): a tie
    ((None, 2), (None, None), {}, ("flag", None, None)),
    ((None, None), ("c1", "c1"), {}, ("flag", None, None)),
    ((5, 5), (None, None), {}, ("flag", None, None)),
])
def test_notes_stated_at_one_time_are_ordered_as_the_store_recorded_them(
        seqs: tuple[int | None, int | None], conversations: tuple[str | None, str | None],
        kw: dict[str, Any], expected: tuple[str, str | None, str | None]) -> None:
    """Two notes with one ``created_at`` (a session's date on every note of it): the one the
    store recorded later (``write_seq``, an import's line order) was said later."""
    importance = kw.get("importance", 0.5)
    a = replace(note("a", access=kw.get("a_access", 0), importance=importance),
                write_seq=seqs[0], source_conversation_id=conversations[0])
    b = replace(note("b", importance=importance), write_seq=seqs[1],
                source_conversation_id=conversations[1])
    d = decide(verdict(a, b, "conflicting"), a, b, PolicySettings())
    assert (d.action, d.winner_id, d.loser_id) == expected


def test_a_fused_note_was_said_in_each_of_its_sources_conversations() -> None:
    """A fused note carries no source conversation of its own, only its sources' (lineage): a
    value corrected 20 minutes later in one of them still replaces it, important or not."""
    fused = replace(note("f", access=3, importance=0.9), lineage_conversation_ids=("c0", "c1"))
    later = replace(note("b", days=20 / 1440, importance=0.9), source_conversation_id="c1")
    elsewhere = replace(later, source_conversation_id="c2")
    d = decide(verdict(fused, later, "conflicting"), fused, later, PolicySettings())
    assert (d.action, d.winner_id, d.loser_id) == ("revoke", "b", "f")
    d = decide(verdict(fused, elsewhere, "conflicting"), fused, elsewhere, PolicySettings())
    assert d.action == "flag"  # two important notes ordered only by minutes, no shared clock


@pytest.mark.parametrize(("b_days", "expected"), [
    (14, ("revoke", "b")),  # b written before the run's clock (day 20): the newer wins
    (20, ("revoke", "b")),  # exactly at the clock is not after it
    # before: b, dated after the run (an imported wrong year), retired a as "newer"
    (21, ("flag", None)),
    (365 * 73, ("flag", None)),
])
def test_a_note_dated_after_the_run_never_wins_as_the_newer(
        b_days: int, expected: tuple[str, str | None]) -> None:
    """No note is newer than the run judging it: a conflict with one dated after the run's
    clock is flagged for a person, the age rule cannot say which fact came last."""
    policy = PolicySettings(now=T0 + timedelta(days=20))
    a, b = note("a"), note("b", days=b_days)
    d = decide(verdict(a, b, "conflicting"), a, b, policy)
    assert (d.action, d.winner_id if d.action == "revoke" else None) == expected


@pytest.mark.parametrize(
    ("relation", "a_days", "b_days", "expected"),
    [
        ("conflicting", 0, 14, "flag"),   # the suspicious note b would win → flagged
        ("conflicting", 14, 0, "revoke"),  # the suspicious note b loses → fine
        ("b_subsumes_a", 0, 0, "flag"),
        ("a_subsumes_b", 0, 0, "revoke"),
    ],
)
def test_a_note_reading_like_instructions_never_makes_another_lose(
    relation: str, a_days: int, b_days: int, expected: str
) -> None:
    """R14: a suspicious note may be retired but never wins; the pair goes to review instead."""
    a, b = note("a", days=a_days), note("b", days=b_days)
    d = decide(verdict(a, b, relation), a, b, POLICY, suspicious=frozenset({"b"}))
    assert d.action == expected


def test_apply_order_resolves_chains_oldest_first() -> None:
    """Chain A→B→C: (A,B) is applied before (A,C) and (B,C), so A goes into B, then B into C."""
    a, b, c = note("a", days=0), note("b", days=14), note("c", days=28)
    notes = {n.id: n for n in (a, b, c)}
    order = apply_order([verdict(b, c, "conflicting"), verdict(a, c, "conflicting"),
                         verdict(a, b, "conflicting")], notes)
    assert [v.pair.ids for v in order] == [("a", "b"), ("a", "c"), ("b", "c")]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("User prefers dark mode.", "user prefers DARK mode", "equivalent"),
        ("User prefers dark mode", "User prefers dark mode in every editor", "b_subsumes_a"),
        ("User prefers dark mode in every editor", "User prefers dark mode", "a_subsumes_b"),
        ("User likes tea", "User no longer likes tea", "open"),
        ("Customer uses metric units", "Customer uses imperial units", "open"),
        ("The API uses Express", "The API uses Fastify", "open"),
    ],
)
def test_rule_verdict_settles_only_identity_and_containment(a: str, b: str, expected: str) -> None:
    """Without a model only identical/contained pairs are settled; never 'conflicting'."""
    assert rule_verdict(note("a", content=a), note("b", content=b))[0] == expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # a (day 0) fuller, b (day 30) said less: b may have dropped the word that made a wrong
        ("User had a small brown dog", "User has a dog", "open"),
        ("User prefers dark mode in every editor", "User prefers dark mode", "open"),
        ("User prefers dark mode", "User prefers dark mode in every editor", "b_subsumes_a"),
        ("User had a dog", "User has a dog", "open"),  # another tense: maybe another fact
        ("User started a new job at Acme last week", "User started a new job at Acme", "open"),
    ],
)
def test_rule_verdict_never_keeps_an_older_text_over_a_newer_one(a: str, b: str,
                                                                  expected: str) -> None:
    """An audit found older, fuller notes subsuming newer ones ("had a small brown dog" over
    "has a dog", "trinkt Kaffee nicht mehr" over "trinkt Kaffee"), and "last week" re-dated by
    months: the rules now leave such pairs open."""
    assert rule_verdict(note("a", content=a), note("b", content=b, days=30))[0] == expected


LAST_WEEK = "User started a new job at Acme last week"


@pytest.mark.parametrize(("b_days", "expected"), [
    (150, "open"),  # January's move and June's: the rules cannot tell one event from two
    (0.01, "equivalent"),  # within the clock skew: one statement recorded twice
])
def test_the_rules_leave_a_relative_time_said_apart_open(b_days: float, expected: str) -> None:
    """Two statements of "last week" months apart may be two events; a model reads the
    dates, the rules cannot (before, the June note stood for both)."""
    a, b = note("a", content=LAST_WEEK), note("b", content=LAST_WEEK, days=b_days)
    assert rule_verdict(a, b)[0] == expected


def test_the_kept_note_never_takes_a_date_after_the_run_or_moves_its_own_time() -> None:
    """A subsumed or equivalent loser dated after the run's clock (an import's wrong year)
    gives the kept note no date: before, it carried 2029 and read as newer than every note.
    Nor does a kept text dated by its note ("last week") take another's date: it would move."""
    policy = PolicySettings(now=T0 + timedelta(days=20))
    kept = note("a")
    assert restates("subsumed", kept, note("b", days=10), policy)
    assert restates("equivalent", kept, note("b", days=20), policy)
    assert not restates("subsumed", kept, note("b", days=21), policy)
    assert not restates("conflict", kept, note("b", days=10), policy)
    assert not restates("subsumed", note("a", content=LAST_WEEK), note("b", days=10), policy)


@pytest.mark.parametrize(("a_kw", "b_kw"), [
    # A1, A2: the older note protected; the equivalence swapped and retired the newer one
    (dict(content="The user is vegetarian", protection="protected"),
     dict(content="The user was vegetarian", days=59)),
    (dict(content="User has a cat named Mochi", protection="protected"),
     dict(content="User had a cat named Mochi", days=59)),
    # A3: a manual note
    (dict(content="The user is vegetarian", manual=True),
     dict(content="The user was vegetarian", days=59)),
    # A4: one time, the more read past note kept over the later recorded present one
    (dict(content="User was vegan", access=5), dict(content="User is vegan")),
    # A5: "is vegan" retired into a note dated 2099
    (dict(content="User is vegan"), dict(content="User was vegan", days=26_000)),
])
def test_a_change_of_tense_stays_open(a_kw: dict[str, Any], b_kw: dict[str, Any]) -> None:
    """"is" / "was", "has" / "had" were "same content words": the equivalence then ranked by
    date, then reads, swapped a loser that may not lose, and skipped the conflict safeguards.
    An audit confirmed each of these retiring the current value; the rules leave them open."""
    a, b = note("a", **a_kw), note("b", **b_kw)
    assert rule_verdict(a, b)[0] == OPEN
    assert rule_verdict(b, a)[0] == OPEN


PEANUTS = "User is allergic to peanuts, not to shellfish"


@pytest.mark.parametrize(("a_kw", "b_kw"), [
    (dict(content=PEANUTS), dict(content="User is not allergic to peanuts, but to shellfish",
                                 days=59)),  # B1 (consolidation merged it)
    (dict(content=PEANUTS, manual=True),
     dict(content="User is not allergic to peanuts, but to shellfish", days=59)),  # B2
    (dict(content=PEANUTS, protection="protected"),
     dict(content="User is not allergic to peanuts, but to shellfish", days=59)),  # B3
    (dict(content="Send the weekly reports to Anna, not to Bob", manual=True),
     dict(content="Send the weekly reports not to Anna, but to Bob", days=59)),  # B4
    (dict(content="User never drinks coffee at work, but at home"),
     dict(content="User drinks coffee at work, but never at home", days=59)),
])
def test_a_moved_negation_stays_open(a_kw: dict[str, Any], b_kw: dict[str, Any]) -> None:
    """The negations were compared as a set, so a negation moved to another word read as the
    same content: a manual note revoked, a protected older one kept over the newer value."""
    a, b = note("a", **a_kw), note("b", **b_kw)
    assert rule_verdict(a, b)[0] == OPEN
    assert rule_verdict(b, a)[0] == OPEN

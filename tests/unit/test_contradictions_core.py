"""Pure contradiction planning and policy: pair selection, verdict checks, who wins."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from worker.domain.types import Note, Scope
from worker.phases.contradictions.core import (
    CandidatePair,
    PolicySettings,
    Verdict,
    apply_order,
    batches,
    check_verdicts,
    decide,
    plan_pairs,
    prompt_pairs,
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
        # full tie → flagged, nothing revoked
        ({}, {}, "conflicting", 0.9, ("flag", "conflict", None, None)),
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
        # both of high importance → flagged even though one is newer
        ({"importance": 0.9}, {"days": 30, "importance": 0.8}, "conflicting", 0.9,
         ("flag", "conflict", None, None)),
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
def test_policy_table(a_kw: dict, b_kw: dict, relation: str, confidence: float,
                      expected: tuple) -> None:
    """Code, not the model, decides: newer (>7 days) wins, else more used; ties, protected
    and manual losers are flagged, never revoked."""
    a, b = note("a", **a_kw), note("b", **b_kw)
    d = decide(verdict(a, b, relation, confidence), a, b, POLICY)
    action, kind, winner, loser = expected
    assert (d.action, d.kind) == (action, kind)
    if action == "revoke":
        assert (d.winner_id, d.loser_id) == (winner, loser)
    if action == "flag" and winner:
        assert (d.winner_id, d.loser_id) == (winner, loser)


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


def test_plan_pairs_dedupes_and_skips_self_same_run_and_known() -> None:
    """A–B and B–A are one pair, no self pairs, same-run pairs and remembered verdicts skipped."""
    notes = [note("n1"), note("n2"), note("n3"), note("n4")]
    neighbours = [(0, 1, 0.95), (1, 0, 0.95), (2, 2, 1.0), (2, 3, 0.9), (0, 3, 0.8), (1, 2, 0.75)]
    from worker.domain.types import fingerprint_notes

    known = {fingerprint_notes([notes[0], notes[3]])}
    plan = plan_pairs(notes, neighbours, produced_this_run={"n3", "n4"}, known_fingerprints=known,
                      judged_id_pairs=set(), max_pairs=None)
    assert [p.ids for p in plan.selected] == [("n1", "n2"), ("n2", "n3")]
    assert (plan.considered, plan.skipped_same_run, plan.remembered) == (4, 1, 1)


def test_plan_pairs_never_judged_first_then_most_similar_capped() -> None:
    """Fair selection: pairs never judged come first, then by similarity; the rest deferred."""
    notes = [note(f"n{k}") for k in range(5)]
    neighbours = [(0, 1, 0.99), (1, 2, 0.98), (2, 3, 0.80), (3, 4, 0.75)]
    plan = plan_pairs(notes, neighbours, produced_this_run=set(), known_fingerprints=set(),
                      judged_id_pairs={("n0", "n1"), ("n1", "n2")}, max_pairs=3)
    assert [p.ids for p in plan.selected] == [("n2", "n3"), ("n3", "n4"), ("n0", "n1")]
    assert plan.deferred == 1


def test_plan_pairs_never_crosses_scopes() -> None:
    """A neighbour pair of notes from two scopes is never a candidate (R11)."""
    notes = [note("n1"), note("n2", scope=Scope("agent-1", "u2"))]
    plan = plan_pairs(notes, [(0, 1, 1.0)], produced_this_run=set(), known_fingerprints=set(),
                      judged_id_pairs=set(), max_pairs=None)
    assert plan.selected == []


def test_check_verdicts_drops_missing_unknown_and_doubled_pairs() -> None:
    """Each known pair needs exactly one verdict; anything else changes nothing for that pair."""
    by_pair = {f"p{k}": CandidatePair(f"a{k}", f"b{k}", 0.9, f"f{k}") for k in (1, 2, 3, 4)}
    replied = [
        ("p1", "conflicting", 0.9, "r"),
        ("p2", "equivalent", 0.9, "r"), ("p2", "independent", 0.9, "r"),
        ("p9", "conflicting", 0.9, "r"),
        ("p4", "contradicts", 0.9, "r"),
    ]
    verdicts, dropped = check_verdicts(replied, by_pair)
    assert [v.pair.a_id for v in verdicts] == ["a1"]
    assert dropped == {"p2": "more than one verdict for the pair", "p9": "unknown pair id",
                       "p3": "no verdict for the pair", "p4": "unknown relation 'contradicts'"}


def test_prompt_pairs_alias_notes_and_hide_ids() -> None:
    """The model sees pair ids p1.. and note aliases n1.. reused across pairs, never stored ids."""
    n = {k: note(k, content=f"text {i}") for i, k in enumerate(("x-id", "y-id", "z-id"))}
    items, by_pair = prompt_pairs(
        [CandidatePair("x-id", "y-id", 0.9, "f"), CandidatePair("x-id", "z-id", 0.8, "g")], n)
    assert [i["pair"] for i in items] == ["p1", "p2"]
    assert [(i["a"]["alias"], i["b"]["alias"]) for i in items] == [("n1", "n2"), ("n1", "n3")]
    assert "x-id" not in repr(items)
    assert by_pair["p2"].b_id == "z-id"
    assert [len(b) for b in batches(list(by_pair.values()) * 3, 4)] == [4, 2]


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

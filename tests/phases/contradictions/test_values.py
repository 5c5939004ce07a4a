"""A topic's answer turned into policy decisions: values collapsed, then settled oldest first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from worker.domain.types import Note, Scope
from worker.phases.contradictions.core import PolicySettings
from worker.phases.contradictions.topics import Attribute, Topic, TopicVerdict, ValueClass
from worker.phases.contradictions.values import topic_decisions

T0 = datetime(2026, 5, 1, tzinfo=UTC)
POLICY = PolicySettings()


def note(nid: str, days: float = 0, **kw: object) -> Note:
    return Note(id=nid, scope=Scope("a"), content=f"text of {nid}",
                created_at=T0 + timedelta(days=days), **kw)  # type: ignore[arg-type]


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

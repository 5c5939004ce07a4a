"""Pure policy for the contradictions phase: what a verdict about a pair does, and the rule judge.

No I/O here. Topics (``topics.py``) turn a model's answer into pair verdicts; ``decide`` turns
each into a ``Decision`` the service applies in a short transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from worker.domain.types import Note, normalise_text, recorded_later, said_order
from worker.text.temporal import relative_time_expressions

PHASE = "contradictions"
PROMPT = "contradictions"
JUDGEMENT_KIND = "pair"


class Relation(StrEnum):
    """ROAM's five relations between two notes (a, b)."""

    INDEPENDENT = "independent"
    EQUIVALENT = "equivalent"
    A_SUBSUMES_B = "a_subsumes_b"
    B_SUBSUMES_A = "b_subsumes_a"
    CONFLICTING = "conflicting"


OPEN = "open"  # the rule judge could not settle the pair; it waits for a model or the host


class Action(StrEnum):
    """What was done with a verdict (``action`` in the recorded entries)."""

    REVOKE = "revoke"  # the loser revoked into the winner
    FLAG = "flag"  # both kept, a review opened
    NONE = "none"  # nothing to do (independent, low confidence, the loser may not lose)
    SKIPPED = "skipped"  # a note of the pair was already retired in this run
    GUARDED = "guarded"  # the blast-radius guard held the revocation back for a later run
    STALE = "stale"  # a note changed since the plan read it
    CONFIRM = "confirm"  # only asking the scope whole found it: asked again alone first


@dataclass(frozen=True)
class PolicySettings:
    """The slice of ``ContradictionSettings`` the policy reads (kept plain for table tests)."""

    min_confidence: float = 0.7
    newer_wins_days: int = 0
    high_importance: float = 0.8
    now: datetime | None = None  # the run's clock: no note is newer than the run
    # Two notes stated closer together than this are not told apart by age: the clocks of
    # two writers disagree, a host's timezone slips (``worker.clock.SKEW``, passed in).
    skew: timedelta = timedelta(hours=1)

    @property
    def newer_wins_after(self) -> timedelta:
        """How much later a value must be stated to replace the other (more than this)."""
        return max(timedelta(days=self.newer_wins_days), self.skew)


@dataclass(frozen=True)
class CandidatePair:
    """One unordered pair of notes in a scope; ``a_id < b_id`` always."""

    a_id: str
    b_id: str
    similarity: float
    fingerprint: str
    judged_before: bool = False  # this id pair has a verdict at some earlier version
    sources: tuple[str, ...] = ()  # which candidate searches proposed it (worker.similarity)

    @property
    def ids(self) -> tuple[str, str]:
        return (self.a_id, self.b_id)


@dataclass(frozen=True)
class Verdict:
    pair: CandidatePair
    relation: str
    confidence: float
    reason: str


@dataclass(frozen=True)
class Decision:
    """What code does with one verdict.

    action: ``revoke`` (loser revoked into winner), ``flag`` (both kept, review), ``none``.
    kind: ``conflict`` | ``equivalent`` | ``subsumed`` | ``independent`` | ``low_confidence``.
    """

    action: str  # an Action value
    kind: str
    winner_id: str | None = None
    loser_id: str | None = None
    why: str = ""


def created(note: Note) -> datetime:
    """When the note was stated; every note the phase reads has a date (the load's column is
    never null)."""
    assert note.created_at is not None
    return note.created_at


def decide(
    verdict: Verdict, a: Note, b: Note, policy: PolicySettings,
    suspicious: frozenset[str] = frozenset(),
) -> Decision:
    """Policy in code: the model only classified the pair (a = ``pair.a_id``).

    ``suspicious`` holds ids of notes whose text reads like instructions (R14): such a note may
    lose, but never makes another note lose — that pair is flagged for a person instead.
    """
    rel = verdict.relation
    if rel == Relation.INDEPENDENT:
        return Decision(Action.NONE, "independent")
    if verdict.confidence < policy.min_confidence:
        return Decision(Action.NONE, "low_confidence", why="confidence below the minimum")
    if rel == Relation.CONFLICTING:
        decision = _decide_conflict(a, b, policy)
    elif rel == Relation.A_SUBSUMES_B:
        decision = _merge(winner=a, loser=b, kind="subsumed")
    elif rel == Relation.B_SUBSUMES_A:
        decision = _merge(winner=b, loser=a, kind="subsumed")
    else:
        # Equivalent: the older one goes, unless only the newer one may be retired.
        older, newer = sorted((a, b), key=lambda n: (created(n), n.access_count,
                                                      n.write_seq or 0, n.id))
        if not _may_lose(older) and _may_lose(newer):
            older, newer = newer, older
        decision = _merge(winner=newer, loser=older, kind="equivalent")
    if decision.action == Action.REVOKE and decision.winner_id in suspicious:
        return Decision(Action.FLAG, decision.kind, decision.winner_id, decision.loser_id,
                        why="the winning note reads like instructions")
    return decision


def restates(kind: str, winner: Note, loser: Note, policy: PolicySettings) -> bool:
    """Whether the note kept for a subsumed or equivalent one takes the loser's later date
    (``Change.restate``): one fact said twice holds as of its later statement. Never a date
    after the run's clock (an import's wrong year made the kept note the newest of every note
    until then), nor for a kept text dated by its note ("started at Acme last week" moved
    from January to June). A conflict's winner keeps its own date."""
    if kind == "conflict" or relative_time_expressions(winner.content):
        return False
    return policy.now is None or created(loser) <= policy.now


def _may_lose(note: Note) -> bool:
    # A person wrote a manual note (R26): it may win, but no verdict retires it in favour of
    # another note, however new or used that one is. Protected and immutable notes likewise.
    return note.retirable and note.is_auto_generated


def _why_kept(note: Note) -> str:
    return note.protection if not note.retirable else "manual"


def _merge(*, winner: Note, loser: Note, kind: str) -> Decision:
    # Never the other way round: a subsumed note that may not be retired simply stays.
    if not _may_lose(loser):
        return Decision(Action.NONE, kind, winner.id, loser.id,
                        why=f"the note to retire is {_why_kept(loser)}")
    return Decision(Action.REVOKE, kind, winner.id, loser.id)


def _decide_conflict(a: Note, b: Note, policy: PolicySettings) -> Decision:
    """The evidence, strongest first: stated later by more than the clock skew; stated later in
    the same conversation, or stated and also recorded later by the store (one clock either
    way; at one same time, recorded later); then, if not both notes are of high importance,
    more use, then stated later at all. A full tie, or two important notes told apart only by
    weak evidence, is flagged."""
    if policy.now is not None and max(created(a), created(b)) > policy.now:
        # A note dated after the run (an import's wrong year, 2099) would be "newer" than
        # every note written until then and retire each one it conflicts with.
        return Decision(Action.FLAG, "conflict",
                        why="a note is dated after the run's clock; no rule can say which is newer")
    gap = created(a) - created(b)
    # The order the store recorded the two in (an import's lines, the moments `remember`
    # wrote them: one clock): alone, between notes of one timestamp (a corpus that dates only
    # its sessions); beside the timestamps, a second witness of which came later.
    recorded = recorded_later(a, b)
    after = gap > timedelta(0) if gap else recorded
    later, earlier = (a, b) if after else (b, a)
    # The value stated later is the current one: a preference changed two days ago has
    # changed, however often the old one was read since (the old note has had more time to
    # be read: "more used wins" there would retire every new value for a while). Importance
    # says how much a fact matters, not that it cannot change.
    if abs(gap) > policy.newer_wins_after:
        return _retire(later, earlier, "newer note wins")
    if after is not None and _same_conversation(a, b):
        # One conversation, one writer's clock: the skew cannot reorder it. A value corrected
        # minutes later replaces the first statement, even one read in between.
        return _retire(later, earlier, "corrected later in the same conversation")
    if after is not None and recorded == after:
        # Recorded in the order they are dated, or at one time recorded in that order: the
        # store's one clock says what the writers' clocks say, and no skew reorders both.
        return _retire(later, earlier, "stated and recorded later" if gap
                       else "recorded later at the same time")
    if a.importance >= policy.high_importance and b.importance >= policy.high_importance:
        return Decision(Action.FLAG, "conflict",
                        why="both notes are of high importance and neither is decisively newer")
    if a.access_count != b.access_count:
        winner, loser = (a, b) if a.access_count > b.access_count else (b, a)
        return _retire(winner, loser, "more used note wins")
    if gap:
        # Within the skew and equally used: the later timestamp is still the best evidence
        # there is (a flag would leave both values active until a person looks).
        return _retire(later, earlier, "stated later, equally used")
    return Decision(Action.FLAG, "conflict", why="no rule picks a winner (same time and use)")


def _same_conversation(a: Note, b: Note) -> bool:
    """Both said in one conversation; a fused note was said in each of its sources' ones."""
    return bool(_conversations(a) & _conversations(b))


def _conversations(note: Note) -> set[str]:
    own = {note.source_conversation_id} if note.source_conversation_id is not None else set()
    return own | set(note.lineage_conversation_ids)


def _retire(winner: Note, loser: Note, why: str) -> Decision:
    if not _may_lose(loser):
        return Decision(Action.FLAG, "conflict", winner.id, loser.id,
                        why=f"{why}, but the loser is {_why_kept(loser)}")
    return Decision(Action.REVOKE, "conflict", winner.id, loser.id, why=why)


def relation_of(kind: str, winner_id: str, pair: CandidatePair) -> str:
    """The pair relation a revocation of ``kind`` into ``winner_id`` was decided on."""
    if kind == "conflict":
        return Relation.CONFLICTING.value
    if kind == "subsumed":
        return (Relation.A_SUBSUMES_B if winner_id == pair.a_id else Relation.B_SUBSUMES_A).value
    return Relation.EQUIVALENT.value


def apply_order(verdicts: Iterable[Verdict], notes: dict[str, Note]) -> list[Verdict]:
    """Oldest pairs first, so a chain A→B→C resolves in one pass: A into B, then B into C."""

    def key(v: Verdict) -> tuple[tuple[datetime, int], tuple[datetime, int], str, str]:
        ta, tb = said_order(notes[v.pair.a_id]), said_order(notes[v.pair.b_id])
        return (min(ta, tb), max(ta, tb), v.pair.a_id, v.pair.b_id)

    return sorted(verdicts, key=key)


def rule_verdict(a: Note, b: Note, skew: timedelta = PolicySettings.skew) -> tuple[str, str]:
    """The no-LLM judge: identical after normalisation, or one note contained in the other.

    Never ``conflicting``; anything else is ``open``. Containment is word-level and refuses an
    added negation, number or name (worker.llm.rules), so "likes tea" is not "no longer likes tea";
    and a fuller note keeps its text over a newer one only in the same words (``keeps_over``):
    "User had a small brown dog" (January) does not subsume "User has a dog" (March). A note
    that says a relative time ("last week") and would be retired into one stated more than the
    clock ``skew`` apart stays open: two statements of "moved house last week" in January and
    in June may be two events, which the rules cannot tell and a model reading the dates can.
    """
    relation, reason = _by_words(a, b)
    retired = {Relation.EQUIVALENT.value: (a, b), Relation.B_SUBSUMES_A.value: (a,),
               Relation.A_SUBSUMES_B.value: (b,)}.get(relation, ())
    if abs(created(a) - created(b)) > skew and any(relative_time_expressions(n.content)
                                                   for n in retired):
        return OPEN, "a relative time is dated by its own note: rules cannot settle this pair"
    return relation, reason


def _by_words(a: Note, b: Note) -> tuple[str, str]:
    from worker.llm.rules import keeps_over, same_or_contained

    if normalise_text(a.content) == normalise_text(b.content):
        return Relation.EQUIVALENT.value, "identical after normalisation"
    a_in_b = same_or_contained(a.content, b.content)
    b_in_a = same_or_contained(b.content, a.content)
    if a_in_b and b_in_a:
        return Relation.EQUIVALENT.value, "same content words"
    if a_in_b and keeps_over(b, a):
        return Relation.B_SUBSUMES_A.value, "a is contained in b"
    if b_in_a and keeps_over(a, b):
        return Relation.A_SUBSUMES_B.value, "b is contained in a"
    return OPEN, "rules cannot settle this pair"


def resolved_comment(winner_id: str, kind: str, reason: str) -> str:
    if kind == "conflict":
        return f"[Contradiction resolved: superseded by {winner_id}. {reason}]"
    return f"[Contradiction check: {kind} into {winner_id}. {reason}]"


def flagged_comment(other_id: str, reason: str) -> str:
    return f"[Contradiction flagged for review: conflicts with {other_id}. {reason}]"


def append_comment(existing: str | None, line: str) -> str:
    return f"{existing}\n{line}" if existing else line

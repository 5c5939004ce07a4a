"""Pure planning for the contradictions phase: which pairs to ask about, and what a verdict does.

No I/O here. The service loads a scope, calls these functions, talks to the judge and applies
the resulting ``Decision`` values in short transactions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from worker.domain.types import Note, fingerprint_notes, normalise_text


class Relation(StrEnum):
    """ROAM's five relations between two notes (a, b)."""

    INDEPENDENT = "independent"
    EQUIVALENT = "equivalent"
    A_SUBSUMES_B = "a_subsumes_b"
    B_SUBSUMES_A = "b_subsumes_a"
    CONFLICTING = "conflicting"


OPEN = "open"  # the rule judge could not settle the pair; it waits for a model or the host


@dataclass(frozen=True)
class PolicySettings:
    """The slice of ``ContradictionSettings`` the policy reads (kept plain for table tests)."""

    min_confidence: float = 0.7
    newer_wins_days: int = 7
    high_importance: float = 0.8


@dataclass(frozen=True)
class CandidatePair:
    """One unordered pair of notes in a scope; ``a_id < b_id`` always."""

    a_id: str
    b_id: str
    similarity: float
    fingerprint: str
    judged_before: bool = False  # this id pair has a verdict at some earlier version

    @property
    def ids(self) -> tuple[str, str]:
        return (self.a_id, self.b_id)


@dataclass
class PairPlan:
    """What the search found in one scope and what this run will ask about."""

    selected: list[CandidatePair] = field(default_factory=list)
    considered: int = 0
    skipped_same_run: int = 0
    remembered: int = 0
    deferred: int = 0


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

    action: str
    kind: str
    winner_id: str | None = None
    loser_id: str | None = None
    why: str = ""


def plan_pairs(
    notes: Sequence[Note],
    neighbours: Iterable[tuple[int, int, float]],
    *,
    produced_this_run: set[str],
    known_fingerprints: set[str],
    judged_id_pairs: set[tuple[str, str]],
    max_pairs: int | None,
) -> PairPlan:
    """Unique unordered pairs, minus same-run pairs and remembered verdicts, chosen fairly.

    Fair: pairs never judged at any version come first, then the most similar; so notes added
    late cannot be starved by an old, very similar pair that keeps changing.
    """
    plan = PairPlan()
    seen: set[tuple[str, str]] = set()
    fresh: list[CandidatePair] = []
    for i, j, sim in neighbours:
        a, b = notes[i], notes[j]
        if a.id == b.id or a.scope != b.scope:
            continue
        if b.id < a.id:
            a, b = b, a
        key = (a.id, b.id)
        if key in seen:
            continue
        seen.add(key)
        plan.considered += 1
        if a.id in produced_this_run and b.id in produced_this_run:
            plan.skipped_same_run += 1
            continue
        fp = fingerprint_notes([a, b])
        if fp in known_fingerprints:
            plan.remembered += 1
            continue
        fresh.append(CandidatePair(a.id, b.id, round(float(sim), 6), fp, key in judged_id_pairs))
    fresh.sort(key=lambda p: (p.judged_before, -p.similarity, p.a_id, p.b_id))
    if max_pairs is not None and len(fresh) > max_pairs:
        plan.deferred = len(fresh) - max_pairs
        fresh = fresh[:max_pairs]
    plan.selected = fresh
    return plan


def batches(pairs: Sequence[CandidatePair], size: int) -> list[list[CandidatePair]]:
    return [list(pairs[k : k + size]) for k in range(0, len(pairs), max(1, size))]


def prompt_pairs(
    batch: Sequence[CandidatePair], notes: dict[str, Note]
) -> tuple[list[dict[str, object]], dict[str, CandidatePair]]:
    """The JSON the model sees: pair ids p1.., note aliases n1.. (never the stored ids)."""
    aliases: dict[str, str] = {}
    items: list[dict[str, object]] = []
    by_pair: dict[str, CandidatePair] = {}
    for k, pair in enumerate(batch, start=1):
        pid = f"p{k}"
        by_pair[pid] = pair
        sides = []
        for nid in pair.ids:
            alias = aliases.setdefault(nid, f"n{len(aliases) + 1}")
            sides.append({"alias": alias, "type": notes[nid].type, "text": notes[nid].content})
        items.append({"pair": pid, "a": sides[0], "b": sides[1]})
    return items, by_pair


def check_verdicts(
    replied: Sequence[tuple[str, str, float, str]], by_pair: dict[str, CandidatePair]
) -> tuple[list[Verdict], dict[str, str]]:
    """Keep exactly one verdict per known pair; every other pair is dropped with its reason.

    ``replied`` holds (pair, relation, confidence, reason) as the model sent them.
    """
    counts: dict[str, int] = {}
    for pid, *_ in replied:
        counts[pid] = counts.get(pid, 0) + 1
    dropped: dict[str, str] = {}
    verdicts: list[Verdict] = []
    for pid, relation, confidence, reason in replied:
        if pid not in by_pair:
            dropped[pid] = "unknown pair id"
        elif counts[pid] > 1:
            dropped[pid] = "more than one verdict for the pair"
        elif relation not in {r.value for r in Relation}:
            dropped[pid] = f"unknown relation {relation[:40]!r}"
        else:
            verdicts.append(Verdict(by_pair[pid], relation, float(confidence), reason[:300]))
    for pid in by_pair:
        if pid not in counts:
            dropped[pid] = "no verdict for the pair"
    return verdicts, dropped


def problems(replied: Sequence[tuple[str, str, float, str]], by_pair: dict[str, CandidatePair]) -> str:
    """One line for a re-ask, empty when the reply is complete and clean."""
    _, dropped = check_verdicts(replied, by_pair)
    return "; ".join(f"{pid}: {why}" for pid, why in sorted(dropped.items()))


def _created(note: Note) -> datetime:
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
        return Decision("none", "independent")
    if verdict.confidence < policy.min_confidence:
        return Decision("none", "low_confidence", why="confidence below the minimum")
    if rel == Relation.CONFLICTING:
        decision = _decide_conflict(a, b, policy)
    elif rel == Relation.A_SUBSUMES_B:
        decision = _merge(winner=a, loser=b, kind="subsumed")
    elif rel == Relation.B_SUBSUMES_A:
        decision = _merge(winner=b, loser=a, kind="subsumed")
    else:
        # Equivalent: the older one goes, unless only the newer one may be retired.
        older, newer = sorted((a, b), key=lambda n: (_created(n), n.access_count, n.id))
        if not _may_lose(older) and _may_lose(newer):
            older, newer = newer, older
        decision = _merge(winner=newer, loser=older, kind="equivalent")
    if decision.action == "revoke" and decision.winner_id in suspicious:
        return Decision("flag", decision.kind, decision.winner_id, decision.loser_id,
                        why="the winning note reads like instructions")
    return decision


def _may_lose(note: Note) -> bool:
    # A person wrote a manual note (R26): it may win, but no verdict retires it in favour of
    # another note, however new or used that one is. Protected and immutable notes likewise.
    return note.retirable and note.is_auto_generated


def _why_kept(note: Note) -> str:
    return note.protection if not note.retirable else "manual"


def _merge(*, winner: Note, loser: Note, kind: str) -> Decision:
    # Never the other way round: a subsumed note that may not be retired simply stays.
    if not _may_lose(loser):
        return Decision("none", kind, winner.id, loser.id,
                        why=f"the note to retire is {_why_kept(loser)}")
    return Decision("revoke", kind, winner.id, loser.id)


def _decide_conflict(a: Note, b: Note, policy: PolicySettings) -> Decision:
    if a.importance >= policy.high_importance and b.importance >= policy.high_importance:
        return Decision("flag", "conflict", why="both notes are of high importance")
    gap = _created(a) - _created(b)
    if abs(gap) > timedelta(days=policy.newer_wins_days):
        winner, loser = (a, b) if gap > timedelta(0) else (b, a)
        why = "newer note wins"
    elif a.access_count != b.access_count:
        winner, loser = (a, b) if a.access_count > b.access_count else (b, a)
        why = "more used note wins"
    else:
        return Decision("flag", "conflict", why="no rule picks a winner (same age and use)")
    if not _may_lose(loser):
        return Decision("flag", "conflict", winner.id, loser.id,
                        why=f"{why}, but the loser is {_why_kept(loser)}")
    return Decision("revoke", "conflict", winner.id, loser.id, why=why)


def apply_order(verdicts: Iterable[Verdict], notes: dict[str, Note]) -> list[Verdict]:
    """Oldest pairs first, so a chain A→B→C resolves in one pass: A into B, then B into C."""

    def key(v: Verdict) -> tuple[datetime, datetime, str, str]:
        ta, tb = _created(notes[v.pair.a_id]), _created(notes[v.pair.b_id])
        return (min(ta, tb), max(ta, tb), v.pair.a_id, v.pair.b_id)

    return sorted(verdicts, key=key)


def rule_verdict(a: Note, b: Note) -> tuple[str, str]:
    """The no-LLM judge: identical after normalisation, or one note contained in the other.

    Never ``conflicting``; anything else is ``open``. Containment is word-level and refuses an
    added negation, number or name (worker.llm.rules), so "likes tea" is not "no longer likes tea".
    """
    from worker.llm.rules import same_or_contained

    if normalise_text(a.content) == normalise_text(b.content):
        return Relation.EQUIVALENT.value, "identical after normalisation"
    a_in_b = same_or_contained(a.content, b.content)
    b_in_a = same_or_contained(b.content, a.content)
    if a_in_b and b_in_a:
        return Relation.EQUIVALENT.value, "same content words"
    if a_in_b:
        return Relation.B_SUBSUMES_A.value, "a is contained in b"
    if b_in_a:
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

"""Pure policy over a topic's answer: each value's notes collapsed into one, then the values
settled oldest first against every value still standing (``core.decide`` for each pair), so
A→B→C ends with C and no pair of an attribute is left undecided while both its notes stay."""

from __future__ import annotations

from dataclasses import dataclass, replace

from worker.domain.types import Note, said_order
from worker.phases.contradictions.core import (
    Action,
    CandidatePair,
    Decision,
    PolicySettings,
    Relation,
    Verdict,
    created,
    decide,
)
from worker.phases.contradictions.topics import Attribute, TopicVerdict, ValueClass


@dataclass(frozen=True)
class PairDecision:
    """One policy decision inside a topic, in the order it must be applied."""

    verdict: Verdict
    decision: Decision


def topic_decisions(
    verdict: TopicVerdict, notes: dict[str, Note], policy: PolicySettings,
    suspicious: frozenset[str] = frozenset(),
) -> list[PairDecision]:
    """Per attribute: collapse each value's notes into one, then settle values oldest first.

    A value restated later counts from its latest statement (A, B, A again: A is current).
    Every decision comes from ``core.decide``: newer by more than the window wins, then more
    use; protected and manual losers are flagged, never revoked.
    """
    out: list[PairDecision] = []
    for attr in verdict.attributes:
        values = [_collapse(cls, attr, notes, policy, suspicious, out) for cls in attr.values]
        values.sort(key=lambda v: (said_order(v[0]), v[0].id))
        if not values:
            continue
        # Every value still standing meets each newer one: after a tie both stand, and the
        # next value must be settled against each of them (a tied older value left out would
        # stay unjudged and be asked again next run); so does a beaten value whose notes stay.
        standing = [values[0]]
        for challenger in values[1:]:
            settled = _settle(challenger, standing, attr, notes, policy, suspicious, out)
            if settled is None:  # low confidence: nothing about this attribute holds
                break
            standing = settled
    return out


_Value = tuple[Note, list[Note]]  # a value: the note it counts as, and its notes still active


def _settle(
    challenger: _Value, standing: list[_Value], attr: Attribute, notes: dict[str, Note],
    policy: PolicySettings, suspicious: frozenset[str], out: list[PairDecision],
) -> list[_Value] | None:
    """Settle one newer value against every standing one; the values standing after it. A
    value that lost stands no more once its notes are retired (it meets no further value:
    that verdict would be wasted); a loser whose notes stay (protected or manual: flagged)
    goes on standing, so each later value settles against it too and none of its pairs is
    left to be asked again next run."""
    survivors: list[_Value] = []
    for k, holder in enumerate(standing):
        # Which value is current is decided on the values (latest statement, most use),
        # never on a protection: a protected loser is flagged below, not made the winner.
        plain = [replace(v[0], protection="standard", is_auto_generated=True)
                 for v in (holder, challenger)]
        first = decide(Verdict(CandidatePair(plain[0].id, plain[1].id, 0.0, ""),
                               Relation.CONFLICTING.value, attr.confidence, attr.name),
                       plain[0], plain[1], policy)
        if first.action == "none":
            return None
        challenger_won = first.winner_id == challenger[0].id
        winner, loser = (challenger, holder) if challenger_won else (holder, challenger)
        kept = _against(winner, loser, attr, policy, suspicious, out)
        if first.winner_id is None:  # a tie: both values stand
            survivors.append(holder)
        elif challenger_won:
            survivors.extend([(holder[0], kept)] if kept else [])
        else:
            survivors.append(holder)
            if not kept:
                return [*survivors, *standing[k + 1:]]
            challenger = (challenger[0], kept)
    return [*survivors, challenger]


def _against(winner: _Value, loser: _Value, attr: Attribute, policy: PolicySettings,
             suspicious: frozenset[str], out: list[PairDecision]) -> list[Note]:
    """Each of the loser's notes decided against the winner's; the ones that stay active."""
    kept = []
    for member in loser[1]:
        a = replace(winner[1][0], created_at=created(winner[0]),
                    write_seq=winner[0].write_seq, access_count=winner[0].access_count)
        b = replace(member, created_at=created(loser[0]), write_seq=loser[0].write_seq,
                    access_count=loser[0].access_count)
        pd = PairDecision(*_decide(a, b, Relation.CONFLICTING, attr, policy, suspicious))
        out.append(pd)
        if pd.decision.action != Action.REVOKE:
            kept.append(member)
    return kept


def _collapse(
    cls: ValueClass, attr: Attribute, notes: dict[str, Note], policy: PolicySettings,
    suspicious: frozenset[str], out: list[PairDecision],
) -> tuple[Note, list[Note]]:
    members = sorted((notes[i] for i in cls.note_ids), key=lambda n: (said_order(n), n.id))
    latest = members[-1]
    kept: list[Note] = []
    if cls.fullest is not None:
        survivor = notes[cls.fullest]
        for m in members:
            if m.id == survivor.id:
                continue
            verdict, decision = _decide(survivor, m, Relation.A_SUBSUMES_B, attr, policy,
                                        suspicious)
            out.append(PairDecision(verdict, decision))
            if decision.action != "revoke":
                kept.append(m)
    else:
        survivor = members[0]
        for m in members[1:]:
            verdict, decision = _decide(survivor, m, Relation.EQUIVALENT, attr, policy,
                                        suspicious)
            out.append(PairDecision(verdict, decision))
            winner = notes.get(decision.winner_id or "", m)
            if decision.action != "revoke":
                kept.append(survivor if winner.id == m.id else m)
            survivor = winner
    # The value counts from its latest statement.
    rep = replace(survivor, created_at=created(latest), write_seq=latest.write_seq,
                  access_count=max(n.access_count for n in members))
    return rep, [survivor, *kept]


def _decide(
    a: Note, b: Note, relation: Relation, attr: Attribute, policy: PolicySettings,
    suspicious: frozenset[str],
) -> tuple[Verdict, Decision]:
    x, y = (a, b) if a.id < b.id else (b, a)
    rel = relation.value
    if relation == Relation.A_SUBSUMES_B and x.id != a.id:
        rel = Relation.B_SUBSUMES_A.value
    pair = CandidatePair(x.id, y.id, 0.0, "")
    verdict = Verdict(pair, rel, attr.confidence, attr.reason or attr.name)
    return verdict, decide(verdict, x, y, policy, suspicious)

"""A retirement only asking the scope whole found is asked again alone before it applies.

Asked about a whole small scope (or a large one's pieces), a model sorts dozens of notes into
attributes at once, and one that calls two attributes one ("diet" and "drinks") retires the
current value of one into the other's newest: a topic of 30 notes lumped lost every fact but
one. A pair no text signal found (no cosine, frame, shared term, containment or cluster: the
``small_scope`` source alone) is such an answer's only evidence, so its retirement waits: the
pair is asked as a topic of its own in a later round of the run, and applies when that answer
says so too. A pair some signal found, or a topic of two notes, applies at once. With a
faithful model the end state is the same, a call later (``retirements_confirming`` counts
them); a lumping one must make the same mistake twice, about two notes alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from worker.domain.types import Note, fingerprint_notes
from worker.phases.contradictions.core import Action, CandidatePair, created
from worker.phases.contradictions.topics import Topic
from worker.phases.contradictions.values import PairDecision
from worker.similarity.candidates import Source

WHOLE = frozenset({Source.SMALL_SCOPE.value})
CONFIRM_WHY = ("only asking the scope whole joined these notes: asked again alone before the "
               "retirement applies")


def unsupported(ids: tuple[str, str], topic: Topic) -> bool:
    """Whether only asking the scope whole joined these two notes of ``topic``: a topic of
    more than two notes, and no candidate pair of it with a text signal between them."""
    if len(topic.note_ids) <= 2:
        return False
    pair = set(ids)
    return not any(set(p.ids) == pair and set(p.sources) - WHOLE for p in topic.pairs)


def lone_topics(pairs: Sequence[CandidatePair], notes: dict[str, Note]) -> list[Topic]:
    """Each pair to confirm as a topic of its own (as a suspicious note's pairs are,
    ``topics.isolate_suspicious``), its answer resting on its two notes. Not planned with the
    rest: a topic too large is split along its weakest pairs, and such a pair (no likeness)
    went first. Asked in the round right after they are held, a round of their own: a
    retirement already decided once waits on them, and after the other topics the run's calls
    ran out before them, run after run."""
    return [Topic(p.ids, (p,), False, max(created(notes[p.a_id]), created(notes[p.b_id])))
            for p in pairs]


class Confirming:
    """The retirements of this run waiting for their pair asked alone, each once."""

    def __init__(self, enabled: bool, counters: Any) -> None:
        self.enabled, self.counters = enabled, counters
        self.pairs: dict[tuple[str, str], CandidatePair] = {}
        self.into: dict[str, str] = {}  # held loser → its winner

    def hold(self, topic: Topic, pd: PairDecision, notes: dict[str, Note]) -> dict[str, Any] | None:
        """The step entry of a retirement held to be asked alone, or None: it applies now."""
        ids = pd.verdict.pair.ids
        if not self.enabled or pd.decision.action != Action.REVOKE or not unsupported(ids, topic):
            return None
        a, b = ids
        self.pairs[ids] = CandidatePair(a, b, 0.0, fingerprint_notes([notes[a], notes[b]]),
                                        sources=("confirm",))
        assert pd.decision.loser_id is not None and pd.decision.winner_id is not None
        self.into[pd.decision.loser_id] = pd.decision.winner_id
        self.counters["retirements_confirming"] = self.counters.get(
            "retirements_confirming", 0) + 1
        return {"a": a, "b": b, "relation": pd.verdict.relation, "action": Action.CONFIRM,
                "kind": pd.decision.kind, "why": CONFIRM_WHY}

    def again(self, topic: Topic, entries: list[dict[str, Any]]) -> None:
        """A pair asked alone whose answer came too late (a note of it retired meanwhile, by
        the pair asked beside it that holds its winner: A → B and B → C, both held): asked
        again, moved to the note that replaced it, so A meets C."""
        if len(topic.pairs) == 1 and "confirm" in topic.pairs[0].sources and any(
                e.get("action") == Action.SKIPPED for e in entries):
            self.pairs[topic.pairs[0].ids] = topic.pairs[0]

    def take(self) -> list[CandidatePair]:
        """The pairs to ask alone in the next round, each loser with the last winner of its
        chain of held retirements (A → B and B → C held: A with C, B with C), so the pairs
        of one chain do not retire each other's notes (pairs held apart may still: ``again``)."""
        def final(nid: str) -> str:
            seen = {nid}
            while (nxt := self.into.get(nid)) is not None and nxt not in seen:
                seen.add(nxt)
                nid = nxt
            return nid

        out: dict[tuple[str, str], CandidatePair] = {}
        for p in self.pairs.values():
            loser = next((i for i in p.ids if self.into.get(i) in p.ids), None)
            if loser is None:  # asked again (``again``): as it was
                out[p.ids] = p
                continue
            last = final(loser)
            ids = (min(loser, last), max(loser, last))
            if loser != last:
                out[ids] = replace(p, a_id=ids[0], b_id=ids[1])
        self.pairs, self.into = {}, {}
        return list(out.values())

"""Pairs a topic answer put in one attribute but settled nothing about, not asked (nor paid for)
again for ``DREAM_LLM_UNANSWERED_HOURS`` unless a note of the pair or the model changes.

An attribute with a value the texts refuse (``sameness``: its notes do not say one thing), or
one whose values the policy cannot order (its confidence below the minimum), decides none of
its pairs. Left at that, each later run found them fresh and asked the model the same question
at the same versions: a call per run for ever, its answer refused the same way ("Never deploys
on Fridays" / "Deploys Monday to Thursday only", one value to the model, one negated and one
not to the texts). Each such pair is remembered at the notes' versions, keyed with the model
(another model is asked at once), from the run's clock; a pair still unsettled when it is asked
again renews its date (``UNSETTLED`` rows replace their fingerprint's older one). Never text:
the ids, a digest, the date.

Still asked by the next run: an attribute joining notes judged apart (``sameness``, a lumping
answer), and a pair left open inside an attribute that applies (two values of a lumped
attribute, both kept): there, in another topic, the answer is often right. Measured on the
evolving suite's lumping judge (tests/bench/eval_endstate.py): remembering the pairs open in
applied attributes too left 17 superseded facts active after three runs, not 3, and lost one
more current fact; remembering the attributes against memory too, with a dream after each day
of notes, stopped 4 calls a run from repeating but cost 70 more while the notes arrived.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from worker.llm.unanswered import hours as hours  # the period, read by ``apply``
from worker.llm.unanswered import model_name
from worker.phases.contradictions.core import CandidatePair, PolicySettings
from worker.phases.contradictions.topics import Attribute, TopicVerdict
from worker.store.repositories.judgements import UNSETTLED

KIND = UNSETTLED  # judgements.kind
VERDICT = "unsettled"
WHY = "one attribute's pair the answer settled nothing about"


def model_of(app: Any) -> str:
    """The judge's model name as the fan-out keys it (``ask_all``); "" for none."""
    return model_name(getattr(app, "llm", None))


def key(pair_fingerprint: str, model: str) -> str:
    """The memory's fingerprint: the pair at its versions (``fingerprint_notes``), the model."""
    return hashlib.sha256(f"{pair_fingerprint}\0{model}".encode()).hexdigest()


def cooling(memory: Any, now: datetime, app: Any) -> Callable[[str], bool]:
    """Whether the app's model left a pair (by ``fingerprint_notes``) unsettled within the
    period before ``now``; never with the period at 0."""
    period = hours(app.settings)
    if period <= 0:
        return lambda fingerprint: False
    since, model = now - timedelta(hours=period), model_of(app)
    fresh = frozenset(r.fingerprint for r in memory.rows if r.kind == KIND
                      and getattr(r, "at", None) is not None and r.at >= since)
    return lambda fingerprint: bool(fresh) and key(fingerprint, model) in fresh


def left_open(verdict: TopicVerdict, applied: TopicVerdict, refused: list[Attribute],
              policy: PolicySettings, covered: set[tuple[str, str]],
              retired: Iterable[str]) -> list[CandidatePair]:
    """The topic's pairs inside one attribute that applies nothing (``refused`` for a value,
    or ``applied`` below the policy's minimum confidence: its values are not ordered) that no
    decision covers, neither note retired (a retired note's pairs pass to its winner)."""
    still = [*refused, *(a for a in applied.attributes if a.confidence < policy.min_confidence)]
    attribute_of = {nid: k for k, attr in enumerate(still)
                    for cls in attr.values for nid in cls.note_ids}
    gone = set(retired)
    return [p for p in verdict.topic.pairs
            if p.ids not in covered and not gone & set(p.ids)
            and (k := attribute_of.get(p.a_id)) is not None and k == attribute_of.get(p.b_id)]

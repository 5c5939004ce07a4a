"""Pure planning for judging topics: one attribute's history asked about once, as a group.

A topic is a connected group of candidate pairs (all versions of "vacation days"). The model
sorts a topic's notes into attributes and, per attribute, into values; code turns that into
pairwise policy decisions (``core.decide``) applied oldest value first, so A→B→C ends with C.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from worker.domain.types import Note, said_order
from worker.phases.contradictions.core import CandidatePair, created
from worker.similarity.topics import topics as group_topics


@dataclass(frozen=True)
class Topic:
    """Notes to ask about together, the candidate pairs that joined them, and their wait."""

    note_ids: tuple[str, ...]
    pairs: tuple[CandidatePair, ...]
    judged_before: bool  # some pair of it had a verdict at an earlier version
    waiting_since: datetime  # when its oldest unjudged pair became a candidate

    @property
    def key(self) -> str:
        return self.note_ids[0]


def plan_topics(
    pairs: Sequence[CandidatePair], notes: dict[str, Note], max_size: int
) -> list[Topic]:
    """Topics of at most ``max_size`` notes over ``pairs``, fairest first.

    Fair: topics never judged before first, then the one waiting longest (a pair waits from the
    creation of its newer note), so a scope's old, re-edited topic cannot starve new ones.
    """
    groups = group_topics({n for p in pairs for n in p.ids},
                          [(p.a_id, p.b_id, p.similarity) for p in pairs], max(2, max_size))
    group_of = {nid: k for k, g in enumerate(groups) for nid in g}
    by_group: dict[int, list[CandidatePair]] = {}
    for p in pairs:
        k = group_of.get(p.a_id)
        if k is not None and group_of.get(p.b_id) == k:
            by_group.setdefault(k, []).append(p)
    out = []
    for k, members in by_group.items():
        since = min(max(created(notes[p.a_id]), created(notes[p.b_id])) for p in members)
        out.append(Topic(tuple(groups[k]), tuple(members),
                         all(p.judged_before for p in members), since))
    out.sort(key=lambda t: (t.judged_before, t.waiting_since, t.key))
    return out


def follow_retirements(
    pairs: Iterable[CandidatePair], retired_into: dict[str, str], asked: set[tuple[str, str]],
    notes: dict[str, Note],
) -> list[CandidatePair]:
    """Re-plan between batches: a retired note's unasked pairs pass to the note that replaced it.

    Without this, a topic split in two (A→B and C→D resolved separately) would never compare
    the two survivors B and D. Pairs already asked this run, and self pairs, are dropped.
    """
    def final(nid: str) -> str:
        seen = set()
        while nid in retired_into and nid not in seen:
            seen.add(nid)
            nid = retired_into[nid]
        return nid

    best: dict[tuple[str, str], CandidatePair] = {}
    for p in pairs:
        a, b = sorted((final(p.a_id), final(p.b_id)))
        if a == b or (a, b) in asked or a not in notes or b not in notes:
            continue
        moved = p if (a, b) == p.ids else replace(p, a_id=a, b_id=b)
        if (a, b) not in best or moved.similarity > best[(a, b)].similarity:
            best[(a, b)] = moved
    return sorted(best.values(), key=lambda p: (-p.similarity, p.a_id, p.b_id))


@dataclass
class Call:
    """One prompt: the topics it carries; ``isolated`` when a note in it may steer the model."""

    topics: list[Topic]
    isolated: bool = False

    @property
    def note_ids(self) -> list[str]:
        return [n for t in self.topics for n in t.note_ids]


def isolate_suspicious(topic_list: Sequence[Topic], suspicious: frozenset[str]) -> list[Topic]:
    """Split off every note whose text reads like instructions (R14, issue 12 item 2).

    The trusted rest of a topic stays one topic; each pair touching a suspicious note becomes a
    topic of its own, asked alone, so the only verdict its text can steer is its own pair —
    where the policy lets it lose but never win.
    """
    out: list[Topic] = []
    for t in topic_list:
        bad = [p for p in t.pairs if p.a_id in suspicious or p.b_id in suspicious]
        if not bad:
            out.append(t)
            continue
        good = [p for p in t.pairs if p not in bad]
        if good:
            ids = tuple(sorted({n for p in good for n in p.ids}))
            out.append(replace(t, note_ids=ids, pairs=tuple(good)))
        out.extend(replace(t, note_ids=p.ids, pairs=(p,)) for p in bad)
    return out


def pack_calls(
    topic_list: Sequence[Topic], suspicious: frozenset[str], notes_per_call: int
) -> list[Call]:
    """Topics in their fair order, packed into prompts of at most ``notes_per_call`` notes.

    Only trusted topics share a prompt; a topic holding a suspicious note is always alone.
    """
    calls: list[Call] = []
    current: Call | None = None
    for t in topic_list:
        if any(n in suspicious for n in t.note_ids):
            calls.append(Call([t], isolated=True))
            continue
        if current is not None and len(current.note_ids) + len(t.note_ids) <= notes_per_call:
            current.topics.append(t)
            continue
        current = Call([t])
        calls.append(current)
    return calls


# ---- the prompt and the reply ---------------------------------------------------------------

def prompt_topics(
    call: Call, notes: dict[str, Note], text_of: dict[str, str] | None = None
) -> tuple[list[dict[str, object]], dict[str, str], dict[str, Topic]]:
    """The JSON the model sees: topic ids t1.., note aliases n1.. (never stored ids), dates.

    Returns (items, alias → note id, topic id → topic).
    """
    items: list[dict[str, object]] = []
    alias_of: dict[str, str] = {}
    by_topic: dict[str, Topic] = {}
    for k, t in enumerate(call.topics, start=1):
        tid = f"t{k}"
        by_topic[tid] = t
        entries = []
        for nid in sorted(t.note_ids, key=lambda i: (said_order(notes[i]), i)):
            alias = f"n{len(alias_of) + 1}"
            alias_of[alias] = nid
            n = notes[nid]
            entries.append({"alias": alias, "created_at": created(n).date().isoformat(),
                            "type": n.type, "text": (text_of or {}).get(nid, n.content)})
        items.append({"topic": tid, "notes": entries})
    return items, alias_of, by_topic


@dataclass(frozen=True)
class ValueClass:
    """Notes stating the same value of one attribute; ``fullest`` says it most completely."""

    note_ids: tuple[str, ...]
    fullest: str | None = None


@dataclass(frozen=True)
class Attribute:
    name: str
    values: tuple[ValueClass, ...]
    confidence: float
    reason: str = ""


@dataclass
class TopicVerdict:
    topic: Topic
    attributes: list[Attribute] = field(default_factory=list)


def check_topic_reply(
    replied: Sequence[dict[str, object]], alias_of: dict[str, str], by_topic: dict[str, Topic]
) -> tuple[list[TopicVerdict], dict[str, str]]:
    """Keep each topic answered exactly once and cleanly; every other topic dropped with a reason.

    ``replied``: the topic objects as parsed ({"topic", "attributes": [{"name", "confidence",
    "reason", "values": [{"notes": [aliases], "fullest"}]}]}). A note named outside its own
    topic, twice, or unknown drops the whole topic (R12): nothing about it is applied.
    """
    counts: dict[str, int] = {}
    for item in replied:
        tid = str(item.get("topic"))
        counts[tid] = counts.get(tid, 0) + 1
    verdicts: list[TopicVerdict] = []
    dropped: dict[str, str] = {}
    for item in replied:
        tid = str(item.get("topic"))
        if tid not in by_topic:
            dropped[tid[:20]] = "unknown topic id"
            continue
        if counts[tid] > 1:
            dropped[tid] = "more than one answer for the topic"
            continue
        topic = by_topic[tid]
        problem, verdict = _parse_topic(item, topic, alias_of)
        if problem:
            dropped[tid] = problem
        else:
            assert verdict is not None
            verdicts.append(verdict)
    for tid in by_topic:
        if tid not in counts:
            dropped[tid] = "no answer for the topic"
    return verdicts, dropped


def _parse_topic(
    item: dict[str, object], topic: Topic, alias_of: dict[str, str]
) -> tuple[str, TopicVerdict | None]:
    members = set(topic.note_ids)
    seen: set[str] = set()
    verdict = TopicVerdict(topic)
    raw_attributes = item.get("attributes") or []
    assert isinstance(raw_attributes, list)
    for attr in raw_attributes:
        assert isinstance(attr, dict)
        classes = []
        for value in attr.get("values") or []:
            ids = []
            for alias in value.get("notes") or []:
                nid = alias_of.get(str(alias))
                if nid is None:
                    return f"unknown note alias {str(alias)[:20]!r}", None
                if nid not in members:
                    return f"note {alias} belongs to another topic", None
                if nid in seen:
                    return f"note {alias} named more than once", None
                seen.add(nid)
                ids.append(nid)
            fullest = value.get("fullest")
            fullest_id = alias_of.get(str(fullest)) if fullest else None
            if fullest and fullest_id not in ids:
                return f"fullest {str(fullest)[:20]!r} is not one of its value's notes", None
            if ids:
                classes.append(ValueClass(tuple(ids), fullest_id))
        verdict.attributes.append(Attribute(str(attr.get("name", ""))[:120], tuple(classes),
                                            float(attr.get("confidence", 0.0)),
                                            str(attr.get("reason", ""))[:300]))
    return "", verdict


# ---- from a verdict to decisions ------------------------------------------------------------

def independent_pairs(verdict: TopicVerdict) -> list[CandidatePair]:
    """The topic's candidate pairs the answer puts in no attribute together: settled as
    independent. A pair inside one attribute is settled only by the decisions applied to it
    (a guard trip or a stale note leaves it to be asked again, never remembered)."""
    attribute_of = {nid: k for k, attr in enumerate(verdict.attributes)
                    for cls in attr.values for nid in cls.note_ids}
    return [p for p in verdict.topic.pairs
            if attribute_of.get(p.a_id) is None or attribute_of.get(p.a_id) != attribute_of.get(p.b_id)]

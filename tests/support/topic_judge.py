"""Answer the contradictions topic prompt from a pairwise judge, for stub and fake models.

``relation(text_a, text_b)`` returns one of independent / equivalent / a_subsumes_b /
b_subsumes_a / conflicting (or None to leave the pair out); notes linked by any relation but
independent form one attribute, and equivalent/subsumed notes share a value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

PairJudge = Callable[[str, str], str | None]
SAME_VALUE = frozenset({"equivalent", "a_subsumes_b", "b_subsumes_a"})


def prompt_topics(user: str) -> list[dict[str, Any]]:
    """The topics JSON array exactly as the rendered user prompt carried it."""
    start = user.index("[")
    value, _ = json.JSONDecoder().raw_decode(user, start)
    return [t for t in value if isinstance(t, dict) and "topic" in t]


def _groups(items: list[str], linked: Callable[[str, str], bool]) -> list[list[str]]:
    parent = {i: i for i in items}

    def root(i: str) -> str:
        while parent[i] != i:
            i = parent[i]
        return i

    for x, a in enumerate(items):
        for b in items[x + 1:]:
            if linked(a, b):
                parent[root(b)] = root(a)
    out: dict[str, list[str]] = {}
    for i in items:
        out.setdefault(root(i), []).append(i)
    return list(out.values())


def answer_topic(topic: dict[str, Any], relation: PairJudge, confidence: float = 0.95
                 ) -> dict[str, Any]:
    notes = {n["alias"]: n["text"] for n in topic["notes"]}
    aliases = list(notes)
    rel: dict[tuple[str, str], str | None] = {
        (a, b): relation(notes[a], notes[b]) for a in aliases for b in aliases if a != b}
    attributes = []
    for group in _groups(aliases, lambda a, b: rel[(a, b)] not in (None, "independent")):
        if len(group) < 2:
            continue
        values = []
        for cls in _groups(group, lambda a, b: rel[(a, b)] in SAME_VALUE):
            value: dict[str, Any] = {"notes": cls}
            # The fullest note subsumes another of its value and is subsumed by none.
            fullest = [a for a in cls if any(rel[(a, b)] == "a_subsumes_b" for b in cls if b != a)
                       and not any(rel[(b, a)] == "a_subsumes_b" for b in cls if b != a)]
            if fullest:
                value["fullest"] = fullest[0]
            values.append(value)
        attributes.append({"name": "scripted attribute", "confidence": confidence,
                           "reason": "scripted judge", "values": values})
    return {"topic": topic["topic"], "attributes": attributes}


def topic_reply(user: str, relation: PairJudge, confidence: float = 0.95) -> dict[str, Any]:
    return {"topics": [answer_topic(t, relation, confidence) for t in prompt_topics(user)]}

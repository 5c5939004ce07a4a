"""A model stand-in for benchmarks: answers every phase's prompt validly, after a set latency.

It counts calls and tokens so the bench can report model cost per retired note. Replies are
built from the rendered prompt (aliases and the first note text) so they pass validation and
grounding without inventing anything: a fused note repeats one source verbatim, and only when
every source restates it (other clusters are declined); a pair verdict says the newer note
wins when both carry a date.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from worker.llm.base import LLMReply


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class BenchLLM:
    """Thread-safe counting LLMClient; ``latency`` seconds per call (0 = zero-latency)."""

    def __init__(self, latency: float = 0.0, model: str = "bench-fake") -> None:
        self.latency = latency
        self.model = model
        self.calls = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.by_prompt: dict[str, int] = {}
        # The stand-in's own CPU seconds per prompt: a real model's answers cost this process
        # nothing, so the bench shows how much of a phase's CPU was the stand-in answering.
        self.cpu_by_prompt: dict[str, float] = {}
        self._lock = threading.Lock()

    def complete_json(self, *, prompt_name: str, system: str, user: str,
                      schema: dict[str, Any]) -> LLMReply:
        if self.latency:
            time.sleep(self.latency)
        started = time.thread_time()
        data = self._reply(prompt_name, user, schema)
        raw = json.dumps(data)
        t_in, t_out = _tokens(system) + _tokens(user), _tokens(raw)
        spent = time.thread_time() - started
        with self._lock:
            self.cpu_by_prompt[prompt_name] = self.cpu_by_prompt.get(prompt_name, 0.0) + spent
            self.calls += 1
            self.tokens_in += t_in
            self.tokens_out += t_out
            self.by_prompt[prompt_name] = self.by_prompt.get(prompt_name, 0) + 1
        return LLMReply(data=data, tokens_in=t_in, tokens_out=t_out, model=self.model, raw=raw)

    def _reply(self, prompt_name: str, user: str, schema: dict[str, Any]) -> Any:
        items = first_json_array(user)
        if prompt_name.startswith("consolidate"):
            notes = [i for i in items if isinstance(i, dict) and "alias" in i]
            texts = [str(n.get("content") or n.get("text") or "") for n in notes]
            text = max(texts, key=len, default="")
            if not _one_fact(texts, text):  # different facts on one topic: kept apart
                return {"should_consolidate": False, "content": "", "type": "Context",
                        "source_ids": [], "reason": "bench: not one fact"}
            return {"should_consolidate": bool(text), "content": text, "type": "Preference",
                    "source_ids": [n["alias"] for n in notes], "reason": "bench"}
        if prompt_name.startswith("contradictions"):
            from tests.support.topic_judge import topic_reply

            return topic_reply(user, _relation, confidence=0.9)
        return _from_schema(schema)


_WORDS = re.compile(r"[a-z0-9']{3,}")
_FILLER = frozenset({"the", "and", "for", "about", "that", "this", "with", "user"})


def _content(text: str) -> set[str]:
    return set(_WORDS.findall(text.casefold())) - _FILLER


def _one_fact(texts: list[str], longest: str) -> bool:
    """What a careful model decides before fusing: every note restates the longest one (holds
    at least half its own content words in it), so the longest note loses nothing. Notes that
    share a topic but state different facts ("Asked about a b c" / "Asked about d e f") are
    declined, as such a model would rather than drop all but one of them."""
    kept = _content(longest)
    return all(len(words & kept) * 2 >= len(words) for words in map(_content, texts))


_PLANTED_CONFLICT = re.compile(r"^The (.+) of the user is \S+ since ")


def _relation(a: str, b: str) -> str:
    """The verdict a careful model would give on the corpus's planted structure."""
    ma, mb = _PLANTED_CONFLICT.match(a), _PLANTED_CONFLICT.match(b)
    if ma and mb and ma.group(1) == mb.group(1) and a != b:
        return "conflicting"
    if " ".join(a.casefold().split()) == " ".join(b.casefold().split()):
        return "equivalent"
    return "independent"


def first_json_array(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^\[", text, re.MULTILINE):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(value, list):
            return value
    return []


def _from_schema(schema: dict[str, Any]) -> Any:
    """A minimal reply shaped by the JSON schema (used for phases whose schema we do not know)."""
    t = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if t == "object":
        props = schema.get("properties", {})
        return {k: _from_schema(v) for k, v in props.items()}
    if t == "array":
        return []
    if t == "boolean":
        return False
    if t in ("number", "integer"):
        return 0
    if t == "string":
        return ""
    return None

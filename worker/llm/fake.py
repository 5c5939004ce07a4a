"""A scripted LLMClient: replies chosen by rules, for tests and for integration-testing a deployment.

Script file (``DREAM_LLM_PROVIDER=fake``, ``DREAM_FAKE_LLM_SCRIPT=path.json``)::

    {"model": "fake-demo",
     "rules": [
       {"prompt": "consolidate", "contains": ["Python 3.12"],
        "reply": {"should_consolidate": true, "content": "...", "type": "Preference",
                  "source_ids": "$aliases", "reason": "..."}},
       {"prompt": "contradictions", "contains": ["metric"], "id_field": "topic",
        "reply": {"topics_all": {"attributes": [
            {"name": "units", "confidence": 0.9, "values": "$alias_values"}]}}}],
     "default": {"should_consolidate": false, "content": "", "type": "Context",
                 "source_ids": [], "reason": "no rule matched"}}

A rule matches when ``prompt`` (optional) equals the prompt name and every ``contains`` string
(optional) occurs in the notes' part of the prompt: the string values of the JSON data in the user
message (note texts, types, aliases, pair ids), or the whole user message when it holds no JSON.
Never the system prompt or the template's own words: their examples ("metric units") would
match every question. The first match wins, else ``default``.
Optional per rule: ``not_contains``, ``times`` (use at most N times), ``latency`` (seconds).
Templates inside a reply: the string ``"$aliases"`` becomes the list of note aliases (n1, n2, …)
in the prompt, ``"$alias_values"`` one contradictions value group per alias (``{"$alias_values_with":
["metric units", …]}``: only the aliases whose text holds one of the strings), ``"$ids"`` the list
of ids matched by the rule's ``ids`` regex (default: values of ``"pair"``/``"pair_id"``/``"id"``/
``"topic"`` keys), and a key ``"<name>_all": {...}`` becomes
``"<name>": [{..., "<id_field>": id} for each id]`` (``id_field`` defaults to ``"pair"``). Each id's
item comes from the first rule with the same ``<name>_all`` key that matches the id's own notes
(its object in the prompt), so topics packed into one prompt each get their own rule's item; an
id no such rule matches gets the matched rule's. A reply that is a string is sent as raw text
(use it to script invalid JSON).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.config import ConfigError
from worker.llm.base import LLMError, LLMReply
from worker.llm.openai_compat import parse_content

ItemFor = Callable[[str, str, Any], Any]  # (<name>_all key, an id's own notes, default) -> item

_ALIAS = re.compile(r'"alias"\s*:\s*"(n\d+)"')
_DEFAULT_IDS = r'"(?:pair|pair_id|id|topic)"\s*:\s*"([^"]+)"'


@dataclass
class FakeRule:
    """One scripted answer; ``reply`` is JSON data, raw text, or a callable (Python only)."""

    reply: Any
    prompt: str | None = None
    contains: Sequence[str] = ()
    not_contains: Sequence[str] = ()
    times: int | None = None
    latency: float = 0.0
    ids: str = _DEFAULT_IDS
    id_field: str = "pair"
    used: int = 0

    def matches(self, prompt_name: str, text: str) -> bool:
        if self.prompt is not None and self.prompt != prompt_name:
            return False
        if self.times is not None and self.used >= self.times:
            return False
        return all(s in text for s in self.contains) and not any(
            s in text for s in self.not_contains
        )


@dataclass
class FakeCall:
    """What a test can inspect about one call."""

    prompt_name: str
    system: str
    user: str
    rule: int | None  # index of the matching rule, None for the default


@dataclass
class FakeLLM:
    rules: list[FakeRule] = field(default_factory=list)
    default: Any = None
    model: str = "fake"
    provider_name: str = "dream.fake"  # gen_ai.provider.name of the scripted stand-in
    calls: list[FakeCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_settings(cls, settings: Any) -> FakeLLM:
        path = settings.fake_llm_script
        if path is None:
            raise ConfigError("DREAM_LLM_PROVIDER=fake needs DREAM_FAKE_LLM_SCRIPT=<script.json>; "
                              "see examples/fake-llm-demo.json")
        return cls.from_file(Path(path))

    @classmethod
    def from_file(cls, path: Path) -> FakeLLM:
        """The script at ``path``; a file that cannot be read, is not UTF-8 or not JSON is one
        line naming it, the problem and the fix (a leading byte-order mark is allowed, as the
        importers allow it)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read fake LLM script {path}: {exc.strerror}; "
                              "fix DREAM_FAKE_LLM_SCRIPT") from None
        try:
            text = data.decode("utf-8").removeprefix("\ufeff")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"fake LLM script {path} is not UTF-8 (byte {data[exc.start]:#04x} "
                              f"at offset {exc.start}); save it as UTF-8 JSON or point "
                              "DREAM_FAKE_LLM_SCRIPT at another file") from None
        try:
            script = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"fake LLM script {path} is not valid JSON ({exc.msg} at line "
                              f"{exc.lineno} column {exc.colno}); fix the file (see "
                              "examples/fake-llm-demo.json)") from None
        except (ValueError, RecursionError):  # a 4,300-digit number, nesting past the stack
            raise ConfigError(f"fake LLM script {path} holds a number too large or nesting too "
                              "deep to read; fix the file") from None
        return cls.from_script(script, source=str(path))

    @classmethod
    def from_script(cls, script: Any, source: str = "script") -> FakeLLM:
        if not isinstance(script, dict) or not isinstance(script.get("rules", []), list):
            raise ConfigError(f"fake LLM {source} must be an object with a \"rules\" list")
        allowed = {"prompt", "contains", "not_contains", "times", "latency", "reply", "ids",
                   "id_field"}
        rules = []
        for i, raw in enumerate(script.get("rules", [])):
            if not isinstance(raw, dict) or "reply" not in raw:
                raise ConfigError(f"fake LLM {source}: rule {i} needs a \"reply\"")
            unknown = sorted(set(raw) - allowed)
            if unknown:
                raise ConfigError(f"fake LLM {source}: rule {i} has unknown key {unknown[0]!r}")
            contains = raw.get("contains", [])
            not_contains = raw.get("not_contains", [])
            try:
                rules.append(FakeRule(
                    reply=raw["reply"], prompt=raw.get("prompt"),
                    contains=[contains] if isinstance(contains, str) else list(contains),
                    not_contains=[not_contains] if isinstance(not_contains, str)
                    else list(not_contains),
                    times=raw.get("times"), latency=float(raw.get("latency", 0.0)),
                    ids=raw.get("ids", _DEFAULT_IDS), id_field=raw.get("id_field", "pair"),
                ))
                re.compile(rules[-1].ids)
            except (TypeError, ValueError, re.error) as exc:
                raise ConfigError(f"fake LLM {source}: rule {i} is malformed ({exc})") from None
        return cls(rules=rules, default=script.get("default"), model=script.get("model", "fake"))

    # ---- LLMClient -----------------------------------------------------------------------
    def complete_json(
        self, *, prompt_name: str, system: str, user: str, schema: dict[str, Any]
    ) -> LLMReply:
        text = system + "\n" + user
        data_text = notes_part(user)
        with self._lock:
            index = next(
                (i for i, r in enumerate(self.rules) if r.matches(prompt_name, data_text)), None
            )
            rule = self.rules[index] if index is not None else None
            if rule is not None:
                rule.used += 1
            self.calls.append(FakeCall(prompt_name, system, user, index))
        if rule is None and self.default is None:
            raise LLMError(f"fake LLM has no rule for prompt {prompt_name!r} and no default")
        reply = rule.reply if rule is not None else self.default
        if rule is not None and rule.latency:
            time.sleep(rule.latency)
        if callable(reply):
            reply = reply(prompt_name, system, user)
        ids_pattern = rule.ids if rule is not None else _DEFAULT_IDS
        id_field = rule.id_field if rule is not None else "pair"
        if isinstance(reply, str):
            raw = reply
            data = parse_content(reply)
        else:
            data = expand_templates(reply, user, ids_pattern, id_field,
                                    item_for=self._item_for(prompt_name))
            raw = json.dumps(data)
        return LLMReply(data=data, tokens_in=max(1, len(text) // 4),
                        tokens_out=max(1, len(raw) // 4), model=self.model, raw=raw)

    def _item_for(self, prompt_name: str) -> ItemFor:
        """Per id of a ``<name>_all`` key: the item of the first rule with that key matching the
        id's own notes (``times`` is counted per call, not here), else the given default."""

        def pick(key: str, own_text: str, default: Any) -> Any:
            for rule in self.rules:
                item = rule.reply.get(key) if isinstance(rule.reply, dict) else None
                if isinstance(item, dict) and rule.matches(prompt_name, own_text):
                    return item
            return default

        return pick

    # ---- for tests -----------------------------------------------------------------------
    def counts(self) -> Counter[str]:
        """Number of calls per prompt name."""
        return Counter(c.prompt_name for c in self.calls)


def notes_part(user: str) -> str:
    """The string values of every JSON array/object in ``user``, one per line (what the notes
    say, without the template around them); ``user`` itself when it holds no JSON."""
    values = [s for block in _json_blocks(user) for s in _strings(block)]
    return "\n".join(values) if values else user


def _json_blocks(text: str) -> list[Any]:
    """Every top-level JSON array or object embedded in ``text``, in order."""
    decoder = json.JSONDecoder()
    blocks: list[Any] = []
    pos = 0
    while True:
        starts = [k for k in (text.find("[", pos), text.find("{", pos)) if k >= 0]
        if not starts:
            return blocks
        start = min(starts)
        try:
            data, end = decoder.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        if isinstance(data, list | dict):
            blocks.append(data)
        pos = end


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def expand_templates(reply: Any, prompt_text: str, ids_pattern: str = _DEFAULT_IDS,
                     id_field: str = "pair", item_for: ItemFor | None = None) -> Any:
    """Fill ``$aliases`` / ``$ids`` and ``<name>_all`` keys from the rendered prompt.

    Inside a ``<name>_all`` item, ``$aliases`` and ``$alias_values`` mean the aliases of that
    id's own object in the prompt (one topic's notes), not of the whole prompt; ``item_for``
    may pick another item for an id from its own notes.
    """
    aliases = _unique(_ALIAS.findall(prompt_text))
    ids = _unique(re.findall(ids_pattern, prompt_text))
    text_of = _alias_texts(prompt_text)
    objects = _objects_by_id(prompt_text, id_field)
    own = {i: _unique(_ALIAS.findall(json.dumps(obj))) for i, obj in objects.items()}

    def item_of(key: str, i: str, default: Any) -> Any:
        if item_for is None or i not in objects:
            return default
        return item_for(key, "\n".join(_strings(objects[i])), default)

    def walk(value: Any, names: list[str]) -> Any:
        if value == "$aliases":
            return list(names)
        if value == "$ids":
            return list(ids)
        if value == "$alias_values":  # contradictions: every note a value of its own
            return [{"notes": [a]} for a in names]
        if isinstance(value, dict) and list(value) == ["$alias_values_with"]:
            wanted = value["$alias_values_with"]  # only the notes stating one of these strings
            wanted = [wanted] if isinstance(wanted, str) else list(wanted)
            return [{"notes": [a]} for a in names
                    if any(w in text_of.get(a, "") for w in wanted)]
        if isinstance(value, list):
            return [walk(v, names) for v in value]
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if key.endswith("_all") and isinstance(item, dict):
                    out[key[: -len("_all")]] = [
                        {**walk(item_of(key, i, item), own.get(i, names)), id_field: i}
                        for i in ids]
                else:
                    out[key] = walk(item, names)
            return out
        return value

    return walk(reply, aliases)


def _dicts(prompt_text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object of the prompt, each before the objects inside it."""
    stack: list[Any] = list(reversed(_json_blocks(prompt_text)))
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            yield value
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))


def _alias_texts(prompt_text: str) -> dict[str, str]:
    """Each note alias of the prompt and its text (the objects carrying both)."""
    out: dict[str, str] = {}
    for obj in _dicts(prompt_text):
        alias, text = obj.get("alias"), obj.get("text")
        if isinstance(alias, str) and isinstance(text, str):
            out.setdefault(alias, text)
    return out


def _objects_by_id(prompt_text: str, id_field: str) -> dict[str, Any]:
    """Each JSON object of the prompt that carries ``id_field``, by that id (the first one)."""
    out: dict[str, Any] = {}
    for obj in _dicts(prompt_text):
        key = obj.get(id_field)
        if isinstance(key, str):
            out.setdefault(key, obj)
    return out

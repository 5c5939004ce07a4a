"""Detect note text that reads like instructions to a model (R14); pure, reusable by every phase.

A note about the user describes the user; an injected one talks to whoever processes it. Strong
patterns (role tags, "ignore previous instructions") flag on their own; otherwise a score adds
up who is addressed, imperatives and references to the machinery (notes, prompt, verdicts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from worker.text.words import hides_text, strip_invisible

__all__ = ["InstructionScore", "injection_signals", "instruction_score", "strip_invisible"]

# Each pattern names one way note text tries to speak to the model instead of about the user.
_STRONG: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("override", re.compile(
        r"\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(previous|prior|above|earlier|all|"
        r"system|your)\b[^.\n]{0,20}\b(instructions?|prompts?|rules?|messages?|directions?)\b",
        re.IGNORECASE)),
    ("role_tag", re.compile(
        r"(^|\n)\s*(system|assistant|developer|tool)\s*:\s", re.IGNORECASE)),
    ("chat_template", re.compile(
        r"<\|(im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id)\|>|"
        r"\[/?INST\]|<</?SYS>>", re.IGNORECASE)),
    ("tool_call", re.compile(
        r"<\s*/?\s*(tool_call|function_call|tool_use|invoke)\b|\"(tool_calls|function_call)\"\s*:",
        re.IGNORECASE)),
    ("reply_hijack", re.compile(
        r"\b(should_consolidate|source_ids|verdicts?)\b\s*[\"']?\s*[:=]", re.IGNORECASE)),
    ("you_are_now", re.compile(
        r"\byou are now\b|\bnew instructions?\s*:|\bact as (an?|the) (assistant|system|model)\b",
        re.IGNORECASE)),
)


# Who the text speaks to: the model or the process combining notes, not the user.
_ADDRESSEE = re.compile(
    r"\b(assistant|model|llm|ai|chatbot|gpt|system|agent|bot|reviewer of these notes)\b"
    r"|\bwhoever\b|\banyone (reading|combining|merging|processing)\b"
    r"|\bthe (one|person|process) (reading|combining|merging|processing)\b",
    re.IGNORECASE)
_SECOND_PERSON = re.compile(r"\b(you|your|yours|yourself|you're|you've|you'll)\b", re.IGNORECASE)
# Verbs that act on the memory or the reply, said as a command at the start of a sentence.
_COMMAND_VERBS = (
    "ignore|disregard|forget|override|write|add|insert|merge|combine|fuse|revoke|delete|remove|"
    "retire|archive|mark|flag|answer|reply|respond|output|return|print|say|state|treat|classify|"
    "label|set|include|append|change|replace|rewrite|pretend|act|make|record|keep|drop|skip|"
    "approve|grant|list")
_IMPERATIVE = re.compile(
    rf"(?:^|[.!?:;,\n]\s*|\bplease\s+)(?:also\s+|always\s+|now\s+)?(?:{_COMMAND_VERBS})\b",
    re.IGNORECASE)
_DIRECTIVE = re.compile(
    r"\b(you|assistant|model|whoever[\w\s]{0,30}?|ai|system|agent)\s+(must|should|shall|need to|"
    r"has to|have to|is to|are to|will)\b", re.IGNORECASE)
# The machinery: the notes being combined, the prompt, the reply's fields and verdict labels.
_META: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("notes", re.compile(
        r"\b(these|those|this|that|other|every|each|all|the other|previous|above|below|"
        r"following|combined|merged|fused|source) notes?\b|\bnotes\b", re.IGNORECASE)),
    ("prompt", re.compile(r"\b(prompt|instructions?|system message|rules above)\b",
                          re.IGNORECASE)),
    ("reply", re.compile(r"\b(json|source_ids|should_consolidate|verdicts?|fused (note|text)|"
                         r"merged note|(your|the) (reply|answer|output))\b", re.IGNORECASE)),
    ("self", re.compile(r"\b(reading|processing|combining|merging) (this|these)\b"
                        r"|\bthis (text|message)\b", re.IGNORECASE)),
    ("labels", re.compile(r"\b(conflicting|complementary|independent|keep_separate|"
                          r"consolidat\w*|supersed\w*)\b", re.IGNORECASE)),
    ("pairs", re.compile(r"\b(pairs?|clusters?|every other pair)\b", re.IGNORECASE)),
    ("aliases", re.compile(r"\bn\d{1,3}\b|\b[a-z]+-\d+\b")),
)
FLAG_AT = 3.0


@dataclass(frozen=True)
class InstructionScore:
    """How instruction-like a text reads, and the signals that made it so."""

    score: float
    signals: tuple[str, ...]

    @property
    def flagged(self) -> bool:
        # A strong pattern alone, or a high score that also names the machinery: "the assistant
        # should answer in French" is a preference about the assistant, not an injection.
        strong = any(s in _STRONG_NAMES for s in self.signals)
        meta = any(s.startswith("meta:") for s in self.signals)
        return strong or (meta and self.score >= FLAG_AT)


# Text hidden in invisible characters (``hides_text``): the model never sees it, yet a note
# carrying a message nobody can read was written to be read by something; a strong signal.
HIDDEN = "hidden_text"
_STRONG_NAMES = frozenset(name for name, _ in _STRONG) | {HIDDEN}


# ---- the gate: which patterns can match at all -----------------------------------------------
# A pattern is searched only when the text holds a word it cannot match without; an exact
# shortcut (most notes hold none of them), not a weaker check. Every gated pattern needs one of
# its words as a whole \w+ token (the patterns put \b, \s or punctuation around them), or the
# text to contain one of its fragments; words are read case-folded the way re.IGNORECASE
# compares, one character at a time (tests/unit/test_injection.py checks every code point).
_FOLD = str.maketrans({**{chr(c): chr(c + 32) for c in range(ord("A"), ord("Z") + 1)},
                       "\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
_TOKENS = re.compile(r"\w+")


def _fold(text: str) -> str:
    """``text`` case-folded the way the gates read it; for ASCII text that is ``str.lower``
    (A-Z only), which is much cheaper than the translation table."""
    return text.lower() if text.isascii() else text.translate(_FOLD)


@dataclass(frozen=True)
class _Gate:
    words: frozenset[str] = frozenset()
    fragments: tuple[str, ...] = ()

    def open(self, words: set[str], folded: str) -> bool:
        if not self.words.isdisjoint(words):
            return True
        return bool(self.fragments) and any(f in folded for f in self.fragments)


def _gate(words: str, *fragments: str) -> _Gate:
    return _Gate(frozenset(words.split()), fragments)


_ALWAYS = _Gate(fragments=("",))
_GATES: dict[str, _Gate] = {
    "override": _gate("ignore disregard forget override"),
    "role_tag": _gate("system assistant developer tool"),
    "chat_template": _gate("", "<|", "[", "<<"),
    "tool_call": _gate("tool_call function_call tool_use invoke tool_calls"),
    "reply_hijack": _gate("should_consolidate source_ids verdict verdicts"),
    "you_are_now": _gate("you new act"),
    "addressee": _gate("assistant model llm ai chatbot gpt system agent bot reviewer whoever "
                       "reading combining merging processing"),
    "second_person": _gate("you your yours yourself"),
    "imperative": _gate(_COMMAND_VERBS.replace("|", " ")),
    "directive": _gate("you assistant model ai system agent", "whoever"),
    "meta:notes": _gate("note notes"),
    "meta:prompt": _gate("prompt instruction instructions system rules"),
    "meta:reply": _gate("json source_ids should_consolidate verdict verdicts fused merged reply "
                        "answer output"),
    "meta:self": _gate("this these"),
    "meta:labels": _gate("conflicting complementary independent keep_separate",
                         "consolidat", "supersed"),
    "meta:pairs": _gate("pair pairs cluster clusters"),
    "meta:aliases": _ALWAYS,  # case-sensitive, and "-" or an "n" followed by digits is common
}


# Every gate at once: a text holding none of these words or fragments opens only _ALWAYS gates.
_ANY_WORD = frozenset().union(*(g.words for g in _GATES.values()))
_ANY_FRAGMENT = re.compile("|".join(re.escape(f) for g in _GATES.values() if g is not _ALWAYS
                                     for f in g.fragments))
_UNGATED = tuple(name for name, g in _GATES.items() if g is _ALWAYS)

# (signal, pattern, weight, gate) in the order signals are reported; a meta signal's weight is
# counted apart (+1 per kind, at most 3).
_CHECKS: tuple[tuple[str, re.Pattern[str], float, _Gate], ...] = (
    *((name, pattern, 3.0, _GATES[name]) for name, pattern in _STRONG),
    ("addressee", _ADDRESSEE, 2.0, _GATES["addressee"]),
    ("second_person", _SECOND_PERSON, 1.0, _GATES["second_person"]),
    ("imperative", _IMPERATIVE, 1.5, _GATES["imperative"]),
    ("directive", _DIRECTIVE, 1.5, _GATES["directive"]),
    *((f"meta:{name}", pattern, 0.0, _GATES[f"meta:{name}"]) for name, pattern in _META),
)


_CHECKS_UNGATED = tuple(c for c in _CHECKS if c[0] in _UNGATED)
assert all(c[2] == 0.0 for c in _CHECKS_UNGATED)  # the shortcut's score counts meta kinds only
# Every ungated pattern (the aliases "n12", "jira-7") needs a decimal digit, as \d reads one.
_DIGIT = re.compile(r"\d")
_NO_SIGNAL = InstructionScore(0.0, ())


# The same texts are scored again and again: consolidate scores every note of a scope, then
# contradictions and the judges score the ones they send to a model. A bounded memo of the
# pure score keeps the last few scopes' texts (a few MB at most).
@lru_cache(maxsize=1 << 12)
def instruction_score(text: str) -> InstructionScore:
    """Score ``text``: +3 per strong pattern, +2 when it addresses the model or "whoever
    combines these notes", +1 for second person, +1.5 for a command, +1.5 for "you/the
    assistant must", +1 per kind of machinery it names (at most 3). Invisible characters are
    removed first, so "ig\u200bnore previous instructions" is caught; a message hidden in them
    (a run of variation selectors or tag characters) is itself a strong signal."""
    found = _score(strip_invisible(text))
    if hides_text(text):
        return InstructionScore(found.score + 3, (HIDDEN, *found.signals))
    return found


def _score(text: str) -> InstructionScore:
    """``instruction_score`` of a text whose invisible characters are gone."""
    folded = _fold(text)
    tokens = _TOKENS.findall(folded)
    if _ANY_WORD.isdisjoint(tokens) and _ANY_FRAGMENT.search(folded) is None:
        # Most notes: only the ungated patterns can match (meta signals only, weight counted),
        # and only in a text with a digit.
        if _DIGIT.search(text) is None:
            return _NO_SIGNAL
        found = tuple(name for name, pattern, _, _ in _CHECKS_UNGATED if pattern.search(text))
        return InstructionScore(float(min(3, len(found))), found)
    words = set(tokens)
    signals: list[str] = []
    score = 0.0
    meta = 0
    for name, pattern, weight, gate in _CHECKS:
        if gate.open(words, folded) and pattern.search(text) is not None:
            signals.append(name)
            if weight:
                score += weight
            else:
                meta += 1
    score += min(3, meta)
    return InstructionScore(score, tuple(signals))


def injection_signals(text: str) -> list[str]:
    """Names of the signals that make ``text`` instruction-like (empty list: reads like a fact)."""
    scored = instruction_score(text)
    return list(scored.signals) if scored.signals and scored.flagged else []

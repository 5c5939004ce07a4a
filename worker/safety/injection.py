"""Detect note text that reads like instructions to a model (R14); pure, reusable by every phase.

A note about the user describes the user; an injected one talks to whoever processes it. Strong
patterns (role tags, "ignore previous instructions") flag on their own; otherwise a score adds
up who is addressed, imperatives and references to the machinery (notes, prompt, verdicts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from worker.text.words import strip_invisible

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


_STRONG_NAMES = frozenset(name for name, _ in _STRONG)


def instruction_score(text: str) -> InstructionScore:
    """Score ``text``: +3 per strong pattern, +2 when it addresses the model or "whoever
    combines these notes", +1 for second person, +1.5 for a command, +1.5 for "you/the
    assistant must", +1 per kind of machinery it names (at most 3). Invisible characters are
    removed first, so "ig\u200bnore previous instructions" is caught."""
    text = strip_invisible(text)
    signals: list[str] = []
    score = 0.0
    for name, pattern in _STRONG:
        if pattern.search(text):
            signals.append(name)
            score += 3
    for name, pattern, weight in (("addressee", _ADDRESSEE, 2.0), ("second_person",
                                   _SECOND_PERSON, 1.0), ("imperative", _IMPERATIVE, 1.5),
                                  ("directive", _DIRECTIVE, 1.5)):
        if pattern.search(text):
            signals.append(name)
            score += weight
    meta = [name for name, pattern in _META if pattern.search(text)]
    signals.extend(f"meta:{name}" for name in meta)
    score += min(3, len(meta))
    return InstructionScore(score, tuple(signals))


def injection_signals(text: str) -> list[str]:
    """Names of the signals that make ``text`` instruction-like (empty list: reads like a fact)."""
    scored = instruction_score(text)
    return list(scored.signals) if scored.flagged else []

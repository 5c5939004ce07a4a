"""Detect note text that reads like instructions to a model (R14); pure, reusable by every phase."""

from __future__ import annotations

import re

from worker.text.words import strip_invisible

__all__ = ["injection_signals", "looks_like_injection", "strip_invisible"]

# Each pattern names one way note text tries to speak to the model instead of about the user.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
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


def injection_signals(text: str) -> list[str]:
    """Names of the instruction-like patterns found in ``text`` (empty list: looks like a fact).

    Invisible characters are removed first, so "ig\u200bnore previous instructions" is caught.
    """
    text = strip_invisible(text)
    return [name for name, pattern in _PATTERNS if pattern.search(text)]


def looks_like_injection(text: str) -> bool:
    return bool(injection_signals(text))

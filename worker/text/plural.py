"""Counts in the one-line summaries people read: "1 run", "4 runs", "1 scope not due"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, the noun plural unless the count is one."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"

"""One place that knows what time it is, so `--now` and tests can move it."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def parse_timestamp(value: str) -> datetime:
    """ISO-8601 date or datetime; naive values are UTC. Raises ValueError with a clear message."""
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise ValueError(f"not an ISO-8601 timestamp: {value!r} (use e.g. 2026-01-31T09:00:00Z)") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)

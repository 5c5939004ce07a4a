"""One place that knows what time it is, so `--now` and tests can move it."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

# Timestamps outside these bounds are refused: the phases subtract look-back windows and add
# leases to them, which must not overflow Python's year 1..9999 (R31).
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
# How far ahead of the present a stamp may be and still count as now: clocks of two machines
# disagree by seconds, a session's start by a host's timezone slip. Later than that has not
# happened yet (a session, a deletion), and a run that writes cannot be dated there.
SKEW = timedelta(hours=1)


def utcnow() -> datetime:
    return datetime.now(UTC)


def parse_timestamp(value: str) -> datetime:
    """ISO-8601 date or datetime; naive values are UTC. Raises ValueError with a clear message."""
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise ValueError(f"not an ISO-8601 timestamp: {value!r} (use e.g. 2026-01-31T09:00:00Z)") from None
    out_of_range = ValueError(f"timestamp {value!r} is out of range; use a time between "
                              f"{EARLIEST.date()} and {LATEST.date()}")
    try:
        when = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is year 0 in UTC
        raise out_of_range from None
    if not EARLIEST <= when < LATEST:
        raise out_of_range
    return when


_write_seq_lock = threading.Lock()
_last_write_seq = 0


def next_write_seq() -> int:
    """The order a new note is recorded in (``notes.write_seq``): nanoseconds since the epoch,
    never below one this process gave before, so the rows of one batch count up in the order
    they are written. It orders two notes stated at one same time (a corpus that dates only
    its sessions), nothing else."""
    global _last_write_seq
    with _write_seq_lock:
        _last_write_seq = max(_last_write_seq + 1, time.time_ns())
        return _last_write_seq

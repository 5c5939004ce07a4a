"""The dual gate (R2) as a frozen-clock table."""

from datetime import UTC, datetime, timedelta

import pytest

from worker.runs.gate import decide_gate

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("since_last", "sessions", "due"),
    [
        (timedelta(hours=23, minutes=59), 5, False),
        (timedelta(hours=24), 4, False),
        (timedelta(hours=24), 5, True),
        (timedelta(hours=72), 0, False),
        (timedelta(hours=72), 12, True),
        (None, 5, True),   # first run needs only the sessions
        (None, 4, False),
    ],
)
def test_gate_needs_time_and_sessions(since_last: timedelta | None, sessions: int, due: bool) -> None:
    """R2: ≥24 h since the last success AND ≥5 sessions since; the first run needs only sessions."""
    last = None if since_last is None else NOW - since_last
    decision = decide_gate(now=NOW, last_success_at=last, sessions_since=sessions,
                           gate_hours=24, gate_sessions=5)
    assert decision.due is due
    assert decision.reason

"""The gate as frozen-clock tables: R2's dual gate, the idle wait with its maximum staleness, the
volume trigger, and an agent's overrides."""

from datetime import UTC, datetime, timedelta

import pytest

from worker.runs.gate import GatePolicy, GateRule, ScopeActivity, decide_gate

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
H = timedelta(hours=1)
M = timedelta(minutes=1)


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
    decision = decide_gate(now=NOW, policy=GatePolicy(hours=24, sessions=5),
                           activity=ScopeActivity(last_success_at=last, sessions_since=sessions))
    assert decision.due is due
    assert decision.reason


IDLE = GatePolicy(hours=24, sessions=5, idle_minutes=30, max_stale_hours=72)


@pytest.mark.parametrize(
    ("policy", "since_last", "sessions", "notes", "quiet_for", "pending_for", "rule"),
    [
        # -- the idle wait (30 min) with a 72 h maximum staleness ---------------------------
        # Due and the last session ended 31 min ago: quiet long enough.
        (IDLE, 30 * H, 5, 0, 31 * M, None, GateRule.DUE),
        # Exactly 30 min of quiet is enough ("at least N minutes", not "more than").
        (IDLE, 30 * H, 5, 0, 30 * M, None, GateRule.DUE),
        # Due but the user was active 5 min ago: wait.
        (IDLE, 30 * H, 5, 0, 5 * M, None, GateRule.WAITING_FOR_IDLE),
        # A busy user who never goes quiet: after 72 h since the last dream it runs anyway.
        (IDLE, 72 * H, 5, 0, 1 * M, None, GateRule.DUE_STALE),
        (IDLE, 71 * H, 5, 0, 1 * M, None, GateRule.WAITING_FOR_IDLE),
        # A session stamped in the future (clock skew) is activity right now.
        (IDLE, 30 * H, 5, 0, -10 * M, None, GateRule.WAITING_FOR_IDLE),
        # First dream of a busy scope: staleness counts from its earliest pending session.
        (IDLE, None, 5, 0, 1 * M, 80 * H, GateRule.DUE_STALE),
        (IDLE, None, 5, 0, 1 * M, 2 * H, GateRule.WAITING_FOR_IDLE),
        # The idle wait never makes a scope due that is not: too few sessions stays too few …
        (IDLE, 100 * H, 4, 0, 1 * M, None, GateRule.TOO_LITTLE_ACTIVITY),
        # … and too soon stays too soon, however quiet.
        (IDLE, 23 * H, 5, 0, 600 * M, None, GateRule.TOO_SOON),
        # An idle wait without a maximum staleness waits as long as the user is active.
        (GatePolicy(idle_minutes=30), 500 * H, 5, 0, 1 * M, None, GateRule.WAITING_FOR_IDLE),
        # No idle wait configured: activity a minute ago does not matter (today's behaviour).
        (GatePolicy(), 30 * H, 5, 0, 1 * M, None, GateRule.DUE),
        # -- the volume trigger: 20 changed notes instead of 5 sessions ---------------------
        # A quiet store with many new notes but few sessions becomes due.
        (GatePolicy(notes=20), 30 * H, 1, 20, None, None, GateRule.DUE),
        (GatePolicy(notes=20), 30 * H, 1, 19, None, None, GateRule.TOO_LITTLE_ACTIVITY),
        # It is an alternative, not an extra condition: sessions alone still suffice.
        (GatePolicy(notes=20), 30 * H, 5, 0, None, None, GateRule.DUE),
        # Volume never shortens the time rule.
        (GatePolicy(notes=20), 3 * H, 0, 500, None, None, GateRule.TOO_SOON),
        # Changed notes do not count while the trigger is off.
        (GatePolicy(), 30 * H, 0, 500, None, None, GateRule.TOO_LITTLE_ACTIVITY),
        # Volume-due and busy: the idle wait applies to it as well.
        (GatePolicy(notes=20, idle_minutes=30), 30 * H, 0, 25, 2 * M, None,
         GateRule.WAITING_FOR_IDLE),
        # A first dream through volume alone.
        (GatePolicy(notes=20), None, 0, 20, None, None, GateRule.DUE),
    ],
)
def test_gate_idle_wait_staleness_and_volume(
    policy: GatePolicy, since_last: timedelta | None, sessions: int, notes: int,
    quiet_for: timedelta | None, pending_for: timedelta | None, rule: GateRule,
) -> None:
    """Each row pins which rule decides; due exactly for DUE and DUE_STALE, and the reason names
    the figures that decided (never empty)."""
    activity = ScopeActivity(
        last_success_at=None if since_last is None else NOW - since_last,
        sessions_since=sessions, notes_changed_since=notes,
        last_session_at=None if quiet_for is None else NOW - quiet_for,
        pending_since=None if pending_for is None else NOW - pending_for,
    )
    decision = decide_gate(now=NOW, policy=policy, activity=activity)
    assert decision.rule is rule, decision
    assert decision.due is (rule in (GateRule.DUE, GateRule.DUE_STALE))
    assert decision.reason and decision.as_dict()["rule"] == rule.value


def test_reasons_name_the_figures() -> None:
    """A person reading `dream gate --explain` sees the numbers that decided."""
    waiting = decide_gate(now=NOW, policy=IDLE, activity=ScopeActivity(
        NOW - 30 * H, 6, last_session_at=NOW - 5 * M))
    assert "6 of 5 sessions" in waiting.reason and "30 min" in waiting.reason
    assert "5.0 min ago" in waiting.reason
    stale = decide_gate(now=NOW, policy=IDLE, activity=ScopeActivity(
        NOW - 80 * H, 5, last_session_at=NOW - 1 * M))
    assert "80.00 h" in stale.reason and "72 h" in stale.reason
    volume = decide_gate(now=NOW, policy=GatePolicy(notes=20), activity=ScopeActivity(
        NOW - 30 * H, 1, notes_changed_since=3))
    assert volume.reason == "1 of 5 sessions or 3 of 20 changed notes since last dream"
    by_volume = decide_gate(now=NOW, policy=GatePolicy(notes=20), activity=ScopeActivity(
        NOW - 30 * H, 1, notes_changed_since=21))
    assert by_volume.reason == "due: 21 of 20 changed notes and 30.00 h since last dream"
    first = decide_gate(now=NOW, policy=GatePolicy(), activity=ScopeActivity(None, 2))
    assert first.reason == "2 of 5 sessions since the scope began (no dream yet)"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, GatePolicy(hours=24, sessions=5)),
        # NULL columns keep the deployment's value; set ones replace it.
        ({"hours": None, "sessions": 2, "notes": None}, GatePolicy(hours=24, sessions=2)),
        ({"idle_minutes": 15.0, "max_stale_hours": 48.0},
         GatePolicy(hours=24, sessions=5, idle_minutes=15.0, max_stale_hours=48.0)),
        # Zero is a value, not "unset": an agent may dream after every session.
        ({"sessions": 0, "hours": 0.0}, GatePolicy(hours=0.0, sessions=0)),
        # Unknown keys are ignored, never applied.
        ({"colour": "blue"}, GatePolicy(hours=24, sessions=5)),
    ],
)
def test_agent_overrides(overrides: dict[str, object], expected: GatePolicy) -> None:
    """An agent's own gate settings replace the deployment's one by one."""
    assert GatePolicy(hours=24, sessions=5).overridden(overrides) == expected


BACKOFF = GatePolicy(hours=24, sessions=5, backoff_seconds=900, backoff_max_seconds=86_400)


@pytest.mark.parametrize(
    ("policy", "sessions", "failed", "failed_ago", "rule", "retry_in"),
    [
        # A due scope whose last run failed waits one beat interval (15 min) after it …
        (BACKOFF, 5, 1, 5 * M, GateRule.BACKING_OFF, 10 * M),
        # … and is tried at the first check from then ("at least", not "more than").
        (BACKOFF, 5, 1, 15 * M, GateRule.DUE, None),
        # Each further failure in a row doubles the wait: 2 → 30 min, 3 → 60 min, 4 → 2 h.
        (BACKOFF, 5, 2, 29 * M, GateRule.BACKING_OFF, 1 * M),
        (BACKOFF, 5, 2, 30 * M, GateRule.DUE, None),
        (BACKOFF, 5, 3, 59 * M, GateRule.BACKING_OFF, 1 * M),
        (BACKOFF, 5, 4, 1 * H, GateRule.BACKING_OFF, 1 * H),
        # The doubling stops at the cap: 20 failures wait 24 h, not 15 min × 2^19.
        (BACKOFF, 5, 20, 23 * H, GateRule.BACKING_OFF, 1 * H),
        (BACKOFF, 5, 20, 24 * H, GateRule.DUE, None),
        # Years of failures do not overflow the doubling.
        (BACKOFF, 5, 5000, 1 * M, GateRule.BACKING_OFF, 24 * H - 1 * M),
        # A cap of one beat: every failure waits one interval, never more.
        (GatePolicy(backoff_seconds=900, backoff_max_seconds=900), 5, 9, 14 * M,
         GateRule.BACKING_OFF, 1 * M),
        # No failure in a row: due as before.
        (BACKOFF, 5, 0, None, GateRule.DUE, None),
        # The back-off turned off (cap 0): a failing scope is due at every check.
        (GatePolicy(backoff_seconds=900, backoff_max_seconds=0), 5, 7, 1 * M, GateRule.DUE,
         None),
        # A scope not due for another reason says that reason, not the back-off.
        (BACKOFF, 4, 3, 1 * M, GateRule.TOO_LITTLE_ACTIVITY, None),
    ],
)
def test_a_failing_scope_backs_off(policy: GatePolicy, sessions: int, failed: int,
                                   failed_ago: timedelta | None, rule: GateRule,
                                   retry_in: timedelta | None) -> None:
    """After failed runs in a row a due scope waits one beat interval after the last, doubled
    with each further failure up to the cap; the decision names the failures and the time of the
    next try, in the reason and as fields."""
    activity = ScopeActivity(
        last_success_at=NOW - 30 * H, sessions_since=sessions, failed_runs=failed,
        last_failed_at=None if failed_ago is None else NOW - failed_ago)
    decision = decide_gate(now=NOW, policy=policy, activity=activity)
    assert decision.rule is rule
    assert decision.due is (rule is GateRule.DUE)
    if retry_in is None:
        assert decision.retry_at is None and "retry_at" not in decision.as_dict()
        return
    assert decision.retry_at == NOW + retry_in and decision.failures == failed
    assert decision.as_dict()["retry_at"] == (NOW + retry_in).isoformat()
    runs = "run" if failed == 1 else "runs"
    assert decision.reason.startswith(f"backing off after {failed} failed {runs} in a row")
    assert f"{NOW + retry_in:%Y-%m-%d %H:%M:%S} UTC" in decision.reason
    assert decision.reason.endswith("otherwise due: 5 of 5 sessions and 30.00 h since last dream")

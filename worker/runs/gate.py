"""The gate: is a scope due for a dream, and why. Pure: the service loads the figures.

Enough time since the last successful dream AND enough activity since (sessions, or changed
notes when the volume trigger is on); optionally wait for a quiet moment, but never longer than
a maximum staleness; and a scope whose runs keep failing waits longer after each failure.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any


class GateRule(StrEnum):
    """Which rule decided; stable names for logs, JSON and tests (the reason is for people)."""

    TOO_LITTLE_ACTIVITY = "too_little_activity"
    TOO_SOON = "too_soon"
    WAITING_FOR_IDLE = "waiting_for_idle"
    DUE = "due"
    DUE_STALE = "due_stale"  # the user never went quiet, but the scope waited long enough
    ALREADY_ACTIVE = "already_active"  # due, but a run is already queued or running
    BACKING_OFF = "backing_off"  # due, but its last runs failed: it waits before the next try
    # A run writing at a past `--now`: the scope was dreamt after that time (a replay would
    # dream it again).
    DREAMT_SINCE = "dreamt_since"


@dataclass(frozen=True)
class GateDecision:
    due: bool
    reason: str
    rule: GateRule = GateRule.DUE
    failures: int | None = None  # BACKING_OFF: the scope's failed runs in a row
    retry_at: datetime | None = None  # BACKING_OFF: the first gate check that tries it again

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"due": self.due, "rule": self.rule.value, "reason": self.reason}
        if self.retry_at is not None:
            out |= {"failures": self.failures, "retry_at": self.retry_at.isoformat()}
        return out


@dataclass(frozen=True)
class GatePolicy:
    """One scope's gate settings: the deployment's, with its agent's overrides applied."""

    hours: float = 24.0
    sessions: int = 5
    notes: int | None = None  # volume trigger: this many new/changed notes instead of sessions
    idle_minutes: float | None = None  # wait for this long without session activity …
    max_stale_hours: float | None = None  # … unless the last dream is at least this old
    # After failed runs in a row: wait this long after the last (the beat interval), doubled
    # with each further failure, at most ``backoff_max_seconds`` (0: no back-off).
    backoff_seconds: float = 0.0
    backoff_max_seconds: float = 0.0

    def overridden(self, overrides: dict[str, Any]) -> GatePolicy:
        """This policy with every non-None override applied (an agent's own gate settings)."""
        known = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in overrides.items() if k in known and v is not None})


@dataclass(frozen=True)
class ScopeActivity:
    """What happened in a scope since its last successful dream."""

    last_success_at: datetime | None
    sessions_since: int
    notes_changed_since: int = 0
    last_session_at: datetime | None = None  # latest session start or end (any time)
    pending_since: datetime | None = None  # earliest session since the last dream
    # Failed runs in a row since the scope's last dream or forced run, and when the last ended.
    failed_runs: int = 0
    last_failed_at: datetime | None = None
    # When the scope's latest cancelled run was cancelled (any time): the operator's "not now"
    # holds the scope for the gate's hours, as a dream would, its sessions unspent.
    last_cancelled_at: datetime | None = None


def decide_gate(*, now: datetime, policy: GatePolicy, activity: ScopeActivity) -> GateDecision:
    """Due when there is enough activity AND enough time (a first dream needs only the activity),
    and, with an idle wait, the scope has been quiet long enough or has waited too long; and,
    after failed runs in a row, once the back-off since the last has passed."""
    return _backing_off(now, policy, activity, _decide_due(now, policy, activity))


def backoff_wait(failures: int, base_seconds: float, max_seconds: float) -> timedelta:
    """How long a scope waits after ``failures`` failed runs in a row: the base (one beat
    interval) after the first, doubled with each further one, never more than the cap; none
    without a failure or with the back-off off (cap 0)."""
    if failures < 1 or max_seconds <= 0:
        return timedelta(0)
    # The exponent is bounded: a scope failing for years must not overflow the float.
    return timedelta(seconds=min(base_seconds * 2.0 ** min(failures - 1, 64), max_seconds))


def _backing_off(now: datetime, p: GatePolicy, a: ScopeActivity,
                 decision: GateDecision) -> GateDecision:
    # Only a due scope backs off: one not due for another reason says that reason instead.
    if not decision.due or a.failed_runs < 1 or a.last_failed_at is None:
        return decision
    retry_at = a.last_failed_at + backoff_wait(a.failed_runs, p.backoff_seconds,
                                               p.backoff_max_seconds)
    if now >= retry_at:
        return decision
    runs = "run" if a.failed_runs == 1 else "runs"
    return GateDecision(
        False, f"backing off after {a.failed_runs} failed {runs} in a row (the last ended "
               f"{_span(now - a.last_failed_at)} ago): next tried by the first gate check "
               f"from {retry_at:%Y-%m-%d %H:%M:%S} UTC, in {_span(retry_at - now)}; "
               f"otherwise {decision.reason}", GateRule.BACKING_OFF,
        failures=a.failed_runs, retry_at=retry_at)


def _decide_due(now: datetime, p: GatePolicy, a: ScopeActivity) -> GateDecision:
    # No hours and no sessions would dream every scope at every gate check, on nothing new:
    # then a dream needs one session (or the changed notes of the volume trigger).
    needed = max(p.sessions, 1) if p.hours <= 0 else p.sessions
    by_sessions = a.sessions_since >= needed
    by_notes = p.notes is not None and a.notes_changed_since >= p.notes
    counted = f"{a.sessions_since} of {needed} sessions"
    if p.notes is not None:
        counted += f" or {a.notes_changed_since} of {p.notes} changed notes"
    if not (by_sessions or by_notes):
        since = ("since last dream" if a.last_success_at is not None
                 else "since the scope began (no dream yet)")
        return GateDecision(False, f"{counted} {since}", GateRule.TOO_LITTLE_ACTIVITY)
    if a.last_success_at is not None:
        elapsed = now - a.last_success_at
        if elapsed < timedelta(hours=p.hours):
            return GateDecision(
                False, f"{_hours(elapsed)} of {p.hours:g} h since last dream", GateRule.TOO_SOON
            )
        since = f"and {_hours(elapsed)} since last dream"
    else:
        since = "since the scope began (first dream)"
    if (a.last_cancelled_at is not None
            and (a.last_success_at is None or a.last_cancelled_at > a.last_success_at)):
        held = now - a.last_cancelled_at
        if held < timedelta(hours=p.hours):
            return GateDecision(
                False, f"{_hours(held)} of {p.hours:g} h since a run of the scope was "
                       "cancelled (a cancel holds the scope as a dream does; its sessions "
                       "still count)", GateRule.TOO_SOON)
    enough = (f"{a.notes_changed_since} of {p.notes} changed notes" if by_notes and not by_sessions
              else f"{a.sessions_since} of {needed} sessions")
    if p.idle_minutes is not None and a.last_session_at is not None:
        quiet = now - a.last_session_at
        # A session stamped in the future (clock skew) counts as activity right now.
        if quiet < timedelta(minutes=p.idle_minutes):
            waited_from = a.last_success_at or a.pending_since
            if (p.max_stale_hours is not None and waited_from is not None
                    and now - waited_from >= timedelta(hours=p.max_stale_hours)):
                return GateDecision(
                    True, f"due although the user is active (last session {_minutes(quiet)} "
                          f"ago): waited {_hours(now - waited_from)} ≥ {p.max_stale_hours:g} h "
                          "maximum staleness", GateRule.DUE_STALE)
            return GateDecision(
                False, f"due ({enough}) but waiting for {p.idle_minutes:g} min without session "
                       f"activity; last session {_minutes(quiet)} ago", GateRule.WAITING_FOR_IDLE)
    return GateDecision(True, f"due: {enough} {since}", GateRule.DUE)


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.2f} h"


def _minutes(delta: timedelta) -> str:
    return f"{max(delta.total_seconds(), 0.0) / 60:.1f} min"


def _span(delta: timedelta) -> str:
    """Minutes up to two hours, then hours."""
    return _minutes(delta) if delta < timedelta(hours=2) else _hours(delta)

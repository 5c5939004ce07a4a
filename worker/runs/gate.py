"""The gate: is a scope due for a dream, and why. Pure: the service loads the figures.

Enough time since the last successful dream AND enough activity since (sessions, or changed
notes when the volume trigger is on); optionally wait for a quiet moment, but never longer than
a maximum staleness.
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


@dataclass(frozen=True)
class GateDecision:
    due: bool
    reason: str
    rule: GateRule = GateRule.DUE

    def as_dict(self) -> dict[str, Any]:
        return {"due": self.due, "rule": self.rule.value, "reason": self.reason}


@dataclass(frozen=True)
class GatePolicy:
    """One scope's gate settings: the deployment's, with its agent's overrides applied."""

    hours: float = 24.0
    sessions: int = 5
    notes: int | None = None  # volume trigger: this many new/changed notes instead of sessions
    idle_minutes: float | None = None  # wait for this long without session activity …
    max_stale_hours: float | None = None  # … unless the last dream is at least this old

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


def decide_gate(*, now: datetime, policy: GatePolicy, activity: ScopeActivity) -> GateDecision:
    """Due when there is enough activity AND enough time (a first dream needs only the activity),
    and, with an idle wait, the scope has been quiet long enough or has waited too long."""
    a, p = activity, policy
    by_sessions = a.sessions_since >= p.sessions
    by_notes = p.notes is not None and a.notes_changed_since >= p.notes
    counted = f"{a.sessions_since} of {p.sessions} sessions"
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
    enough = (f"{a.notes_changed_since} of {p.notes} changed notes" if by_notes and not by_sessions
              else f"{a.sessions_since} of {p.sessions} sessions")
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

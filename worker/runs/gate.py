"""The dual gate: enough time AND enough sessions since the scope's last successful dream."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class GateDecision:
    due: bool
    reason: str


def decide_gate(
    *, now: datetime, last_success_at: datetime | None, sessions_since: int,
    gate_hours: float, gate_sessions: int,
) -> GateDecision:
    """Pure: ≥ gate_hours since the last success AND ≥ gate_sessions since; first run needs only sessions."""
    if sessions_since < gate_sessions:
        return GateDecision(False, f"{sessions_since} of {gate_sessions} sessions since last dream")
    if last_success_at is not None:
        elapsed = now - last_success_at
        if elapsed < timedelta(hours=gate_hours):
            hours = elapsed.total_seconds() / 3600
            return GateDecision(False, f"{hours:.2f} h of {gate_hours:g} h since last dream")
    return GateDecision(True, "due")

"""The gate's decision for each scope, read from the store in a few bulk queries: what a gate
check, `dream gate --explain`, an unforced `dream run` and `dream run --due` ask before they
create a run, and ask again in the transaction that inserts it (``GateClosed``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from worker.app import App
from worker.clock import utcnow
from worker.config import Settings
from worker.domain.types import Scope
from worker.runs.gate import GateDecision, GatePolicy, GateRule, ScopeActivity, decide_gate
from worker.store.chunks import IN_CHUNK, chunked
from worker.store.uow import UnitOfWork


class GateClosed(Exception):
    """The gate, asked again once the insert of a run held its scope, no longer finds the scope
    due (a run of it dreamed between the first reading and the insert): the insert is rolled
    back, nothing was written."""

    def __init__(self, decision: GateDecision) -> None:
        super().__init__(decision.reason)
        self.decision = decision


def decide_scopes(
    app: App, now: datetime | None, scopes: list[Scope] | None = None,
    failing: set[str] | None = None, *, writing: bool = False,
) -> dict[Scope, GateDecision]:
    """The gate decision of every known scope (or of ``scopes``), read in a few bulk queries;
    creates nothing. ``now``: a `--now` given, the store as of then (no dream or failure ended
    after it counts), else None: the present. ``failing``: keys of scopes whose run fails at ``now``
    first (the lost run a gate check gives up), one more failed run in the scope's streak.
    ``writing``: the decision is for a run that writes, dated ``now``: a scope dreamt after that
    time is not due (``dreamt_since``)."""
    with app.uow() as uow:
        return decide_in(uow, app.settings, now, scopes, failing, writing=writing)


def decide_in(uow: UnitOfWork, s: Settings, clock: datetime | None,
              scopes: list[Scope] | None = None,
              failing: set[str] | None = None, *,
              writing: bool = False) -> dict[Scope, GateDecision]:
    """``decide_scopes`` in the caller's transaction (the one inserting the scopes' runs)."""
    now = clock or utcnow()
    default = GatePolicy(hours=s.gate_hours, sessions=s.gate_sessions, notes=s.gate_notes,
                         idle_minutes=s.gate_idle_minutes, max_stale_hours=s.gate_max_stale_hours,
                         backoff_seconds=s.beat_interval_seconds,
                         backoff_max_seconds=s.failure_backoff_max_seconds)
    if scopes is None:
        scopes = sorted(set(uow.sessions.scopes()) | set(uow.notes.scopes()))
    agents = uow.entities.fetch("agent", {sc.agent_id for sc in scopes})
    policies = {sc: default.overridden(_agent_gate(agents.get(sc.agent_id))) for sc in scopes}
    # The volume count is one aggregate over notes: only paid for when some scope uses it.
    volume = any(p.notes is not None for p in policies.values())
    last: dict[str, datetime] = {}
    sessions: dict[str, tuple[int, datetime | None, datetime | None]] = {}
    changed: dict[str, int] = {}
    streaks: dict[str, tuple[int, datetime]] = {}
    cancels: dict[str, datetime] = {}
    dreamt: dict[str, datetime] = {}  # writing at a past clock: each scope's latest dream
    # A query per chunk of scopes: each binds a scope's key twice (in its last dream's
    # sub-select and in the filter), and a store may know more scopes than a statement binds.
    for keys in chunked([sc.key for sc in scopes], IN_CHUNK // 2):
        last.update(uow.run_history.last_success_at(keys, clock))
        sessions.update(uow.sessions.activity_since_last_success(keys, now, clock))
        changed.update(uow.run_history.notes_changed_since_last_success(keys, now, clock)
                       if volume else {})
        streaks.update(uow.run_history.failure_streaks(keys, clock)
                       if s.failure_backoff_max_seconds else {})
        cancels.update(uow.run_history.last_cancelled_at(keys, clock))
        dreamt.update(uow.run_history.last_success_at(keys, ended=True)
                      if writing and clock else {})
    decisions: dict[Scope, GateDecision] = {}
    for scope in scopes:
        count, latest, earliest = sessions.get(scope.key, (0, None, None))
        failed, failed_at = streaks.get(scope.key, (0, None))
        if failing and scope.key in failing:
            failed, failed_at = failed + 1, now
        activity = ScopeActivity(
            last_success_at=last.get(scope.key), sessions_since=count,
            notes_changed_since=changed.get(scope.key, 0), last_session_at=latest,
            pending_since=earliest, failed_runs=failed, last_failed_at=failed_at,
            last_cancelled_at=cancels.get(scope.key),
        )
        decisions[scope] = dreamt_since(now, dreamt.get(scope.key)) or decide_gate(
            now=now, policy=policies[scope], activity=activity)
    return decisions


def dreamt_since(clock: datetime, dreamt_at: datetime | None) -> GateDecision | None:
    """A run dated ``clock`` (a past `--now`) of a scope whose latest dream ended after it
    would dream again what that dream did (the gate, as of then, does not count it: it had not
    finished): not due, saying so; None otherwise."""
    if dreamt_at is None or dreamt_at <= clock:
        return None
    return GateDecision(
        False, f"already dreamt at {dreamt_at:%Y-%m-%d %H:%M:%S} UTC, after --now "
               f"{clock:%Y-%m-%d %H:%M:%S} UTC: a run dated then would dream it again; give a "
               "later --now, or --force to replay anyway", GateRule.DREAMT_SINCE)


def _agent_gate(agent: Any) -> dict[str, Any]:
    if agent is None:
        return {}
    return {"hours": agent.gate_hours, "sessions": agent.gate_sessions, "notes": agent.gate_notes,
            "idle_minutes": agent.gate_idle_minutes,
            "max_stale_hours": agent.gate_max_stale_hours}

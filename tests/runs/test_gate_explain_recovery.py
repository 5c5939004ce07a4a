"""`dream gate --explain` (and MCP ``dream_status``) say what the next gate check does with a
scope whose run was lost: the check recovers lost runs first (R5, R30), so a run it gives up
frees the scope (and counts as a failure), and one it retries or hands out again still holds it.
Explain reads only: it changes no run (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from tests.runs.test_gate_service import _dream
from tests.support.factories import NOW, add_sessions
from worker.app import App
from worker.domain.types import RunStatus, Scope
from worker.runs import service
from worker.runs.gate import GateRule
from worker.store.models import DreamRunRow

SCOPE = Scope("stale")


def _lost_run(app: App, *, claimed: bool, spent: bool) -> str:
    """The scope's gate-created run, lost: running with its lease lapsed (``claimed``) or
    queued and never claimed; ``spent``: it used its last attempt or hand-over."""
    add_sessions(app, 5, agent_id="stale", start=NOW - timedelta(hours=1))
    (run_id,) = service.gate_check(app, now=NOW).created
    tries = app.settings.max_attempts if spent else 1
    lost: dict[str, Any] = (
        {"status": RunStatus.RUNNING.value, "started_at": NOW, "lease_expires_at": NOW,
         "attempts": tries} if claimed else
        {"status": RunStatus.QUEUED.value, "enqueued_at": NOW, "requeues": tries})
    with app.uow() as uow:
        uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == run_id).values(**lost))
        uow.commit()
    return run_id


def _runs(app: App) -> list[tuple[Any, ...]]:
    with app.uow() as uow:
        return sorted((r.id, r.status, r.attempts, r.requeues, r.enqueued_at,
                       r.lease_expires_at, r.finished_at) for r in uow.runs.list(SCOPE))


@pytest.mark.parametrize("claimed, spent, rule, does", [
    (True, True, GateRule.BACKING_OFF, "its lease lapsed; the gate check gives it up first"),
    (True, False, GateRule.ALREADY_ACTIVE, "its lease lapsed; the gate check retries it first"),
    (False, True, GateRule.DUE, "nobody claimed it; the gate check gives it up first"),
    (False, False, GateRule.ALREADY_ACTIVE,
     "nobody claimed it; the gate check hands it out again first"),
])
def test_gate_explain_says_what_the_check_does_with_a_lost_run(
        app: App, claimed: bool, spent: bool, rule: GateRule, does: str) -> None:
    """Explain said already_active for a scope whose run had lapsed for good, while the next
    gate check gave that run up and started over (a new run, or a back-off after a claimed
    run's failure). It now decides as the check will, names the run and what the check does
    with it, and changes nothing; the check then decides the same."""
    run_id = _lost_run(app, claimed=claimed, spent=spent)
    later = NOW + timedelta(seconds=app.settings.queued_timeout_seconds + 1)
    before = _runs(app)
    shown = _dream(app, "gate", "--explain", "--json", "--now", later.isoformat())
    assert shown.exit_code == 0, shown.output
    (explained,) = json.loads(shown.stdout)["scopes"]
    assert (explained["due"], explained["rule"]) == (rule is GateRule.DUE, rule.value)
    assert explained["reason"].endswith(f"(run {run_id}: {does})")
    assert _runs(app) == before
    checked = service.gate_check(app, now=later)
    assert checked.decisions[SCOPE.key].rule is rule
    assert (run_id in checked.failed) is spent
    assert len(checked.created) == (rule is GateRule.DUE)

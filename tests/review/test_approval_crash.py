"""R3 for an approval: a process killed while it records the item's decision leaves the change
and the decision both or neither, and a recovered approval's run applies nothing on its own.
A real `approve` in a child process, SIGKILLed; SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta

import pytest

from tests.review.test_service import SCOPE, _merge, _propose, _seed, _statuses
from worker.app import App
from worker.clock import utcnow
from worker.review import service as review
from worker.runs import service
from worker.store.models import ReviewItemRow

# The approval in a child process that kills itself as it sends its first statement
# starting with argv[2] (a SIGKILL: no rollback, no cleanup, as a crashed host or OOM kill).
_APPROVE = """
import os, signal, sys
from sqlalchemy import event
from worker.app import build_app
from worker.domain.types import Scope
from worker.review import service as review

app = build_app()

def die(_conn, _cursor, statement, *_):
    if " ".join(statement.split()).startswith(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)

event.listen(app.engine, "before_cursor_execute", die)
review.approve(app, Scope("agent-1"), review.Selector(item_id=int(sys.argv[1])), by="cli:ana")
"""


def _item(app: App, item_id: int) -> ReviewItemRow:
    with app.uow() as uow:
        return uow.session.get_one(ReviewItemRow, item_id)


@pytest.mark.parametrize("kill_at", [
    "UPDATE review_items",  # the item's decision
    "UPDATE dream_runs",  # the approval's run ending
])
def test_an_approval_killed_as_it_records_its_decision_leaves_both_or_neither(
        app: App, kill_at: str) -> None:
    """Killed as it records the decision: the notes are as they were and the item is open;
    once the lease lapses the gate recovers the approval's run, which applies nothing and ends
    `cancelled` (never `succeeded`), and the item is approved as usual. Before, the merge had committed on its own: t1 and t2
    revoked into a fused note while the item read open, and approving it then said "stale:
    note t1 changed since it was proposed" about the change its own approval had made."""
    _seed(app)
    before = _statuses(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_LLM_PROVIDER": "none"}
    killed = subprocess.run([sys.executable, "-c", _APPROVE, str(item), kill_at], env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert _statuses(app) == before
    assert _item(app, item).status == "open"

    later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 60)
    (retried,) = service.gate_check(app, now=later).retried
    # It applied nothing: its status says so (before: "succeeded", as if the item had been
    # applied), and so does its reason, naming the item.
    assert service.execute_run(app, retried) == "cancelled"
    assert _statuses(app) == before
    with app.uow() as uow:
        run = uow.runs.get(retried)
        assert run is not None and run.status_reason is not None
        assert run.status_reason.startswith(f"the approval of review item {item} stopped")
        assert "nothing was applied" in run.status_reason
        assert (run.totals or {})["flags"] == ["approval_stopped"]

    (decided,) = review.approve(app, SCOPE, review.Selector(item_id=item), by="cli:bo")
    assert decided.status == "approved", decided.line
    after = _statuses(app)
    assert after["t1"][0] == after["t2"][0] == "revoked"
    assert _item(app, item).applied_run_id == decided.run_id

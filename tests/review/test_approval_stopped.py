"""`dream review approve` stopped by Ctrl-C or SIGTERM while it applies an item: nothing of the
item is written, the approval's run is cancelled at once (an approval is never resumed), the
item stays open, and the command says so in one line and exits 13. Before, SIGTERM killed the
process and Ctrl-C printed "Aborted!": the approval's run stayed `running`, holding the scope
until its lease lapsed (an hour by default). A real `dream review approve` in a child process
that signals itself as it sends a chosen statement; SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.review.test_approval_crash import _item
from tests.review.test_service import SCOPE, _merge, _propose, _seed, _statuses
from worker.app import App
from worker.domain.types import RunStatus
from worker.review import service as review

# `dream review approve ITEM` in a child process that sends itself the signal argv[3] as it
# sends its first statement starting with argv[2].
_APPROVE = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine
from worker.cli import main

def stop(_conn, _cursor, statement, *_):
    if " ".join(statement.split()).startswith(sys.argv[2]):
        os.kill(os.getpid(), getattr(signal, sys.argv[3]))

event.listen(Engine, "before_cursor_execute", stop)
main(["review", "approve", sys.argv[1], "--agent", "agent-1"])
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_an_approval_stopped_while_it_writes_leaves_the_item_open_and_its_scope_free(
        app: App, sig: str) -> None:
    _seed(app)
    before = _statuses(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_LLM_PROVIDER": "none", "DREAM_LOG_LEVEL": "ERROR"}
    env.pop("DREAM_BROKER_URL", None)
    stopped = subprocess.run(
        [sys.executable, "-c", _APPROVE, str(item), "UPDATE review_items", sig], env=env,
        capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 13, (stopped.stdout, stopped.stderr[-2000:])
    line = stopped.stdout.strip().splitlines()[-1]
    assert line.startswith(f"approval of item {item} stopped by {sig}: nothing of it was "
                           "written"), stopped.stdout
    assert _statuses(app) == before
    assert _item(app, item).status == "open"
    with app.uow() as uow:
        run = uow.runs.active_for_scope(SCOPE)
        assert run is None  # the scope is free: the approval's run is cancelled
        (approval,) = [r for r in uow.runs.list(SCOPE) if r.trigger == "review"]
        assert approval.status == RunStatus.CANCELLED.value
        assert f"stopped by {sig}" in (approval.status_reason or "")
    (decided,) = review.approve(app, SCOPE, review.Selector(item_id=item), by="cli:ana")
    assert decided.status == "approved", decided
    assert _statuses(app)["t1"][0] == "revoked"

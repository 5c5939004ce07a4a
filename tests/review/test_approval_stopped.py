"""`dream review approve` stopped by Ctrl-C or SIGTERM while it applies an item: nothing of the
item is written, the approval's run is cancelled at once (an approval is never resumed), the
item stays open, and the command says so in one line and exits 13. Before, SIGTERM killed the
process and Ctrl-C printed "Aborted!": the approval's run stayed `running`, holding the scope
until its lease lapsed (an hour by default). A real `dream review approve` in a child process
that signals itself as it sends a chosen statement (tests.support.stops); SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest

from tests.review.test_approval_crash import _item
from tests.review.test_service import SCOPE, _merge, _propose, _seed, _statuses
from tests.support.stops import dream_stopped
from worker.app import App
from worker.domain.types import RunStatus
from worker.review import service as review

# Where the stop lands: as the item's decision is written (inside the approval's write), and
# as the approval's run is created (held until the approval can cancel that run: stopped
# between the run's creation and the approval's start, the run stayed running).
POINTS = ["sql:UPDATE review_items", "sql:INSERT INTO dream_runs"]


@pytest.mark.parametrize("at", POINTS, ids=["deciding", "creating_its_run"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_an_approval_stopped_while_it_writes_leaves_the_item_open_and_its_scope_free(
        app: App, sig: str, at: str) -> None:
    _seed(app)
    before = _statuses(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    stopped = dream_stopped(app, at, sig,
                            "review", "approve", str(item), "--agent", "agent-1")
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


@pytest.mark.postgres
def test_an_approval_its_database_cuts_short_frees_its_scope_at_once() -> None:
    """The approval's write waits past DREAM_DB_LOCK_TIMEOUT_SECONDS on the scope lock a stuck
    session holds: the error says the database was busy and to try again, nothing is written,
    and its run is cancelled at once. Before, the run stayed running until its lease lapsed,
    and the retry the error asked for was refused: the scope was busy (an hour by default)."""
    import threading

    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from tests.conftest import drop_postgres_app, make_postgres_app
    from worker.store import scope_locks

    app = make_postgres_app(db_lock_timeout_seconds=0.3)
    try:
        _seed(app)
        before = _statuses(app)
        item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
        with app.engine.connect() as holder:
            holder.execute(text("SELECT pg_advisory_xact_lock(:space, hashtext(:key))"),
                           {"space": scope_locks._SCOPE_LOCKS, "key": SCOPE.key})
            release = threading.Timer(15, holder.rollback)  # without a lock timeout: waits
            release.start()
            try:
                with pytest.raises(OperationalError, match="lock timeout"):
                    review.approve(app, SCOPE, review.Selector(item_id=item), by="cli:ana")
            finally:
                release.cancel()
            holder.rollback()
        assert _statuses(app) == before
        assert _item(app, item).status == "open"
        with app.uow() as uow:
            assert uow.runs.active_for_scope(SCOPE) is None
            (approval,) = [r for r in uow.runs.list(SCOPE) if r.trigger == "review"]
            assert approval.status == RunStatus.CANCELLED.value
        (decided,) = review.approve(app, SCOPE, review.Selector(item_id=item), by="cli:ana")
        assert decided.status == "approved", decided
    finally:
        drop_postgres_app(app)

"""An approval's run is not a dream: approving review items leaves the scope's gate (time and
activity since its last dream) where the last dream left it. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from tests.review.test_service import SCOPE, _merge, _propose, _seed
from tests.support.factories import add_sessions
from tests.support.safety import run_row
from worker.app import App
from worker.clock import utcnow
from worker.review import service as review
from worker.runs.scheduling import scope_gate
from worker.store.models import DreamRunRow


def _dreamed_hours_ago(app: App, hours: int) -> None:
    """A finished dream of the scope that started and ended ``hours`` ago."""
    run_id = run_row(app, SCOPE)
    at = utcnow() - timedelta(hours=hours)
    with app.uow() as uow:
        uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == run_id)
                            .values(started_at=at, finished_at=at))
        uow.commit()


def test_approving_an_item_leaves_a_due_scope_due(app: App) -> None:
    """A scope due (30 h and 5 sessions since its last dream) stays due with the same figures
    after a reviewer approves an item, in a run of its own. Before, that run counted as the
    last dream: the scope read "0 of 5 sessions since last dream" and waited another day and
    five more sessions, so approving one proposal postponed the dream that proposes the rest."""
    _seed(app)
    _dreamed_hours_ago(app, 30)
    add_sessions(app, 5, agent_id=SCOPE.agent_id, start=utcnow() - timedelta(hours=1))
    before = scope_gate(app, SCOPE)
    assert before.due, before.reason
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    (decided,) = review.approve(app, SCOPE, review.Selector(item_id=item), by="cli:ana")
    assert decided.status == "approved", decided.line
    after = scope_gate(app, SCOPE)
    assert after.due, after.reason
    assert after.reason.split(" and ")[0] == before.reason.split(" and ")[0]  # 5 of 5 sessions

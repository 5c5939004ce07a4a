"""A crash at prune.after_archive / archive.after_archive leaves nothing half-applied (R3, R9)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from tests.support.factories import NOW, add_entities, add_notes, days_ago
from worker.app import App
from worker.domain.types import Scope
from worker.runs import service
from worker.safety import crashpoints
from worker.store.models import NoteRow, OperationLogRow


class Crash(Exception):
    pass


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    crashpoints.disarm_all()


def _boom() -> None:
    raise Crash("planted crash")


def _state(app: App) -> tuple[dict[str, str], int]:
    with app.uow() as uow:
        statuses = {r.id: r.status for r in uow.session.scalars(select(NoteRow))}
        logs = int(uow.session.scalar(select(func.count()).select_from(OperationLogRow)) or 0)
    return statuses, logs


@pytest.mark.parametrize("point", ["prune.after_archive", "archive.after_archive"])
def test_crash_after_archive_rolls_back_then_next_run_completes(app: App, point: str) -> None:
    """The crash fails the phase with nothing written; a later run archives exactly once."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "status": "disabled"})
    add_notes(app, {"id": "n1", "content": "a", "created_at": days_ago(200),
                    "access_count": 1, "last_accessed_at": days_ago(200)})  # read once, long
    # ago: idle past retention (a read with no date is never idle)
    phase = point.split(".")[0]
    crashpoints.arm(point, _boom)
    run_id = service.create_run(app, Scope("agent-1"), force=True, clock=NOW, phases=[phase])
    assert run_id
    service.execute_run(app, run_id)
    assert _state(app) == ({"n1": "active"}, 0)
    crashpoints.disarm_all()
    again = service.create_run(app, Scope("agent-1"), force=True, clock=NOW, phases=[phase])
    assert again
    service.execute_run(app, again)
    assert _state(app) == ({"n1": "archived"}, 1)

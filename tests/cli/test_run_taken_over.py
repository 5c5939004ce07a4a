"""`dream run` whose process lost the run's lease mid-run (paused past DREAM_LEASE_SECONDS, say)
while another executor took the run over and finished it: its own write is refused by the
lease fence, and it says in one line that it lost the run, exit 13, instead of printing the
other executor's report as its own (`succeeded`, exit 0)."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import update

from tests.cli.test_commands import dream
from tests.runs.test_phase_run import WRITING, _writing
from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import RunStatus
from worker.runs import service
from worker.runs.context import PhaseContext
from worker.store.models import DreamRunRow


def _taken_over(app: App) -> object:
    """Before this executor's first write: its lease lapses and the gate check recovers the
    run (what a process paused past its lease meets; the SQL of that recovery), and another
    executor claims the run and runs it to the end (in a thread of its own)."""
    done: list[str] = []

    def take(ctx: PhaseContext) -> None:
        if done:
            return  # the other executor's own consolidate
        done.append(ctx.run_id)
        with app.uow() as uow:
            uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == ctx.run_id).values(
                status=RunStatus.INTERRUPTED.value, lease_epoch=DreamRunRow.lease_epoch + 1,
                lease_expires_at=None))
            uow.commit()
        other = threading.Thread(target=service.execute_run, args=(app, ctx.run_id))
        other.start()
        other.join(60)

    return {**WRITING, "consolidate": _writing("consolidate", before=take)}


def test_a_run_taken_over_by_another_executor_is_not_reported_as_ours(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    add_notes(app, {"content": "User keeps a note"})
    registry = _taken_over(app)
    monkeypatch.setattr(service, "phase_registry", lambda: registry)
    ran = dream(app.settings.database_url, "run", "--agent", "agent-1", "--force")
    with app.uow() as uow:
        (run,) = uow.runs.list(limit=5)
    assert run.status == RunStatus.SUCCEEDED.value  # the other executor's doing
    assert ran.exit_code == 13, ran.output
    assert ran.stdout == (f"run {run.id}: this process lost the run's lease and another "
                          "executor took it over; nothing more was written here; "
                          f"`dream runs show {run.id}` says how it ended\n")

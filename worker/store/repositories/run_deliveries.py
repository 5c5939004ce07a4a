"""The SQL of a run's task deliveries (``worker.runs.deliveries``): counted in one statement,
and a run failed once too many of them died."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, case, update
from sqlalchemy.orm import Session

from worker.domain.types import ACTIVE_RUN_STATUSES, RunStatus
from worker.store.models import DreamRunRow

_RUNS = cast(Table, DreamRunRow.__table__)
# The same message delivered again (its earlier delivery never ended: its worker died) counts
# one more; another message (a chain's next task, a retry) starts from what it carries.
_COUNT = (
    update(_RUNS).where(_RUNS.c.id == bindparam("run"))
    .values(deliveries=case((_RUNS.c.delivery == bindparam("mine"), _RUNS.c.deliveries + 1),
                            else_=bindparam("carried") + 1),
            delivery=bindparam("mine"))
    .returning(_RUNS.c.deliveries, _RUNS.c.status)
)


def count_delivery(session: Session, run_id: str, message: str,
                   carried: int) -> tuple[int, str] | None:
    """(the deliveries counted so far with this one, the run's status); None for an unknown
    run. ``message``: the Celery message's identity; ``carried``: the deaths a retry carries."""
    row = session.connection().execute(
        _COUNT, {"run": run_id, "mine": message[:200], "carried": carried}).one_or_none()
    return None if row is None else (int(row.deliveries), str(row.status))


def fail_active(session: Session, run_id: str, now: datetime, error: str) -> bool:
    """A queued, running or interrupted run → failed, its lease released; False when it had
    ended already."""
    values: dict[str, Any] = {"status": RunStatus.FAILED.value, "finished_at": now,
                              "lease_expires_at": None, "error": error}
    result = session.connection().execute(
        update(_RUNS).where(_RUNS.c.id == run_id, _RUNS.c.status.in_(ACTIVE_RUN_STATUSES))
        .values(**values))
    return bool(result.rowcount == 1)

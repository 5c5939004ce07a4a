"""A bound on the redelivery of a run's Celery tasks.

Celery acknowledges a run's task once it ended (``task_acks_late``) and puts it back in the
queue when the worker process running it died (``task_reject_on_worker_lost``): a task that dies
on every delivery (a crash in finalize, a process killed each time) was redelivered forever,
a worker child restarted again and again. Each delivery now counts itself on the run before it
works (one statement): the same message delivered again means the delivery before it died. The
next one backs off instead of running at once (a retry 2, 4, 8 … s later, at most the task time
limit, that carries the count), and once ``DREAM_MAX_ATTEMPTS`` deliveries died in a row the
run is failed with the reason (`dream runs show`, the dashboard) and the message acknowledged."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from worker.app import App
from worker.clock import utcnow
from worker.domain.types import ACTIVE_RUN_STATUSES
from worker.runs.batches import release_run_batches
from worker.store.repositories.run_deliveries import count_delivery, fail_active
from worker.text.plural import counted

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Delivery:
    deaths: int  # deliveries of this run's task that died in a row before this one
    back_off: float | None = None  # retry after this many seconds instead of working now
    gave_up: bool = False  # the run was failed (or had ended): do nothing, ack the message


def begin_delivery(app: App, run_id: str, task: str, message: str,
                   carried: int = 0) -> Delivery:
    """Count this delivery of ``task`` (``message``: its task id and retry number) on the run
    and say what to do. ``carried``: the deaths the retry this delivery is carried (0: none)."""
    now = utcnow()
    with app.uow() as uow:
        counted_so_far = count_delivery(uow.session, run_id, message, carried)
        if counted_so_far is None:  # an unknown run: the task says so itself
            uow.commit()
            return Delivery(0)
        deliveries, status = counted_so_far
        deaths = deliveries - 1
        limit = app.settings.max_attempts
        failed = False
        if deaths >= limit and status in ACTIVE_RUN_STATUSES:
            failed = fail_active(uow.session, run_id, now, died(task, deaths))
            if failed:  # for good: its batch calls given up, its usage in its totals
                uow.runs.interrupt_steps([run_id], "the run gave up", now, resumed=False)
                uow.runs.record_usage([run_id])
        uow.commit()
    if deaths >= limit:
        log.error("task.gave_up", run_id=run_id, task=task, deaths=deaths, failed=failed)
        if failed:
            release_run_batches(app, [run_id], shown=False)
        return Delivery(deaths, gave_up=True)
    if deaths > carried:  # the delivery before this one died: wait before trying again
        wait = float(max(1, min(2 ** deaths, app.settings.task_time_limit)))
        log.warning("task.redelivered", run_id=run_id, task=task, deaths=deaths,
                    retry_in=wait)
        return Delivery(deaths, back_off=wait)
    return Delivery(deaths)


def died(task: str, deaths: int) -> str:
    """The failed run's reason: what happened, where to look."""
    return (f"gave up: its {task} task's worker process died {counted(deaths, 'time')} in a "
            "row (killed, out of memory, or crashed in the task); see the worker's log, "
            "then run the scope again")

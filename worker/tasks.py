"""Thin Celery tasks: run ids in, services do the work; every task is safe to run twice.

A run is enqueued as one ``dream.run`` task (the default, ``DREAM_CELERY_TASKS=run``), or as a
chain of one task per phase, the last one finalizing the run (``phase``). A phase task reads its run once
(``engine.execute_phase``) and returns the phase's outcome; the run task executes the run as
in-process (``engine.execute_run_once``). Either way a phase WAITING on a provider batch
re-schedules its own task instead of holding the worker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import structlog
from celery import chain, signals
from celery.exceptions import ImproperlyConfigured
from kombu import Connection, Producer
from kombu.exceptions import ChannelError
from kombu.exceptions import OperationalError as KombuOperationalError

from worker.app import App
from worker.celery_app import app, resources
from worker.config import ConfigError
from worker.domain.types import PHASES, RunStatus
from worker.llm.batch import reschedule_while_pending
from worker.runs import service
from worker.runs.deliveries import begin_delivery
from worker.runs.interruption import RunInterrupted
from worker.runs.outcome import PhaseOutcome
from worker.store.schema import require_current_schema
from worker.urls import masked_url

log = structlog.get_logger(__name__)


@signals.worker_init.connect
def _load_phases(**_: Any) -> None:
    """In a worker's main process, before the pool forks: the children share the phase
    modules' pages and none imports them on its first task (the CLI and the API, which import
    this module to enqueue, never load them for that)."""
    service.phase_registry()


@app.task(name="dream.gate_check", bind=True)
def gate_check(self: Any) -> list[str]:
    if (self.request.delivery_info or {}).get("redelivered"):
        # Put back after the worker process running it died: run again, a check that kills
        # its worker would do so until its message expired (one beat interval). The next
        # beat's check does what this one would have done.
        log.warning("gate.redelivered_dropped")
        return []
    dream_app = resources()
    try:
        require_current_schema(dream_app.engine)
    except ConfigError as exc:
        # A worker deployed before `dream db upgrade` ran: its runs would fail in every phase
        # on a missing column (after their rows were written). Nothing is handed out until
        # the schema is current; each beat says why.
        log.error("gate.schema_not_current", error=str(exc))
        return []
    result = service.gate_check(dream_app, backlog=queue_backlog(dream_app))
    handed_out = result.created + result.retried + result.requeued
    enqueue_runs(handed_out, dream_app)
    return handed_out


# How long a run or phase task waits, again and again, for `dream db upgrade` (_wait_for_schema).
SCHEMA_WAIT_SECONDS = 60.0
_schema_current: list[App] = []  # this process's App, once its database had the code's schema


def _wait_for_schema(task: Any, dream_app: App) -> None:
    """A run's task on a database whose schema is not the code's (a worker deployed before
    `dream db upgrade` ran) leaves the run as it is and tries again in a minute: run now, each
    phase would fail on a missing column and the scope's failures would start its back-off.
    Asked until it passes once in this process (then never again: no query per task)."""
    if any(known is dream_app for known in _schema_current):
        return
    try:
        require_current_schema(dream_app.engine)
    except ConfigError as exc:
        log.error("task.schema_not_current", error=str(exc))
        raise _again(task, wait_delay(SCHEMA_WAIT_SECONDS, dream_app.settings.task_time_limit),
                     died=int((task.request.kwargs or {}).get("died") or 0)) from None
    _schema_current[:] = [dream_app]


def _again(task: Any, countdown: float, died: int = 0) -> Exception:
    """``task`` retried in ``countdown`` seconds as a message of its own: its ``delivery`` token
    is new, so the delivery count tells this message's redelivery (its worker died) from
    another retry of the task. A retry keeps the task id and counts ``retries`` up, so two
    copies of one message (a broker's duplicate) each retrying gave two messages one identity,
    and the second counted as a death. ``died``: the deaths in a row it carries on."""
    return task.retry(countdown=countdown,  # type: ignore[no-any-return]
                      kwargs={"died": died, "delivery": uuid.uuid4().hex})


def _delivered(task: Any, dream_app: App, run_id: str, died: int, delivery: str) -> bool:
    """Count this delivery of a run's task (``deliveries``): False when the run was given up
    (too many deliveries died in a row); a back-off retries the task later, carrying the
    count. Asked after the schema wait: the count is a column of the current schema. A task
    called in-process (no message, no id) has no delivery to count."""
    if task.request.id is None:
        return True
    found = begin_delivery(dream_app, run_id, task.name, f"{task.request.id}:{delivery}", died)
    if found.back_off is not None:
        raise _again(task, found.back_off, died=found.deaths)
    return not found.gave_up


# How long a task whose run the database interrupted (busy, or the connection lost) waits
# before it claims the run again (``_retry_interrupted``).
INTERRUPTED_RETRY_SECONDS = 30.0


def _retry_interrupted(task: Any, dream_app: App, lost: RunInterrupted) -> Exception:
    """A run the database interrupted and this task gave back: the task is retried, resuming
    it in a while, while its claims stay below DREAM_MAX_ATTEMPTS; past that (or a run not
    given back) the task fails, and the gate check hands the run out again as it does a lost
    one (R30). The task came back alive: its retry carries no death (``kwargs``)."""
    if lost.given_back and lost.attempts < dream_app.settings.max_attempts:
        return _again(task, wait_delay(INTERRUPTED_RETRY_SECONDS,
                                       dream_app.settings.task_time_limit))
    return lost


def _phase(task: Any, run_id: str, phase: str, died: int, delivery: str) -> str:
    dream_app = resources()
    _wait_for_schema(task, dream_app)
    if not _delivered(task, dream_app, run_id, died, delivery):
        return PhaseOutcome.FAILED.value
    try:
        with reschedule_while_pending():  # a provider batch re-schedules the task, never blocks
            result = service.execute_phase(dream_app, run_id, phase)
    except RunInterrupted as lost:  # the chain goes on from the retried task, or stops here
        raise _retry_interrupted(task, dream_app, lost) from None
    if result.outcome is PhaseOutcome.WAITING:
        # The phase's step stays open; the retried task resumes it under the same lease.
        delay = wait_delay(result.retry_after, dream_app.settings.task_time_limit)
        # Unbounded: the task's own max_retries is None (``retry(max_retries=None)`` alone
        # means Celery's default of 3, which ended a batch wait after three looks). A delivery
        # that came back alive carries no death on.
        raise _again(task, delay)
    return result.outcome.value


def wait_delay(retry_after: float | None, task_time_limit: int) -> float:
    """When a waiting phase task runs again: never later than the hard time limit, so the
    delayed message is surely taken before Redis's visibility timeout (twice that limit) would
    redeliver it (R7)."""
    return max(1.0, min(retry_after or 30.0, float(task_time_limit)))


@app.task(name="dream.consolidate", bind=True, max_retries=None)
def consolidate(self: Any, run_id: str, died: int = 0, delivery: str = "") -> str:
    return _phase(self, run_id, "consolidate", died, delivery)


@app.task(name="dream.contradictions", bind=True, max_retries=None)
def contradictions(self: Any, run_id: str, died: int = 0, delivery: str = "") -> str:
    return _phase(self, run_id, "contradictions", died, delivery)


@app.task(name="dream.prune", bind=True, max_retries=None)
def prune(self: Any, run_id: str, died: int = 0, delivery: str = "") -> str:
    return _phase(self, run_id, "prune", died, delivery)


@app.task(name="dream.archive", bind=True, max_retries=None)
def archive(self: Any, run_id: str, died: int = 0, delivery: str = "") -> str:
    return _phase(self, run_id, "archive", died, delivery)


@app.task(name="dream.run", bind=True, max_retries=None)
def run(self: Any, run_id: str, died: int = 0, delivery: str = "") -> str:
    dream_app = resources()
    _wait_for_schema(self, dream_app)
    if not _delivered(self, dream_app, run_id, died, delivery):
        return RunStatus.FAILED.value
    try:
        with reschedule_while_pending():
            result = service.execute_run_task(dream_app, run_id)
    except RunInterrupted as lost:
        raise _retry_interrupted(self, dream_app, lost) from None
    if result.retry_after is not None:  # resumed at the waiting phase by the retried task
        raise _again(self, wait_delay(result.retry_after, dream_app.settings.task_time_limit))
    if result.hand_off:  # near its time limit: the next phases go on in a fresh task
        raise _again(self, 0)
    return result.status


@app.task(name="dream.finalize", bind=True, max_retries=None)
def finalize(self: Any, run_id: str, died: int = 0, delivery: str = "") -> str:
    """No longer chained (the archive task finalizes); kept for chains an earlier version sent,
    which are exactly the messages an upgrade leaves in the queue: it waits for the schema too."""
    dream_app = resources()
    _wait_for_schema(self, dream_app)
    if not _delivered(self, dream_app, run_id, died, delivery):
        return RunStatus.FAILED.value
    return service.finalize_run(dream_app, run_id)


PHASE_TASKS = {"consolidate": consolidate, "contradictions": contradictions, "prune": prune,
               "archive": archive}


def enqueue_run(run_id: str, dream_app: App | None = None) -> None:
    """One chain per run (the last phase's task finalizes), immutable signatures so no result is
    passed along, only the id; or, with ``celery_tasks = "run"``, the one run task.

    ``dream_app`` is the caller's App (the CLI passes its own); in a task, this process's."""
    enqueue_runs([run_id], dream_app)


def enqueue_runs(run_ids: Sequence[str], dream_app: App | None = None) -> None:
    """``enqueue_run`` for each run, all over one producer (``send_runs``)."""
    for _ in send_runs(run_ids, dream_app):
        pass


def send_runs(run_ids: Sequence[str], dream_app: App | None = None) -> Iterator[str]:
    """Send each run's message, all over one producer taken from the pool once (a gate check
    hands out thousands), yielding each run id once its message is sent (what the caller does
    with it runs outside this function's error handling: a closed stdout is not a broker
    failure). A broker failure abandons the run being sent (failed, the scope freed) and raises
    BrokerUnavailable saying so: runs sent before it stay sent, runs after it stay queued until
    the gate check hands them out again (R30)."""
    if not run_ids:
        return
    dream_app = dream_app or resources()
    sent = 0
    try:
        with app.producer_or_acquire() as producer:
            for run_id in run_ids:
                _publish(run_id, dream_app.settings.celery_tasks, producer)
                sent += 1
                yield run_id
    except (KombuOperationalError, OSError) as exc:
        cut = ""
        if sent < len(run_ids):  # (not a failure to hand the producer back after the last)
            failed = service.abandon_run(dream_app, run_ids[sent],
                                         f"could not enqueue: {type(exc).__name__}")
            cut = _cut_short(sent, run_ids, dream_app.settings.queued_timeout_seconds, failed)
        raise service.BrokerUnavailable(
            _broker_message(exc, dream_app.settings.broker_url, cut)) from None


def _cut_short(sent: int, run_ids: Sequence[str], timeout: int, failed: bool = True) -> str:
    """What a broker failure after ``sent`` messages left, as one clause (run ids only).
    ``failed``: whether the run being sent was failed (``abandon_run``); an interrupted one
    stays as it is, for the gate check to hand out again."""
    left = len(run_ids) - sent - 1
    unsent = ("failed unsent" if failed else
              f"was not sent and stays as it is for the gate check to hand out again after "
              f"{timeout} s")
    return (f"run {run_ids[sent]} {unsent}"
            + (f" after {sent} of {len(run_ids)} were sent" if len(run_ids) > 1 else "")
            + (f", {left} more {'stays' if left == 1 else 'stay'} queued for the gate check "
               f"to hand out again after {timeout} s" if left else ""))


def _publish(run_id: str, celery_tasks: str, producer: Producer) -> None:
    if celery_tasks == "run":
        run.si(run_id).apply_async(producer=producer)
        return
    # A chain's apply_async takes ``producer`` by name and drops it (chain.run, Celery 5.7);
    # ``connection`` reaches the first task's send_task, which publishes on that connection.
    chain(*(PHASE_TASKS[p].si(run_id) for p in PHASES)).apply_async(
        connection=producer.connection)


def queue_backlog(dream_app: App) -> int | None:
    """Messages waiting in the queue that no worker has taken yet (what the gate check gives
    patience to, ``recover_runs``); None when the broker does not answer."""
    queue = dream_app.settings.celery_queue
    url = dream_app.settings.broker_url
    try:
        with _connection(url) as conn:
            channel: Any = conn.default_channel  # kombu's stubs leave queue_declare out
            return int(channel.queue_declare(queue=queue, passive=True).message_count)
    except ChannelError:  # a queue never declared, or (Redis) empty: nothing waits in it
        return 0
    except (KombuOperationalError, OSError) as exc:
        log.warning("gate.backlog_unknown", queue=queue, error=type(exc).__name__)
        return None


def check_broker(url: str | None = None, timeout: float = 5.0) -> None:
    """Raise BrokerUnavailable unless the broker (``url`` or this app's) answers, ConfigError
    when it or the result backend cannot be used at all; called before anything is written."""
    try:
        _ = app.backend  # built on first use: a missing driver or a bad URL fails here, not later
    except (ImproperlyConfigured, ImportError, ValueError) as exc:
        raise ConfigError(f"DREAM_RESULT_BACKEND cannot be used ({_first_line(exc)}); fix it or "
                          "unset it") from None
    try:
        with _connection(url) as conn:
            # celery-types declares these int; kombu takes (fractional) seconds.
            conn.ensure_connection(max_retries=1, interval_start=0,
                                   interval_step=0.2, interval_max=0.5,  # type: ignore[arg-type]
                                   timeout=timeout)  # type: ignore[arg-type]
    except (KombuOperationalError, OSError) as exc:
        raise service.BrokerUnavailable(_broker_message(exc, url)) from None
    except (ImportError, ValueError) as exc:  # a transport without its driver, a bad redis db
        where = masked_url(url or str(app.conf.broker_url))
        raise ConfigError(f"DREAM_BROKER_URL {where} cannot be used ({_first_line(exc)}); "
                          "fix it, or install the transport's package") from None


def _connection(url: str | None) -> Connection:
    """A connection to ``url``, or to this app's broker."""
    return Connection(url) if url else app.connection_for_write()


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:160] or type(exc).__name__


def _broker_message(exc: Exception, url: str | None = None, what_happened: str = "") -> str:
    # The URL as configured (kombu's as_uri() shows a default password the URL never had).
    where = masked_url(url or str(app.conf.broker_url))
    return (f"cannot reach the broker at {where} ({_first_line(exc)})"
            f"{'; ' + what_happened if what_happened else ''}; check "
            "DREAM_BROKER_URL and that the broker it names is running")

"""Lease heartbeat: a phase that is still working keeps its run's lease alive (R30).

Without it a healthy run that outlives ``DREAM_LEASE_SECONDS`` is marked interrupted by the next
gate check and crashes on its next fenced write. The heartbeat renews the lease every third of
its length (at least once a minute), only under the epoch the phase holds, and gives up after
``DREAM_TASK_TIME_LIMIT`` seconds: a phase stuck for longer (a wedged thread) lets its lease
lapse so the gate check can recover the run, exactly as if its process had died. Each beat also
runs ``on_beat`` in the same transaction (the engine records the phase's model usage so far, so
a killed attempt's spending survives it, R15).

One thread per process beats for every open heartbeat (a run has one per phase; starting and
joining a thread for each was a measurable share of a short phase): each ``with`` block is a
registration on it, and the block does not end while its beat is in flight.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import TracebackType

import structlog
from sqlalchemy.exc import SQLAlchemyError

from worker.app import App
from worker.clock import utcnow
from worker.store.uow import UnitOfWork

log = structlog.get_logger(__name__)


class LeaseHeartbeat:
    """``with LeaseHeartbeat(app, run_id, epoch):`` renews the lease until the block ends."""

    def __init__(self, app: App, run_id: str, epoch: int | None,
                 on_beat: Callable[[UnitOfWork], None] | None = None) -> None:
        self.app = app
        self.run_id = run_id
        self.epoch = epoch
        self.on_beat = on_beat
        self.lease = timedelta(seconds=app.settings.lease_seconds)
        self.interval = max(1.0, min(app.settings.lease_seconds / 3, 60.0))
        self.give_up_after = float(app.settings.task_time_limit)

    def __enter__(self) -> LeaseHeartbeat:
        if self.epoch is not None:
            _BEATS.add(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.epoch is not None:
            _BEATS.remove(self)

    def renew(self) -> bool:
        """One renewal; False once the lease belongs to someone else (or the run was cancelled)."""
        assert self.epoch is not None
        with self.app.uow() as uow:
            held = uow.runs.renew_lease(self.run_id, self.epoch, utcnow() + self.lease)
            if held and self.on_beat is not None:
                self.on_beat(uow)
            uow.commit()
        return held

    def beat(self, beating_for: float) -> bool:
        """One beat ``beating_for`` seconds after the block began; False: beat no more."""
        if beating_for > self.give_up_after:
            log.warning("lease.heartbeat_gave_up", run_id=self.run_id, epoch=self.epoch,
                        seconds=round(beating_for))
            return False
        try:
            if not self.renew():
                log.warning("lease.lost", run_id=self.run_id, epoch=self.epoch)
                return False
        except SQLAlchemyError as exc:  # a busy or briefly unreachable database: next beat
            log.warning("lease.renew_failed", run_id=self.run_id, error_type=type(exc).__name__)
        return True


class _Beats:
    """The process's heartbeat thread and what it beats for: each open heartbeat's next beat
    (monotonic seconds) and when its block began. Started on first use; a forked child (a
    Celery worker process) starts empty, with a thread of its own when it needs one.

    The thread is woken only for a beat due before it would wake anyway (``_wake_at``): with
    nothing to beat for it still looks again after the interval of the last heartbeat added,
    so the next phase's heartbeat (due a whole interval after it opens) needs no wake-up. A wake-up
    per phase was a thread switch per phase for nothing (a phase is usually over long before
    its first beat)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[LeaseHeartbeat, tuple[float, float]] = {}
        self._beating: LeaseHeartbeat | None = None
        self._thread: threading.Thread | None = None
        self._wake_at = 0.0  # when the waiting thread looks again (monotonic seconds)
        self._idle = 60.0  # how long it waits with nothing to beat for (the last interval)

    def add(self, hb: LeaseHeartbeat) -> None:
        now = time.monotonic()
        with self._cond:
            self._due[hb] = (now + hb.interval, now)
            self._idle = hb.interval
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="dream-lease-heartbeat")
                self._thread.start()
            elif now + hb.interval < self._wake_at:
                self._cond.notify_all()

    def remove(self, hb: LeaseHeartbeat) -> None:
        """Ends ``hb``'s beats; returns once none of them is in flight."""
        with self._cond:
            self._due.pop(hb, None)
            while self._beating is hb:
                self._cond.wait()

    def _run(self) -> None:
        while True:
            with self._cond:
                hb = self._next()
                due, began = self._due[hb]
                self._beating = hb
            try:
                keep = hb.beat(time.monotonic() - began)
            except Exception as exc:  # never the thread (every block's beats) nor a waiting exit
                log.error("lease.beat_failed", run_id=hb.run_id, error_type=type(exc).__name__)
                keep = False
            with self._cond:
                self._beating = None
                if hb in self._due:
                    if keep:
                        self._due[hb] = (due + hb.interval, began)
                    else:
                        del self._due[hb]
                self._cond.notify_all()

    def _next(self) -> LeaseHeartbeat:
        """Waits (holding the condition) until a heartbeat is due; returns it."""
        while True:
            now = time.monotonic()
            soonest = min(self._due.items(), key=lambda item: item[1][0], default=None)
            if soonest is not None and soonest[1][0] <= now:
                return soonest[0]
            self._wake_at = now + self._idle if soonest is None else soonest[1][0]
            self._cond.wait(self._wake_at - now)


_BEATS = _Beats()
os.register_at_fork(after_in_child=_BEATS.reset)  # the parent's thread and lock stay there


def keep_lease_while_waiting(app: App, run_id: str, epoch: int | None) -> None:
    """A phase waiting on its batch renews the run's lease as it ends: no heartbeat runs
    between a Celery task's looks, and a batch may take hours; each look (at most the hard time
    limit apart, ``tasks.wait_delay``) keeps the run from being recovered as lost."""
    try:
        LeaseHeartbeat(app, run_id, epoch).renew()
    except SQLAlchemyError as exc:  # the next look renews it
        log.warning("lease.renew_failed", run_id=run_id, error_type=type(exc).__name__)


# How long the answer to "does the run still hold its lease?" stands before a model call asks
# again. An erasure (or a cancel) moves the lease on, and prompts a fan-out has not sent yet may
# quote what it erased; but each ask is a transaction, and asking before every call of a fast
# model doubled a phase's statements and CPU. The phase's start wrote its step under the epoch,
# which counts as the first answer.
FENCE_SECONDS = 1.0


def lease_fence(app: App, run_id: str, epoch: int) -> Callable[[], bool]:
    """The budget's check before each model call: the run still holds lease ``epoch``, read at
    most once per ``FENCE_SECONDS`` (a failing read counts as held; the phase's fenced write
    decides then)."""
    next_ask = time.monotonic() + FENCE_SECONDS

    def held() -> bool:
        nonlocal next_ask
        now = time.monotonic()
        if now < next_ask:
            return True
        next_ask = now + FENCE_SECONDS
        try:
            with app.uow() as uow:
                return uow.runs.holds_lease(run_id, epoch)
        except SQLAlchemyError:
            return True

    return held


def give_back(app: App, run_id: str, epoch: int, why: str, *, said: bool = False) -> bool:
    """The run this process holds under ``epoch``, stopped by a signal between or within its
    writes (each write rolled back whole): interrupted now, its running phase step saying
    ``why``, so `dream run --due` or the gate can resume it at once: running, it could not be
    claimed until its lease lapsed (an hour by default), and nothing else runs in its scope
    meanwhile. False if it moved on. ``said``: the caller reports it (logged at INFO only,
    so a command's stderr keeps its one line)."""
    now = utcnow()
    with app.uow() as uow:
        if not uow.runs.release_stopped(run_id, epoch, now):
            return False
        uow.runs.interrupt_steps([run_id], why, now)
        uow.commit()
    (log.info if said else log.warning)("run.stopped", run_id=run_id, why=why)
    return True


# The runs this process is executing now, each with how it is given back (a dream: interrupted;
# an approval: cancelled): what a server told to stop at once (a second signal) releases before
# it exits, its threads still running them (worker.cli.serve).
_EXECUTING: dict[str, Callable[[str], bool]] = {}
_EXECUTING_LOCK = threading.Lock()


@contextmanager
def executing(run_id: str, release: Callable[[str], bool]) -> Iterator[None]:
    """While the block runs, ``give_back_executing`` releases ``run_id`` with ``release(why)``
    (True if it did: the run was still running under this process's epoch)."""
    with _EXECUTING_LOCK:
        _EXECUTING[run_id] = release
    try:
        yield
    finally:
        with _EXECUTING_LOCK:
            _EXECUTING.pop(run_id, None)


def give_back_executing(why: str) -> list[str]:
    """Release every run this process is executing (from another thread than theirs: their
    next fenced write finds the run released and writes nothing); the ids released."""
    with _EXECUTING_LOCK:
        runs = list(_EXECUTING.items())
    released = []
    for run_id, release in runs:
        try:
            if release(why):
                released.append(run_id)
        except SQLAlchemyError as exc:  # left to its lease (the gate check recovers it)
            log.warning("run.give_back_failed", run_id=run_id, error_type=type(exc).__name__)
    return released

"""Lease heartbeat: a phase that is still working keeps its run's lease alive (R30).

Without it a healthy run that outlives ``DREAM_LEASE_SECONDS`` is marked interrupted by the next
gate check and crashes on its next fenced write. The heartbeat renews the lease every third of
its length (at least once a minute), only under the epoch the phase holds, and gives up after
``DREAM_TASK_TIME_LIMIT`` seconds: a phase stuck for longer (a wedged thread) lets its lease
lapse so the gate check can recover the run, exactly as if its process had died. Each beat also
runs ``on_beat`` in the same transaction (the engine records the phase's model usage so far, so
a killed attempt's spending survives it, R15).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
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
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LeaseHeartbeat:
        if self.epoch is not None:
            self._thread = threading.Thread(target=self._beat, daemon=True,
                                            name=f"dream-lease-{self.run_id[:8]}")
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def renew(self) -> bool:
        """One renewal; False once the lease belongs to someone else (or the run was cancelled)."""
        assert self.epoch is not None
        with self.app.uow() as uow:
            held = uow.runs.renew_lease(self.run_id, self.epoch, utcnow() + self.lease)
            if held and self.on_beat is not None:
                self.on_beat(uow)
            uow.commit()
        return held

    def _beat(self) -> None:
        waited = 0.0
        while not self._stop.wait(self.interval):
            waited += self.interval
            if waited > self.give_up_after:
                log.warning("lease.heartbeat_gave_up", run_id=self.run_id, epoch=self.epoch,
                            seconds=round(waited))
                return
            try:
                if not self.renew():
                    log.warning("lease.lost", run_id=self.run_id, epoch=self.epoch)
                    return
            except SQLAlchemyError as exc:  # a busy or briefly unreachable database: next beat
                log.warning("lease.renew_failed", run_id=self.run_id,
                            error_type=type(exc).__name__)

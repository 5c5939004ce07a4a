"""Unit of work: one short transaction; the only object that commits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from sqlalchemy.orm import Session, sessionmaker

from worker.store.db import only_read
from worker.store.repositories import (
    EntityRepository,
    JudgementRepository,
    NoteRepository,
    RunRepository,
    SessionRepository,
)
from worker.store.repositories.batches import BatchStepRepository
from worker.store.repositories.examples import ExampleRepository
from worker.store.repositories.keys import InstanceKeyRepository
from worker.store.repositories.references import ReferenceRepository
from worker.store.repositories.retention import RetentionRepository
from worker.store.repositories.review import ReviewItemRepository
from worker.store.repositories.run_history import RunHistoryRepository
from worker.store.repositories.safety import SafetyRepository
from worker.store.repositories.writes import WriteRepository

_next_unit = threading.local()


def before_next_unit(callback: Callable[[], None] | None) -> None:
    """Run ``callback`` (once) when this thread next opens a unit of work; None cancels it.

    A transaction left open for its owner to end (the engine's held phase write) is ended by
    it before the same thread begins another, which would otherwise not see it (or, on SQLite,
    wait on its write lock)."""
    _next_unit.callback = callback


class StaleLease(Exception):
    """The run lost its scope lease (another attempt took over); it must write nothing more."""


class UnitOfWork:
    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._factory = session_factory

    def __enter__(self) -> UnitOfWork:
        callback = getattr(_next_unit, "callback", None)
        if callback is not None:
            _next_unit.callback = None
            callback()
        self.session = self._factory()
        self.notes = NoteRepository(self.session)
        self.runs = RunRepository(self.session)
        self.run_history = RunHistoryRepository(self.session)
        self.batches = BatchStepRepository(self.session)
        self.sessions = SessionRepository(self.session)
        self.entities = EntityRepository(self.session)
        self.judgements = JudgementRepository(self.session)
        self.safety = SafetyRepository(self.session)
        self.review = ReviewItemRepository(self.session)
        self.writes = WriteRepository(self.session)
        self.examples = ExampleRepository(self.session)
        self.retention = RetentionRepository(self.session)
        self.references = ReferenceRepository(self.session)
        self.keys = InstanceKeyRepository(self.session)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Anything not committed explicitly is rolled back by close(): a crash mid-apply leaves
        # nothing. close() detaches loaded rows without expiring them, so callers may read them.
        # A transaction that only read ends with COMMIT on PostgreSQL (``only_read``): the same
        # outcome, and the driver keeps its prepared statements for the next transaction.
        if exc_type is None and self.session.in_transaction() and only_read(
                self.session.connection()):
            self.session.commit()
        self.session.close()

    def commit(self) -> None:
        self.session.commit()

    def rollback(self) -> None:
        self.session.rollback()

    def check_lease(self, run_id: str | None, epoch: int | None) -> None:
        """Fencing: raise before writing if this run no longer holds its lease epoch."""
        if run_id is None or epoch is None:
            return
        if not self.runs.holds_lease(run_id, epoch):
            raise StaleLease(f"run {run_id} lost its lease (epoch {epoch})")

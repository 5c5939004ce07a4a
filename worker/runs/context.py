"""What a phase receives: the run, its scope, the clock, the shared resources and the budget."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from worker.app import App
from worker.domain.types import Scope
from worker.runs.steps import StepRecorder
from worker.store.uow import UnitOfWork


@dataclass
class Budget:
    """Model calls and tokens a run may still spend; shared by the phases of one run."""

    max_calls: int | None = None
    max_tokens: int | None = None
    calls: int = 0
    tokens: int = 0
    # Calls started and calls that got a reply, in this process: ``ask`` reserves before each
    # call and charges after each reply, so the difference is the calls the endpoint failed
    # (R27: a run whose every model call failed could not do its work).
    started: int = 0
    answered: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def try_reserve_call(self) -> bool:
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                return False
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return False
            self.calls += 1
            self.started += 1
            return True

    def charge(self, tokens: int) -> None:
        with self._lock:
            self.tokens += tokens
            self.answered += 1

    @property
    def exhausted(self) -> bool:
        return (self.max_calls is not None and self.calls >= self.max_calls) or (
            self.max_tokens is not None and self.tokens >= self.max_tokens
        )


@dataclass
class PhaseContext:
    app: App
    run_id: str
    scope: Scope
    now: datetime
    epoch: int | None
    steps: StepRecorder
    dry_run: bool = False
    force: bool = False  # the gate was skipped; changes nothing inside the phases
    budget: Budget = field(default_factory=Budget)
    allow_retire: int | None = None  # retirements allowed past the blast-radius share (R20)
    # The scope's note counts before the run's first phase (``totals.notes_before``), when the
    # engine has them: the guard's baseline, so a phase's write need not read the run row.
    notes_before: dict[str, int] | None = None

    @property
    def settings(self):  # type: ignore[no-untyped-def]
        return self.app.settings

    def uow(self) -> UnitOfWork:
        return self.app.uow()

    def write_uow(self) -> UnitOfWork:
        """A unit of work for applying changes; callers must call ``check_lease`` before writing."""
        return self.app.uow()

"""What a phase receives: the run, its scope, the clock, the shared resources and the budget."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from worker.app import App
from worker.config import BudgetSettings, Settings
from worker.domain.types import PhaseReport, Scope
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

    @classmethod
    def for_run(cls, limits: BudgetSettings, calls: int = 0, tokens: int = 0) -> Budget:
        """The run's budget (the tighter of the per-run and per-scope limits), starting from
        what the run has spent already (earlier phases, earlier attempts)."""
        call_limits = [c for c in (limits.max_calls_per_run, limits.max_calls_per_scope)
                       if c is not None]
        token_limits = [t for t in (limits.max_tokens_per_run, limits.max_tokens_per_scope)
                        if t is not None]
        return cls(max_calls=min(call_limits) if call_limits else None,
                   max_tokens=min(token_limits) if token_limits else None,
                   calls=calls, tokens=tokens)

    def spent(self) -> tuple[int, int]:
        """(calls, tokens) so far, read under the lock (the heartbeat records it)."""
        with self._lock:
            return self.calls, self.tokens


_UNREAD: Any = object()  # the agent row was not read yet (None means "not registered")


@dataclass
class RunCarry:
    """What an in-process run hands from phase to phase (``PhaseContext.carry``; None under
    Celery, where every phase task reads afresh).

    ``scope_notes`` belongs to the phase kit (``worker.phases.kit.carry.ScopeLoad``): the first
    phase's read stores the scope there (notes with vectors, the run's journal, verdict memory)
    and every write keeps it current, so later phases of the run skip their read. The engine
    never looks inside it. ``fresh``: the run's first attempt, claimed by this executor, so
    nothing of it was written before and its journal starts empty without a query."""

    scope_notes: Any = None
    fresh: bool = False
    agent: Any = _UNREAD


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
    carry: RunCarry | None = None  # in-process runs only: see RunCarry
    # The scope's note counts before the run's first phase (the engine's run snapshot): the
    # guard's baseline, so a phase's write need not read the run row. None outside a run.
    notes_before: dict[str, int] | None = None
    # What started the run (dream_runs.trigger, from the run snapshot): an approval's run
    # (``review``) applies what it is given whatever the scope's apply mode.
    trigger: str = "cli"
    _agent: Any = field(default=_UNREAD, repr=False)

    def agent(self, uow: UnitOfWork | None = None) -> Any:
        """The scope's agent row (None when the registry lacks it): read once per phase, or
        once per in-process run (carried). ``uow``: read on that open transaction."""
        cached = self.carry.agent if self.carry is not None else self._agent
        if cached is not _UNREAD:
            return cached
        if uow is None:
            with self.uow() as fresh:
                row = fresh.entities.agent(self.scope.agent_id)
        else:
            row = uow.entities.agent(self.scope.agent_id)
        if self.carry is not None:
            self.carry.agent = row
        else:
            self._agent = row
        return row

    @property
    def settings(self) -> Settings:
        return self.app.settings

    def uow(self) -> UnitOfWork:
        return self.app.uow()


# One phase: ``run(ctx, parent_step_id) -> PhaseReport``; the engine is handed the registry.
PhaseFn = Callable[[PhaseContext, str], PhaseReport]
Registry = Mapping[str, PhaseFn]

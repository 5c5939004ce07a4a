"""What a phase receives: the run, its scope, the clock, the shared resources and the budget."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from worker.app import App
from worker.config import BudgetSettings, Settings
from worker.domain.types import PHASES, PhaseReport, Scope
from worker.runs.snapshot import StepRecord
from worker.runs.steps import StepRecorder
from worker.store.uow import UnitOfWork, before_next_unit


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
    # Replies that were no JSON of the asked schema (R27: a model whose every reply was so
    # judged nothing).
    malformed: int = 0
    # Well-formed replies the validators rejected (``Outcome.rejected``): with the malformed
    # ones, a phase none of whose replies was usable judged nothing.
    rejected: int = 0
    # Replies that were the model's refusal (``Outcome.refused``): no verdict either, so a
    # phase whose replies were all refused (or otherwise unusable) judged nothing (R27).
    refused: int = 0
    # Questions not asked: the model refused them, or answered unusably, on a recent run
    # (``worker.llm.unanswered``, DREAM_LLM_UNANSWERED_HOURS).
    cooling: int = 0
    # The tokens charged in this process by direction (``tokens`` has the run's sum only): a
    # phase that fails records its execution's share on its step from these.
    tokens_in: int = 0
    tokens_out: int = 0
    # Calls an interrupted attempt's step handed over and this process settled (``take_over``):
    # among ``started`` here, but spent by that step, so the phase step records them
    # (``model_calls_taken_over``) and its usage leaves them out (``domain.usage``).
    taken_over: int = 0
    # Tokens reserved for calls in flight (each call's prompt plus reply cap, replaced by its
    # usage once charged): N concurrent calls all fit under the cap, not each on its own.
    held: int = 0
    # Tokens charged as estimates, not as the endpoint counted them: a reply without ``usage``,
    # an attempt that may have been billed but failed (the phase step's ``tokens_estimated``).
    estimated: int = 0
    # Whether the run still holds its lease, asked before each model call (the phase's fence
    # reads it at most once a second, worker.runs.lease.FENCE_SECONDS): an erasure (or a
    # cancel) moves the epoch on, and the prompts a fan-out has not sent yet may quote the
    # text it erased. Once it answers no, no call is reserved again (None: not asked).
    fence: Callable[[], bool] | None = field(default=None, repr=False)
    lost: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def try_reserve_call(self, estimate: int = 0) -> bool:
        """One call, if it is left and its estimated tokens fit beside what is spent and
        held for the calls in flight; the estimate is held until the call is charged."""
        with self._lock:
            if self.lost or (self.fence is not None and not self.fence()):
                self.lost = True
                return False
            if self.max_calls is not None and self.calls >= self.max_calls:
                return False
            if not self._fits(estimate):
                return False
            self.calls += 1
            self.started += 1
            self.held += estimate
            return True

    def hold(self, estimate: int) -> bool:
        """Another estimate for the call in flight (its retry after an attempt that may have
        been billed), if it fits; no call is counted."""
        with self._lock:
            if self.lost or not self._fits(estimate):
                return False
            self.held += estimate
            return True

    def _fits(self, estimate: int) -> bool:
        return self.max_tokens is None or (
            self.tokens < self.max_tokens
            and self.tokens + self.held + estimate <= self.max_tokens)

    def release(self, held: int) -> None:
        """A call's held estimate, given back: it failed and nothing of it was billed."""
        with self._lock:
            self.held = max(0, self.held - held)

    def charge(self, tokens_in: int, tokens_out: int = 0, held: int = 0,
               estimated: bool = False) -> None:
        self.charge_billed(tokens_in, tokens_out, held, estimated)
        with self._lock:
            self.answered += 1

    def charge_billed(self, tokens_in: int, tokens_out: int, held: int = 0,
                      estimated: bool = False) -> None:
        """Tokens the provider bills (R15), for a reply or for one nobody uses (a batch's
        reply to a question dropped meanwhile, a released batch's output): no call answered.
        ``held``: the call's estimate, replaced by these; ``estimated``: they are that
        estimate (the endpoint counted nothing)."""
        with self._lock:
            self.tokens += tokens_in + tokens_out
            self.tokens_in += tokens_in
            self.tokens_out += tokens_out
            self.held = max(0, self.held - held)
            if estimated:
                self.estimated += tokens_in + tokens_out

    def count_malformed(self, replies: int) -> None:
        with self._lock:
            self.malformed += replies

    def count_rejected(self, replies: int) -> None:
        """Replies the validators rejected; negative for one a phase used after all (the
        contradictions phase keeps the topics a rejected last reply answered cleanly)."""
        with self._lock:
            self.rejected += replies

    def count_refused(self, replies: int) -> None:
        with self._lock:
            self.refused += replies

    def count_cooling(self, questions: int) -> None:
        with self._lock:
            self.cooling += questions

    def withdraw(self, calls: int) -> None:
        """Calls started whose answers nobody will read (a batch released as obsolete): no
        longer started, so they count neither answered nor failed (R27). They still count as
        spent (``calls``): the provider got them."""
        with self._lock:
            self.started -= calls

    def take_over(self, calls: int) -> None:
        """Calls an interrupted attempt's step started and handed over (their batch), settled
        by this attempt: started here, so their answers or failures count here (R27), not
        spent again (``calls``: the earlier step's usage holds them)."""
        with self._lock:
            self.started += calls
            self.taken_over += calls

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

    def spent_by_direction(self) -> tuple[int, int, int, int]:
        """(calls, tokens, tokens in, tokens out) so far, read together under the lock (what a
        phase step's heartbeat and finish record, from a base taken the same way)."""
        with self._lock:
            return self.calls, self.tokens, self.tokens_in, self.tokens_out


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
class Held:
    """A write's open transaction (``close`` ends it) and its child steps, not inserted yet
    (``flush`` inserts them fenced, as the write would have)."""

    uow: UnitOfWork
    close: ExitStack
    steps: list[dict[str, Any]]
    flush: Callable[[], object]


class HeldWrite:
    """A phase's write whose statements ran but its steps and its commit: the engine inserts
    the steps with the phase's parent-step finish (one fenced statement) and commits, so a
    phase is one transaction, one commit and no statement of the engine's.

    Why the engine ends it rather than the phase: the finish needs the phase's report, which
    the phase builds after its write; queueing the finish on the run's next transaction
    instead would show a done phase as running (and lose it to a crash) while the next phase
    asks its model. Holding is safe because a phase's one write is its last DB work, and any
    further transaction of the thread (a proposal, another write, any ``uow()``) first ends the
    held one as the write would have (``release``, ``store.uow.before_next_unit``), so nothing
    ever waits on it or misses it."""

    def __init__(self) -> None:
        self._held: Held | None = None

    @property
    def holding(self) -> bool:
        return self._held is not None

    def hold(self, held: Held) -> None:
        self.release()
        self._held = held
        before_next_unit(self.release)

    def take(self) -> Held | None:
        """The held write, handed over (the taker ends it), or None."""
        held, self._held = self._held, None
        if held is not None:
            before_next_unit(None)
        return held

    def release(self) -> None:
        """End the held write on its own: its steps (fenced, StaleLease), then the commit."""
        held = self.take()
        if held is not None:
            with held.close:
                held.flush()
                held.uow.commit()

    def discard(self) -> None:
        """Roll the held write back (the phase ended without a finish: a crash commits nothing)."""
        held = self.take()
        if held is not None:
            held.close.close()


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
    # The phases the run asked for (``dream run --phase``; the others are skipped): the last
    # of them to load the verdict memory prunes it (``worker.phases.kit.forget``).
    requested: tuple[str, ...] = PHASES
    # Set by the engine: the phase's write is held there for the parent step's finish (None: a
    # write commits at the end of its block, as outside a run).
    held: HeldWrite | None = None
    # What the earlier executions of this phase's step spent (a step waiting on a provider
    # batch, resumed by a re-scheduled task): a phase's own model cap counts from it.
    step_spent: StepRecord | None = None
    # The scope's remembered unanswered questions (fingerprint → (verdict, when)), set when
    # the phase loads its verdict memory (``worker.phases.kit.carry.load``); None: not loaded,
    # and ``worker.llm.unanswered.recall`` reads them itself.
    unanswered: dict[str, tuple[str, datetime]] | None = None
    _agent: Any = field(default=_UNREAD, repr=False)

    def agent(self, uow: UnitOfWork | None = None) -> Any:
        """The scope's agent row (None when the registry lacks it): read once per phase, or
        once per in-process run (carried). ``uow``: read on that open transaction."""
        return self._agent_read(uow)[0]

    def open_items(self, uow: UnitOfWork | None = None) -> bool:
        """Whether the scope had open review items when its agent was read (``agent``)."""
        return self._agent_read(uow)[1]

    @property
    def had_open_items(self) -> bool:
        """``open_items`` as read already, without a read (False before the agent's)."""
        cached = self._cached_agent()
        return cached is not _UNREAD and bool(cached[1])

    def _cached_agent(self) -> Any:
        return self.carry.agent if self.carry is not None else self._agent

    def _agent_read(self, uow: UnitOfWork | None) -> tuple[Any, bool]:
        cached = self._cached_agent()
        if cached is not _UNREAD:
            return cached  # type: ignore[no-any-return]
        if uow is None:
            with self.uow() as fresh:
                read = fresh.entities.run_agent(self.scope)
        else:
            read = uow.entities.run_agent(self.scope)
        if self.carry is not None:
            self.carry.agent = read
        else:
            self._agent = read
        return read

    @property
    def settings(self) -> Settings:
        return self.app.settings

    def uow(self) -> UnitOfWork:
        return self.app.uow()


# One phase: ``run(ctx, parent_step_id) -> PhaseReport``; the engine is handed the registry.
PhaseFn = Callable[[PhaseContext, str], PhaseReport]
Registry = Mapping[str, PhaseFn]

"""The one concurrent fan-out every judge asks through: questions in, outcomes out (same order).

Concurrency, the run's budget (and a phase's own cap), a per-run reply cache, validation with
bounded re-asks (``ask``), the memory of questions the model refused (``unanswered``) and,
with ``DREAM_LLM_BATCH``, one provider batch per fan-out. Callers ask with no transaction
open; the memory and a batch's ledger read and write in short ones of their own, never while a
call is in flight.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

import structlog
from pydantic import BaseModel

from worker.llm import unanswered
from worker.llm.ask import AskStatus, Outcome, ask, check, reply_schema, schema_text
from worker.llm.base import BatchLLM, LLMClient, reply_cap
from worker.llm.cache import ReplyCache
from worker.llm.prompts import RenderedPrompt
from worker.llm.spending import CallLimit, HeldCall, Spender, Spending
from worker.telemetry import in_current_trace

__all__ = ["CallLimit", "HeldCall", "Question", "Spender", "Spending", "ask_all", "room"]

T = TypeVar("T", bound=BaseModel)
log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Question(Generic[T]):
    """One prompt, the reply shape it wants and the semantic check its reply must pass."""

    prompt: RenderedPrompt
    reply_model: type[T]
    validate: Callable[[T], None] | None = None
    # The notes it is about, (id, version): what a question the model refused or answered
    # unusably is remembered by across runs (``worker.llm.unanswered``); none: not remembered.
    about: tuple[tuple[str, int], ...] = ()
    # An answer later runs take from memory instead of asking again, while ``about`` stays as
    # it is (``worker.llm.unanswered``): whether a reply is it, and the reply to replay (no
    # text of the model's is stored). None: every run asks.
    replay: tuple[Callable[[T], bool], Callable[[], T]] | None = None

    def schema(self) -> dict[str, Any]:
        return reply_schema(self.reply_model)

    def estimate_tokens(self, reply_cap: int = 0) -> int:
        """The prompt's tokens (4 characters each; the client sends the reply's schema in the
        system message too), plus the reply's cap when the client has one: what the budget
        reserves for the call."""
        sent = len(self.prompt.system) + len(self.prompt.user) + len(schema_text(self.reply_model))
        return (sent + 64) // 4 + reply_cap


class AskingContext(Protocol):
    """What a fan-out needs from a phase's context."""

    run_id: str
    app: Any  # .llm: the client behind the outbound boundary

    @property
    def budget(self) -> Spender: ...

    @property
    def settings(self) -> Any: ...

    @property
    def scope(self) -> Any: ...


def room(ctx: AskingContext, limit: CallLimit | None = None) -> int:
    """How many questions may go out now: the concurrency, the calls left to the run and to
    the phase, and none once the run's tokens are spent."""
    b = ctx.budget
    if b.max_tokens is not None and b.tokens >= b.max_tokens:
        return 0
    if limit is not None and limit.max_tokens is not None and limit.tokens >= limit.max_tokens:
        return 0
    left = [int(ctx.settings.llm_concurrency)]
    if b.max_calls is not None:
        left.append(b.max_calls - b.calls)
    if limit is not None and (phase_left := limit.calls_left()) is not None:
        left.append(phase_left)
    return max(0, min(left))


# The per-run reply cache: validated replies by question key (worker.llm.cache).
REPLIES = ReplyCache()


def question_key(ctx: AskingContext, model: str, q: Question[Any]) -> str:
    """A digest of everything that decides the answer, salted with the run and scope; it names
    a question to the provider (batch ``custom_id``) without carrying its text."""
    digest = hashlib.sha256()
    for part in (ctx.run_id, str(ctx.scope.key), model, q.prompt.name, q.prompt.system,
                 q.prompt.user, schema_text(q.reply_model)):
        digest.update(part.encode())
        digest.update(b"\0")
    return "q-" + digest.hexdigest()[:40]


def _cached(q: Question[T], data: Any) -> Outcome[T] | None:
    value, _, _, _ = check(q.reply_model, q.validate, data)
    return None if value is None else Outcome(value=value, status=AskStatus.OK)


# ---- the fan-out ---------------------------------------------------------------------------
def ask_all(
    ctx: AskingContext, questions: Sequence[Question[Any]], *, llm: LLMClient | None = None,
    deadline: float | None = None, limit: CallLimit | None = None, phase: str = "",
) -> list[Outcome[Any]]:
    """Every question asked at most ``llm_concurrency`` at a time (or as one provider batch
    with ``DREAM_LLM_BATCH``); outcomes in the order of ``questions``, failures as data.

    ``deadline`` (``time.monotonic()``): no call starts after it; ``limit``: the phase's own
    cap; ``phase`` names the run step a batch is recorded on.
    """
    client = llm if llm is not None else ctx.app.llm
    if client is None:
        raise ValueError("ask_all needs a model client; the rule judge asks nothing")
    model = unanswered.model_name(client)
    keys = [question_key(ctx, model, q) for q in questions]
    outcomes: list[Outcome[Any] | None] = []
    for q, key in zip(questions, keys, strict=True):
        data = REPLIES.get(key)
        outcomes.append(_cached(q, data) if data is not None else None)
    spending = Spending(ctx, limit)
    # Refused or unusable on a recent run: not asked (paid for) again until its cooling-off ends.
    memo = {i: k for i, o in enumerate(outcomes)
            if o is None and (k := unanswered.memory_key(ctx, model, questions[i])) is not None}
    if cooling := unanswered.recall(ctx, memo, questions):
        spending.budget.count_cooling(sum(not o.ok for o in cooling.values()))
        for i, outcome in cooling.items():
            outcomes[i] = outcome
    _set_oversized(ctx, limit, reply_cap(client), questions, outcomes)
    todo = [i for i, o in enumerate(outcomes) if o is None]
    batch = bool(ctx.settings.llm_batch) and _batches_supported(client)
    if todo and batch:
        from worker.llm.batch import ask_as_batch
        from worker.llm.ledger import StepLedger

        answered = ask_as_batch(ctx, cast(BatchLLM, client), [questions[i] for i in todo],
                                [keys[i] for i in todo], spending, StepLedger(ctx, phase))
    elif todo:
        answered = _ask_online(ctx, client, [questions[i] for i in todo], spending, deadline)
    else:
        answered = []
    if malformed := sum(o.malformed for o in answered):
        spending.budget.count_malformed(malformed)
    if rejected := sum(o.rejected for o in answered):
        spending.budget.count_rejected(rejected)
    if refused := sum(o.refused for o in answered):
        spending.budget.count_refused(refused)
    for i, outcome in zip(todo, answered, strict=True):
        outcomes[i] = outcome
        if outcome.ok and outcome.value is not None:
            REPLIES.put(keys[i], outcome.value.model_dump(mode="json"))
    unanswered.remember(ctx, [(questions[i], memo.get(i), o)
                              for i, o in zip(todo, answered, strict=True)])
    return [o for o in outcomes if o is not None]


def oversized(ctx: AskingContext, limit: CallLimit | None, q: Question[Any], cap: int) -> str:
    """Why ``q`` is never asked under the token caps as set ("" when it may be): its
    reservation (prompt estimate plus reply cap) is more than a whole cap, the run's or the
    phase's. Its item is deferred for the budget with this line, marked ``oversized``: no
    budget ran out, so the others are still asked. Before, the contradictions phase took it
    for the budget running out and deferred every topic after it, run after run, nothing
    asked."""
    caps = [c for c in (ctx.budget.max_tokens, limit.max_tokens if limit else None)
            if c is not None]
    need = q.estimate_tokens(cap)
    if not caps or need <= min(caps):
        return ""
    log.warning("llm.question_over_cap", prompt=q.prompt.name, estimate=need, cap=min(caps))
    return (f"model budget exhausted: the {q.prompt.name} prompt needs about {need:,} tokens "
            f"with its reply cap, more than the whole token cap ({min(caps):,}: "
            "DREAM_BUDGET__MAX_TOKENS_PER_RUN, _PER_SCOPE or the phase's MAX_TOKENS_PER_RUN); "
            "raise it or shorten the notes; the item is deferred")[:300]


def _set_oversized(ctx: AskingContext, limit: CallLimit | None, cap: int,
                   questions: Sequence[Question[Any]], outcomes: list[Outcome[Any] | None]) -> None:
    """The questions no token cap as set can ever hold (``oversized``): deferred, each with
    its line, before anything is reserved, so they hold nothing up."""
    for i, o in enumerate(outcomes):
        if o is None and (why := oversized(ctx, limit, questions[i], cap)):
            outcomes[i] = Outcome(None, AskStatus.BUDGET_EXHAUSTED, why, oversized=True)


_warned: set[str] = set()


def _batches_supported(client: Any) -> bool:
    if getattr(client, "supports_batch", False):
        return True
    name = type(getattr(client, "inner", client)).__name__
    if name not in _warned:  # once per process and client kind
        _warned.add(name)
        log.warning("llm.batch_unsupported", client=name,
                    hint="DREAM_LLM_BATCH needs DREAM_LLM_PROVIDER=openai; asking online")
    return False


def _ask_online(
    ctx: AskingContext, llm: LLMClient, questions: list[Question[Any]], spending: Spending,
    deadline: float | None,
) -> list[Outcome[Any]]:
    def one(q: Question[Any]) -> Outcome[Any]:
        spend = HeldCall(spending, q.estimate_tokens(), reply_cap(llm))
        return ask(llm, q.prompt, q.reply_model, validate=q.validate, spend=spend,
                   deadline=deadline)

    workers = min(int(ctx.settings.llm_concurrency), len(questions))
    if workers <= 1:  # nothing to overlap: a hand-off to a thread would only add its cost
        return [one(q) for q in questions]
    # ``workers`` drainers take the questions in order, so at most that many are in flight; the
    # caller is one of them (it would only wait otherwise), the pool runs the others.
    outcomes: list[Outcome[Any] | None] = [None] * len(questions)
    queue = iter(enumerate(questions))
    taking = threading.Lock()

    def drain() -> None:
        while True:
            with taking:
                item = next(queue, None)
            if item is None:
                return
            outcomes[item[0]] = one(item[1])

    helpers = _submit(in_current_trace(drain), workers - 1, int(ctx.settings.llm_concurrency))
    try:
        drain()
    finally:
        wait(helpers)  # no question of this fan-out is still in flight when it returns
    for future in helpers:
        future.result()
    return [o for o in outcomes if o is not None]


# ---- the process's one pool ------------------------------------------------------------------
# Threads are started once per process, not per fan-out (a run asks several times per phase).
# It grows to the largest concurrency asked for; a fork (Celery prefork) starts a fresh one.
_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_pid = 0


def _submit(fn: Callable[[], None], copies: int, size: int) -> list[Future[None]]:
    """``copies`` runs of ``fn`` on the shared pool (at least ``size`` threads), submitted under
    the lock that may replace it (a pool shut down between lookup and submit refuses work)."""
    global _pool, _pool_size, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid() or _pool_size < max(size, copies):
            old = _pool if _pool_pid == os.getpid() else None
            _pool_size, _pool_pid = max(size, copies, _pool_size), os.getpid()
            _pool = ThreadPoolExecutor(max_workers=_pool_size, thread_name_prefix="llm")
            if old is not None:
                old.shutdown(wait=False)  # work already queued on it still runs
        return [_pool.submit(fn) for _ in range(copies)]


def shutdown_pool() -> None:
    """Let the shared pool's threads end once their work is done; the next fan-out starts a
    new pool (another App of this process may still be asking: nothing queued is dropped)."""
    global _pool, _pool_size
    with _pool_lock:
        pool, _pool, _pool_size = _pool, None, 0
        if pool is not None and _pool_pid == os.getpid():
            pool.shutdown(wait=False)

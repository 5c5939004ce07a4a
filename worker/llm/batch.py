"""Batch pricing (``DREAM_LLM_BATCH``): a fan-out's questions go as one provider batch, submitted
once per run step (the ledger), picked up when finished and validated like online replies.
What a batch did not answer usably (expired, failed lines, garbage) is deferred, never applied;
a batch not finished in time in-process is released (cancelled, its files deleted)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog

from worker import telemetry
from worker.clock import utcnow
from worker.llm import batch_ends
from worker.llm.ask import AskStatus, Outcome, check
from worker.llm.base import (
    REFUSED,
    TOO_LONG_CODE,
    BatchItem,
    BatchLLM,
    BatchRelease,
    BatchState,
    LLMError,
    LLMReply,
    reply_cap,
)
from worker.llm.batch_submit import adopt_open, submit
from worker.llm.cache import ReplyCache
from worker.llm.spending import BatchSpending, Holds

log = structlog.get_logger(__name__)

_RESCHEDULE: ContextVar[bool] = ContextVar("dream_llm_batch_reschedule", default=False)
# Custom ids whose tokens this process charged: a batch read again (a retried step) is not
# charged twice. Bounded like the reply cache.
_CHARGED = ReplyCache(max_entries=100_000)


@contextmanager
def reschedule_while_pending() -> Iterator[None]:
    """Under Celery: an unfinished batch raises ``BatchPending`` at once instead of being
    polled, so the task can be scheduled again and no worker waits."""
    token = _RESCHEDULE.set(True)
    try:
        yield
    finally:
        _RESCHEDULE.reset(token)


class BatchPending(Exception):
    """The phase's questions are with the provider; nothing is written until they come back."""

    def __init__(self, batch_ids: Sequence[str], retry_after: float) -> None:
        super().__init__(f"waiting on batch {', '.join(batch_ids)}")
        self.batch_ids = list(batch_ids)
        self.retry_after = retry_after
        # The calls this attempt's step started that wait in those batches: not failed, and
        # handed over to the next attempt if this one is interrupted (``run_stops``).
        self.calls = 0


class BatchLedger(Protocol):
    """Where a run step records the batches it submitted (so a retry never submits twice)."""

    def recorded(self) -> list[tuple[str, set[str]]]:
        """(batch id, custom ids) of every batch this phase of the run submitted."""
        ...

    def intend(self, submission: str, custom_ids: Sequence[str]) -> None:
        """Written ahead of a submission (its key, ``batch_submit``): open until recorded."""
        ...

    def record(self, batch_id: str, custom_ids: Sequence[str], submission: str) -> None: ...

    def open_submissions(self) -> list[tuple[str, set[str]]]:
        """(key, custom ids) of this phase's submissions whose batch is unknown yet."""
        ...

    def unsubmitted(self, submission: str, why: str) -> None:
        """No batch was made with ``submission`` (refused, or none found): closed."""
        ...

    def released(self, release: BatchRelease) -> None:
        """What releasing one of its batches did (recorded beside the batch)."""
        ...

    def submitted(self) -> dict[str, datetime]:
        """When each batch this phase of the run recorded was submitted."""
        ...

    def read(self, batch_id: str, status: str) -> None:
        """A finished batch was read (its files deleted): its answers were this phase's."""
        ...

    def unread(self) -> dict[str, bool]:
        """The batches recorded that were neither read nor released, each with whether this
        attempt's step recorded it (its questions are among the step's model calls)."""
        ...

    def recorded_here(self) -> set[str]:
        """The batches this attempt's step recorded; the others an earlier attempt's step
        submitted and handed over when it was interrupted."""
        ...


class Spending(BatchSpending, Protocol):
    def charge_billed(self, tokens_in: int, tokens_out: int, held: int = 0,
                      estimated: bool = False) -> None:
        """Tokens the provider billed for replies nobody uses (a question the phase dropped,
        a request answered twice, a released batch's output): spent, no call answered."""
        ...

    def withdraw(self, calls: int) -> None:
        """Calls started whose answers nobody will read (their batch released as obsolete):
        counted neither answered nor failed."""
        ...

    def take_over(self, calls: int) -> None:
        """Calls an earlier attempt's step started and handed over, settled by this one: its
        calls now (answered or failed here), though spent before."""
        ...


def ask_as_batch(
    ctx: Any, llm: BatchLLM, questions: Sequence[Any], keys: Sequence[str], spending: Spending,
    ledger: BatchLedger,
) -> list[Outcome[Any]]:
    """The outcomes of ``questions`` (``keys`` are their custom ids) from the provider batches
    of this run step, submitting one batch for those no batch holds yet."""
    # One line per custom id (a provider refuses a file that repeats one).
    items = list({k: BatchItem(k, q.prompt.name, q.prompt.system, q.prompt.user, q.schema())
                  for q, k in zip(questions, keys, strict=True)}.values())
    # Submissions an earlier attempt left unknown are looked up first (``adopt_open``).
    outcomes: dict[str, Outcome[Any]] = {k: Outcome(None, AskStatus.DEFERRED, why)
                for k, why in adopt_open(llm, ledger).items() if k in keys}
    recorded = ledger.recorded()
    asked = {i for _, ids in recorded for i in ids} | set(outcomes)
    fresh = [it for it in items if it.custom_id not in asked]
    # The estimates reserved at submit, by custom id: each is held until its reply is charged
    # (or given back when none comes), so a batch's questions fit under the caps together.
    holds = Holds(spending, {k: (q.estimate_tokens(), reply_cap(llm))
                             for q, k in zip(questions, keys, strict=True)})
    try:
        # The questions an earlier attempt (a re-scheduled or retried task) submitted are
        # still in flight and will be billed, and this attempt's budget started from what was
        # charged: their estimates are held again before anything more is submitted. Before,
        # new questions took the room those replies then used, past the run's token cap.
        if not holds.hold_again(_in_flight(keys, recorded, ledger)) and fresh:
            for it in fresh:  # the replies still to come take the room left: not submitted
                outcomes[it.custom_id] = Outcome(None, AskStatus.BUDGET_EXHAUSTED,
                                                 "model budget exhausted")
        elif fresh:
            submitted = submit(llm, fresh, holds, ledger, outcomes)
            if submitted is not None:
                recorded.append(submitted)
        return _collect(ctx, llm, (questions, keys, items), recorded, (spending, holds), ledger,
                        outcomes)
    finally:
        holds.release_all()


def _in_flight(keys: Sequence[str], recorded: list[tuple[str, set[str]]],
               ledger: BatchLedger) -> set[str]:
    """Those of ``keys`` an earlier attempt submitted in batches neither read nor released."""
    unread = ledger.unread() if recorded else {}
    return {k for bid, ids in recorded if bid in unread for k in ids} & set(keys)


def _collect(ctx: Any, llm: BatchLLM,
             asked: tuple[Sequence[Any], Sequence[str], list[BatchItem]],
             recorded: list[tuple[str, set[str]]], spent: tuple[Spending, Holds],
             ledger: BatchLedger, outcomes: dict[str, Outcome[Any]]) -> list[Outcome[Any]]:
    """Poll the batches that hold the wanted questions (``asked``: the questions, their keys
    and batch lines) and settle each question on the spending and its holds (``spent``)."""
    (questions, keys, items), (spending, holds) = asked, spent
    wanted = {k for k in keys if k not in outcomes}
    batches = [(bid, ids & wanted) for bid, ids in recorded if ids & wanted]
    # Questions a batch holds that this phase no longer asks (it re-planned).
    dropped = {bid: ids - wanted for bid, ids in recorded if ids - wanted}
    unread = ledger.unread() if dropped else {}
    release_obsolete(llm, ledger, spending, [(b, ids) for b, ids in recorded if not ids & wanted],
                     unread)
    by_id = {it.custom_id: it for it in items}
    try:
        states = _poll(ctx, llm, batches, by_id, ledger)
    except BatchPending as pending:
        here = ledger.recorded_here()
        pending.calls = sum(len(ids) for b, ids in recorded if b in pending.batch_ids and b in here)
        raise
    _settle_batches(llm, ledger, spending, states, batches, dropped, unread)
    wait = float(ctx.settings.llm_batch_wait)
    for q, key in zip(questions, keys, strict=True):
        if key not in outcomes:
            bid = next(b for b, ids in batches if key in ids)
            outcomes[key] = _settle(q, key, states[bid], holds, wait)
    return [outcomes[k] for k in keys]


def _settle_batches(llm: BatchLLM, ledger: BatchLedger, spending: Spending,
                    states: dict[str, BatchState], batches: list[tuple[str, set[str]]],
                    dropped: dict[str, set[str]], unread: dict[str, bool]) -> None:
    """Each polled batch read or released, once: the questions an earlier attempt's step
    handed over become this step's calls, and what the provider billed is charged."""
    here = ledger.recorded_here()
    for bid, ids in batches:
        if bid not in here:
            spending.take_over(len(ids))
        state = states[bid]
        # In-process out of DREAM_LLM_BATCH_WAIT, or not to be checked: its items are deferred
        # and asked again in a new batch, so nobody will read this one.
        if not state.finished or state.unchecked:
            release = release_recorded(llm, ledger, bid)
            spending.charge_billed(release.billed_in, release.billed_out)
            continue
        ledger.read(bid, state.status)
        if unread.get(bid) and bid in dropped:  # read once: its dropped questions withdrawn
            spending.withdraw(len(dropped[bid]))
        _charge_unused(state, ids, spending)


def _charge_unused(state: BatchState, wanted: set[str], spending: Spending) -> None:
    """The billed tokens of the replies no question of this phase takes (dropped after the
    batch was submitted, or answered twice), once per process like any reply."""
    for custom_id, reply in state.replies.items():
        if custom_id not in wanted and _CHARGED.add(custom_id):
            spending.charge_billed(reply.tokens_in, reply.tokens_out)
    if (state.unused_in or state.unused_out) and _CHARGED.add(f"{state.batch_id}:unused"):
        spending.charge_billed(state.unused_in, state.unused_out)


def release_recorded(llm: BatchLLM, ledger: BatchLedger, batch_id: str) -> BatchRelease:
    """Release a batch whose answers this phase will not read (its items are deferred and asked
    again next run, in a new batch): cancelled, so it bills no more, its files deleted."""
    release = llm.release_batch(batch_id)
    ledger.released(release)
    if release.complete:
        log.info("llm.batch_released", batch_id=batch_id, status=release.status,
                 cancelled=release.cancelled, files_deleted=len(release.deleted))
    else:
        log.warning("llm.batch_release_incomplete", batch_id=batch_id, status=release.status,
                    problem=release.problem)
    return release


def release_obsolete(llm: BatchLLM, ledger: BatchLedger, spending: Spending,
                     unwanted: list[tuple[str, set[str]]], unread: dict[str, bool]) -> None:
    """Release the batches of this phase asking none of its questions now (a resumed phase
    re-planned: a host keep_apart or remember changed a cluster) that were neither read nor
    released (``unread``: the ledger's): nobody will read them, and they hold note text at the
    provider. The questions this attempt's step asked in them are withdrawn, not failed (the
    model was not down)."""
    for bid, ids in unwanted:
        if bid in unread:
            release = release_recorded(llm, ledger, bid)
            spending.charge_billed(release.billed_in, release.billed_out)
            if unread[bid]:
                spending.withdraw(len(ids))


def _poll(ctx: Any, llm: BatchLLM, batches: list[tuple[str, set[str]]],
          by_id: dict[str, BatchItem], ledger: BatchLedger) -> dict[str, BatchState]:
    """Each batch's state, polled every ``llm_batch_poll`` seconds until all are finished or
    ``llm_batch_wait`` is spent; under Celery unfinished batches raise ``BatchPending``, but
    for those past the provider's window (``give_up_overdue``)."""
    settings = ctx.settings
    rescheduling = _RESCHEDULE.get()
    until = time.monotonic() + (0.0 if rescheduling else float(settings.llm_batch_wait))
    states: dict[str, BatchState] = {}
    while True:
        for bid, ids in batches:
            if bid not in states or not states[bid].finished:
                states[bid] = _state(llm, bid, [by_id[i] for i in sorted(ids)])
        unfinished = [bid for bid, _ in batches if not states[bid].finished]
        left = until - time.monotonic()
        if not unfinished or left <= 0:
            break
        time.sleep(min(float(settings.llm_batch_poll), left))
    if unfinished and rescheduling:
        waiting = give_up_overdue(ledger, batches, states, unfinished)
        for bid in set(unfinished) - set(waiting):
            _trace(llm, states[bid], _items(batches, by_id, bid), "batch_given_up")
        if waiting:
            raise BatchPending(waiting, float(settings.llm_batch_poll))
    else:  # in-process, out of DREAM_LLM_BATCH_WAIT: released, its items failed
        for bid in unfinished:
            _trace(llm, states[bid], _items(batches, by_id, bid), "batch_wait_out")
    return states


def _items(batches: list[tuple[str, set[str]]], by_id: dict[str, BatchItem],
           batch_id: str) -> list[BatchItem]:
    return [by_id[i] for b, ids in batches if b == batch_id for i in sorted(ids)]


# The provider's completion window (24 h) and an hour's grace. A batch still unfinished then
# never says so (a server that never expires one, a batch stuck finalizing): under Celery each
# look renews the run's lease, so the run held its scope for ever (R30).
GIVE_UP_AFTER = timedelta(hours=25)


def give_up_overdue(ledger: BatchLedger, batches: list[tuple[str, set[str]]],
                    states: dict[str, BatchState], unfinished: list[str]) -> list[str]:
    """The batches of ``unfinished`` still to wait for; those submitted ``GIVE_UP_AFTER`` ago
    fail their items (deferred, asked again next run) and are released by the caller."""
    submitted = ledger.submitted()
    now = utcnow()
    waiting = []
    for bid in unfinished:
        at = submitted.get(bid)
        if at is None or now - at < GIVE_UP_AFTER:
            waiting.append(bid)
            continue
        status, hours = states[bid].status[:40], int((now - at).total_seconds() // 3600)
        why = batch_ends.given_up(bid, status, hours)
        ids = next(ids for b, ids in batches if b == bid)
        states[bid] = BatchState(bid, status, failed=dict.fromkeys(ids, why), unchecked=True)
        log.warning("llm.batch_given_up", batch_id=bid, status=status, hours=hours)
    return waiting


def _state(llm: BatchLLM, batch_id: str, items: list[BatchItem]) -> BatchState:
    """The batch as it stands; a batch that cannot be checked fails its items for this attempt
    (deferred to the next run) rather than holding the phase."""
    try:
        state = llm.batch_state(batch_id, items)
    except LLMError as exc:
        state = BatchState(batch_id, "failed", failed={it.custom_id: str(exc)[:200] for it in items},
                           unchecked=True)
        _trace(llm, state, items, type(exc).__name__)
        return state
    if state.finished:
        _trace(llm, state, items)
    return state


def _trace(llm: BatchLLM, state: BatchState, items: list[BatchItem],
           unfinished: str | None = None) -> None:
    """One model-call span per finished batch, per look that could not check it, and per batch
    this phase stops waiting for (``unfinished``: the check's error type, ``batch_given_up``
    past the provider's window, ``batch_wait_out`` in-process): its usage, never its text
    (R21). A batch that expired, failed or was cancelled, answered none of its requests, or
    ended unfinished is a failed call: ``error.type`` (``batch_expired``,
    ``batch_unanswered``, ``unfinished``) and status ERROR."""
    replies = [state.replies[it.custom_id] for it in items if it.custom_id in state.replies]
    total = LLMReply(None, sum(r.tokens_in for r in replies), sum(r.tokens_out for r in replies),
                     replies[0].model if replies else "")
    error = unfinished or (f"batch_{state.status}" if state.status != "completed"
                           else None if replies else "batch_unanswered")
    unchecked = unfinished is not None and not unfinished.startswith("batch_")
    with telemetry.model_call_span(llm, items[0].prompt_name) as span:
        span.set(dream__batch__id=state.batch_id,
                 dream__batch__status="unchecked" if unchecked else state.status,
                 dream__batch__requests=len(items), dream__batch__answered=len(replies))
        span.model_reply(total)
        if error:
            span.failed(error)


def _settle(q: Any, key: str, state: BatchState, holds: Holds,
            wait: float) -> Outcome[Any]:
    """One question's outcome from its batch: OK only for a reply the online validators accept."""
    reply = state.replies.get(key)
    if reply is None:
        # A line refused as longer than the model takes is remembered (``unanswered``): the
        # next run would submit it again, to fail the same way.
        return Outcome(None, AskStatus.DEFERRED,
                       f"{batch_ends.unanswered_item(state, key, wait)}; deferred to the next run"[:300],
                       too_long=state.failed.get(key) == batch_ends.line_failed(TOO_LONG_CODE))
    if _CHARGED.add(key):
        holds.charge(key, reply)
    if reply.refused:
        return Outcome(None, AskStatus.DEFERRED, f"{REFUSED}; deferred to the next run", attempts=1,
                       tokens_in=reply.tokens_in, tokens_out=reply.tokens_out, model=reply.model,
                       errors=[REFUSED], refused=1)
    value, problem, _, malformed = check(q.reply_model, q.validate, reply.data)
    outcome: Outcome[Any] = Outcome(value, AskStatus.OK, attempts=1, tokens_in=reply.tokens_in,
                                    tokens_out=reply.tokens_out, model=reply.model,
                                    malformed=int(malformed),
                                    rejected=int(value is None and not malformed))
    if value is None:
        outcome.status = AskStatus.DEFERRED
        outcome.reason = f"the batch reply could not be used ({problem}); deferred to the next run"
        outcome.errors.append(problem)
    return outcome

"""Token caps hold before calls go out, through the real `openai` client and the stub: each
call reserves its prompt's estimate plus the reply cap (``DREAM_LLM_MAX_OUTPUT_TOKENS``) and
holds it until its usage replaces it, so calls in flight together, a provider batch, a reply
without ``usage`` and a retried request all stay under the run's and the phase's caps.

Before, the run budget only checked ``tokens >= max_tokens`` (a 793-token call went out
against a cap of 50), in-flight estimates were not held (N concurrent calls all passed), a
batch submitted every question, a reply without usage cost 0 tokens and a timed-out attempt
that a provider bills was never counted."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from tests.llm.test_batch import MemoryLedger, _batch_ctx
from tests.llm.test_fanout import Ctx, _ctx, _echo, _questions
from tests.support.llm_stub import LLMStub, StubResponse
from worker.config_sections import BudgetSettings
from worker.llm.ask import AskStatus
from worker.llm.batch import BatchPending, ask_as_batch, reschedule_while_pending
from worker.llm.fanout import CallLimit, Spending, ask_all, question_key
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs.context import Budget

CAP = 16  # DREAM_LLM_MAX_OUTPUT_TOKENS
PROMPT = _questions(1)[0].estimate_tokens()  # every question's prompt estimate
ESTIMATE = PROMPT + CAP  # what each call reserves


def _capped(stub: LLMStub | SimpleNamespace, ctx: Ctx, **kw: Any) -> Ctx:
    ctx.app.llm = OpenAICompatibleLLM(base_url=stub.url, model="stub-model", api_key="k",
                                      max_output_tokens=CAP, **{"timeout": 5.0, **kw})
    return ctx


def _at_cap(req: Any) -> StubResponse:
    """A reply that uses all its reservation: the prompt as estimated and the whole cap."""
    time.sleep(0.2)  # long enough for every drainer to reserve before the first is charged
    return StubResponse(content=_echo(req), tokens_in=PROMPT, tokens_out=CAP)


def test_concurrent_calls_hold_their_estimates_under_the_run_token_cap(
    llm_stub: LLMStub,
) -> None:
    """Room for two and a half calls, four asked at once: two go out (before, all four passed
    ``tokens >= max_tokens`` while nothing was charged yet, and the run spent 4 × its share)."""
    llm_stub.set_handler(_at_cap)
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=4, max_tokens=ESTIMATE * 5 // 2))
    outcomes = ask_all(ctx, _questions(6))
    assert len(llm_stub.chat_requests()) == 2
    assert [o.status for o in outcomes].count(AskStatus.BUDGET_EXHAUSTED) == 4
    assert ctx.budget.tokens == 2 * ESTIMATE <= ctx.budget.max_tokens  # type: ignore[operator]
    assert ctx.budget.held == 0


def test_concurrent_calls_hold_their_estimates_under_a_phase_token_cap(
    llm_stub: LLMStub,
) -> None:
    """The phase's own cap (contradictions' MAX_TOKENS_PER_RUN) likewise: before, each call's
    estimate was checked against the tokens charged so far only, and the phase spent 3×."""
    llm_stub.set_handler(_at_cap)
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=4))
    limit = CallLimit(max_calls=None, max_tokens=ESTIMATE * 5 // 2)
    ask_all(ctx, _questions(6), limit=limit)
    assert len(llm_stub.chat_requests()) == 2
    assert limit.tokens == 2 * ESTIMATE and limit.held == 0


def test_a_call_whose_reservation_does_not_fit_is_not_sent(llm_stub: LLMStub) -> None:
    """A cap below one call's estimate: nothing goes out (before, the first call went out
    since 0 < cap, and spent many times the cap)."""
    llm_stub.set_handler(_at_cap)
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=1, max_tokens=ESTIMATE - 1))
    [outcome] = ask_all(ctx, _questions(1))
    assert outcome.status is AskStatus.BUDGET_EXHAUSTED
    assert llm_stub.chat_requests() == [] and ctx.budget.tokens == 0


def test_a_reply_without_usage_is_charged_its_estimate(llm_stub: LLMStub) -> None:
    """A server that counts nothing: each reply costs its reservation (counted apart as
    estimated), so the cap still bounds the calls. Before, it cost 0 and every call went out."""
    llm_stub.set_handler(lambda req: StubResponse.completion(json.dumps(_echo(req)), usage=None))
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=1, max_tokens=ESTIMATE * 3 // 2))
    outcomes = ask_all(ctx, _questions(3))
    assert [o.status for o in outcomes] == [AskStatus.OK, AskStatus.BUDGET_EXHAUSTED,
                                            AskStatus.BUDGET_EXHAUSTED]
    assert len(llm_stub.chat_requests()) == 1
    assert (ctx.budget.tokens, ctx.budget.estimated) == (ESTIMATE, ESTIMATE)
    assert (outcomes[0].tokens_in, outcomes[0].tokens_out) == (PROMPT, CAP)


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    {"prompt_tokens": 0, "completion_tokens": 3, "total_tokens": 3},
    {"prompt_tokens": 40, "total_tokens": 40},
    {"total_tokens": 9},
], ids=["zeros", "no_prompt", "no_completion", "total_only"])
def test_a_reply_whose_usage_counts_nothing_is_charged_its_estimate(
        llm_stub: LLMStub, usage: dict[str, int]) -> None:
    """A server that sends zeros, or one of the two counts only, counts nothing the budget can
    be charged (every prompt has tokens, every reply with text too): charged its reservation
    like a reply without usage. Before, zeros cost 0 and the completion alone cost only it:
    every call went out under a cap that held nothing."""
    llm_stub.set_handler(lambda req: StubResponse.completion(json.dumps(_echo(req)), usage=usage))
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=1, max_tokens=ESTIMATE * 3 // 2))
    outcomes = ask_all(ctx, _questions(3))
    assert [o.status for o in outcomes] == [AskStatus.OK, AskStatus.BUDGET_EXHAUSTED,
                                            AskStatus.BUDGET_EXHAUSTED]
    assert (ctx.budget.tokens, ctx.budget.estimated) == (ESTIMATE, ESTIMATE)


def test_a_reply_without_usage_or_cap_is_charged_its_text(llm_stub: LLMStub) -> None:
    """Without DREAM_LLM_MAX_OUTPUT_TOKENS a reply without usage is charged its prompt's
    estimate and its own text at 4 characters a token. Before, its reply cost 0, however
    long the model answered."""
    llm_stub.set_handler(lambda req: StubResponse.completion(json.dumps(
        {**_echo(req), "pad": "x" * 4000}), usage=None))
    ctx = _ctx(llm_stub, concurrency=1)
    ctx.app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                      timeout=5.0)
    [outcome] = ask_all(ctx, _questions(1))
    assert outcome.ok and outcome.tokens_in == PROMPT
    assert outcome.tokens_out >= 1000 and ctx.budget.tokens == PROMPT + outcome.tokens_out


def _first_then(first: StubResponse) -> Any:
    seen, lock = [0], threading.Lock()

    def handler(req: Any) -> Any:
        with lock:
            seen[0] += 1
            k = seen[0]
        return first if k == 1 else StubResponse(content=_echo(req), tokens_in=5, tokens_out=3)

    return handler


CUT = StubResponse.raw('{"id": "chatcmpl-x", "object": "chat.completion", "choices": [{"in',
                       content_type="application/json")


def test_a_retried_cut_reply_counts_its_estimate_once_per_attempt(llm_stub: LLMStub) -> None:
    """An HTTP 200 body cut short (a provider bills it) then a good reply: the lost attempt
    costs its estimate, the reply its usage. Before, the run counted only the reply."""
    llm_stub.set_handler(_first_then(CUT))
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=1), max_retries=2)
    [outcome] = ask_all(ctx, _questions(1))
    assert outcome.ok and len(llm_stub.chat_requests()) == 2
    assert (ctx.budget.tokens, ctx.budget.estimated) == (ESTIMATE + 8, ESTIMATE)
    assert ctx.budget.calls == 1 and ctx.budget.held == 0


def test_a_connection_dropped_mid_reply_counts_its_estimate(llm_stub: LLMStub) -> None:
    """Headers and part of a reply, then the connection closes: the server answered, so a
    provider bills it. Its estimate is charged like a timed-out attempt's, and the retry holds
    another. Before, a dropped connection was taken for one that never carried the request:
    the run counted only the retry's reply."""
    llm_stub.set_handler(_first_then(StubResponse.dropped({"n": 0}, after=30)))
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=1), max_retries=2)
    [outcome] = ask_all(ctx, _questions(1))
    assert outcome.ok and len(llm_stub.chat_requests()) == 2
    assert (ctx.budget.tokens, ctx.budget.estimated) == (ESTIMATE + 8, ESTIMATE)
    assert ctx.budget.calls == 1 and ctx.budget.held == 0


def test_a_dropped_connection_the_cap_has_no_room_to_retry_is_not_sent(
    llm_stub: LLMStub,
) -> None:
    """A reply dropped mid-body with room for one and a half calls: charged, and no retry."""
    llm_stub.set_handler(_first_then(StubResponse.dropped({"n": 0}, after=30)))
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=1, max_tokens=ESTIMATE * 3 // 2),
                  max_retries=2)
    [outcome] = ask_all(ctx, _questions(1))
    assert outcome.status is AskStatus.ERROR and "no room to retry" in outcome.reason
    assert len(llm_stub.chat_requests()) == 1
    assert (ctx.budget.tokens, ctx.budget.held) == (ESTIMATE, 0)


def test_a_connection_refused_is_not_charged() -> None:
    """Nothing listens on the port: the request never left, so nothing is charged and the
    hold is given back (the bound on lost attempts does not charge what was never sent)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    nowhere = SimpleNamespace(url=f"http://127.0.0.1:{port}/v1")
    ctx = _capped(nowhere, _ctx(nowhere, concurrency=1), timeout=2.0, max_retries=1)
    [outcome] = ask_all(ctx, _questions(1))
    assert outcome.status is AskStatus.ERROR
    assert (ctx.budget.tokens, ctx.budget.estimated, ctx.budget.held) == (0, 0, 0)


def test_a_retry_the_cap_has_no_room_for_is_not_sent(llm_stub: LLMStub) -> None:
    """A request past its deadline may have been billed: its retry must reserve another
    estimate, and with room for one and a half calls it is not sent (before, it was, and the
    lost attempt was never counted)."""
    llm_stub.set_handler(_first_then(StubResponse.hang(2.0)))
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=1, max_tokens=ESTIMATE * 3 // 2),
                  timeout=0.5, max_retries=2)
    [outcome] = ask_all(ctx, _questions(1))
    assert outcome.status is AskStatus.ERROR and "no room to retry" in outcome.reason
    assert len(llm_stub.chat_requests()) == 1
    assert (ctx.budget.tokens, ctx.budget.held) == (ESTIMATE, 0)


def test_a_batch_submits_only_what_the_token_cap_holds(llm_stub: LLMStub) -> None:
    """Batch mode reserves at submit and holds each line's estimate: four questions, room for
    two and a half, two lines submitted and the rest deferred as budget_exhausted. Before, all
    four went in the batch and the run spent past its cap."""
    llm_stub.set_handler(lambda req: StubResponse(content=_echo(req), tokens_in=PROMPT,
                                                  tokens_out=CAP))
    ctx = _capped(llm_stub, _batch_ctx(llm_stub, max_tokens=ESTIMATE * 5 // 2))
    questions = _questions(4)
    keys = [question_key(ctx, "stub-model", q) for q in questions]
    outcomes = ask_as_batch(ctx, ctx.app.llm, questions, keys, Spending(ctx, None),
                            MemoryLedger())
    assert len(llm_stub.batches.line_requests) == 2
    assert [o.status for o in outcomes].count(AskStatus.BUDGET_EXHAUSTED) == 2
    assert ctx.budget.tokens == 2 * ESTIMATE and ctx.budget.held == 0


def test_a_resumed_batch_attempt_holds_the_questions_still_in_flight(llm_stub: LLMStub) -> None:
    """Under Celery a pending batch re-schedules the task: the next attempt's budget starts
    from what was charged, while the first attempt's two questions are still with the
    provider. A re-planned phase now asks them and a third: with room for two and a half
    calls, the third is not submitted. Before, their estimates were held by nobody, the third
    went into a second batch, and the run spent three calls' tokens against its cap."""
    llm_stub.set_handler(lambda req: StubResponse(content=_echo(req), tokens_in=PROMPT,
                                                  tokens_out=CAP))
    llm_stub.batches.polls = 10_000
    cap = ESTIMATE * 5 // 2
    ctx, ledger = _capped(llm_stub, _batch_ctx(llm_stub, max_tokens=cap)), MemoryLedger()
    first, resumed = _questions(2), _questions(3)
    keys = [question_key(ctx, "stub-model", q) for q in resumed]
    with reschedule_while_pending(), pytest.raises(BatchPending):
        ask_as_batch(ctx, ctx.app.llm, first, keys[:2], Spending(ctx, None), ledger)
    assert ctx.budget.held == 0  # given back as the attempt ends
    # The re-scheduled task: a fresh budget from what the run's steps record (calls started).
    ctx.budget = Budget.for_run(BudgetSettings(max_tokens_per_run=cap), ctx.budget.calls,
                                ctx.budget.tokens)
    llm_stub.batches.polls = 0
    outcomes = ask_as_batch(ctx, ctx.app.llm, resumed, keys, Spending(ctx, None), ledger)
    assert [o.status for o in outcomes] == [AskStatus.OK, AskStatus.OK,
                                            AskStatus.BUDGET_EXHAUSTED]
    assert len(llm_stub.batches.batches) == 1 and len(llm_stub.batches.line_requests) == 2
    assert ctx.budget.tokens == 2 * ESTIMATE <= cap and ctx.budget.held == 0


class _TimeLimit(Exception):
    """What Celery's soft time limit raises in the task's thread (SoftTimeLimitExceeded)."""


def test_a_call_stopped_by_a_time_limit_is_charged_its_estimate(llm_stub: LLMStub) -> None:
    """A signal interrupts the call in flight, as Celery's soft time limit does: the request
    went out and may be billed, so its estimate is charged and nothing stays held. Before, it
    was neither charged nor released (the run's usage left it out, its hold shrank the room
    of every later call of the run)."""
    llm_stub.set_handler(lambda req: StubResponse.hang(10.0))
    ctx = _capped(llm_stub, _ctx(llm_stub, concurrency=1), max_retries=0, timeout=10.0)

    def stop(signum: int, frame: Any) -> None:
        raise _TimeLimit

    previous = signal.signal(signal.SIGALRM, stop)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(_TimeLimit):
            ask_all(ctx, _questions(1))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert len(llm_stub.chat_requests()) == 1
    assert (ctx.budget.tokens, ctx.budget.estimated, ctx.budget.held) == (
        ESTIMATE, ESTIMATE, 0)

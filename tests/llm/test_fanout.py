"""ask_all, the one fan-out every judge uses, through the real `openai` client and the stub."""

from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel

from tests.support.llm_stub import StubResponse
from worker.config import Settings
from worker.domain.types import Scope
from worker.llm.ask import AskStatus, ReplyRejected
from worker.llm.fanout import CallLimit, Question, ask_all, room
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.llm.prompts import RenderedPrompt
from worker.runs.context import Budget


class Echo(BaseModel):
    n: int


@dataclass
class Ctx:
    """The parts of a PhaseContext a fan-out reads (a hand-written stand-in, no database)."""

    app: Any
    settings: Settings
    # The reply cache is per run: each test is a run of its own.
    run_id: str = field(default_factory=lambda: f"run-{uuid.uuid4()}")
    scope: Scope = Scope("a1", None, None)
    budget: Budget = field(default_factory=Budget)


def _ctx(stub: Any, concurrency: int = 4, **budget: int) -> Ctx:
    llm = OpenAICompatibleLLM(base_url=stub.url, model="stub-model", api_key="k", timeout=5.0)
    return Ctx(SimpleNamespace(llm=llm), Settings(llm_concurrency=concurrency),
               budget=Budget(**budget))  # type: ignore[arg-type]


def _questions(count: int) -> list[Question[Echo]]:
    return [Question(RenderedPrompt("consolidate", "sys", f"number {k}", "h"), Echo)
            for k in range(count)]


def _echo(req: Any) -> dict[str, int]:
    return {"n": int(re.findall(r"number (\d+)", req.user)[0])}


def test_outcomes_keep_question_order_and_concurrency_is_bounded(llm_stub: Any) -> None:
    """Six slow questions with llm_concurrency=2: never more than two in flight, every answer
    lands on its own question."""
    lock, in_flight, peak = threading.Lock(), [0], [0]

    def slow(req: Any) -> Any:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.15)
        with lock:
            in_flight[0] -= 1
        return _echo(req)

    llm_stub.set_handler(slow)
    outcomes = ask_all(_ctx(llm_stub, concurrency=2), _questions(6))
    assert [o.value.n for o in outcomes if o.value is not None] == list(range(6))
    assert peak[0] == 2


def test_a_question_answered_in_this_run_is_not_asked_again(llm_stub: Any) -> None:
    """The reply cache: the same prompt in the same run costs no call; another run asks."""
    llm_stub.set_handler(_echo)
    ctx = _ctx(llm_stub)
    first = ask_all(ctx, _questions(3))
    again = ask_all(ctx, _questions(3))
    assert len(llm_stub.chat_requests()) == 3
    assert [o.value.n for o in again if o.value is not None] == [0, 1, 2]
    assert [o.attempts for o in first] == [1, 1, 1] and [o.attempts for o in again] == [0, 0, 0]
    ctx.run_id = f"run-{uuid.uuid4()}"
    ask_all(ctx, _questions(3))
    assert len(llm_stub.chat_requests()) == 6


def test_garbage_is_re_asked_with_the_reason(llm_stub: Any) -> None:
    """Broken JSON then a valid reply: one outcome, two attempts, the reason fed back."""
    replies = iter(["not json at all", {"n": 0}])
    llm_stub.set_handler(lambda req: next(replies))
    [outcome] = ask_all(_ctx(llm_stub), _questions(1))
    assert outcome.ok and outcome.attempts == 2
    assert "could not be used" in llm_stub.chat_requests()[1].user


def test_run_budget_and_phase_cap_both_hold(llm_stub: Any) -> None:
    """Run budget 3 calls, phase cap 2: two questions asked, the rest budget_exhausted, and the
    run's started/answered counters (R27) match what reached the endpoint."""
    llm_stub.set_handler(_echo)
    ctx = _ctx(llm_stub, concurrency=1, max_calls=3)
    limit = CallLimit(max_calls=2, max_tokens=None)
    assert room(ctx, limit) == 1
    outcomes = ask_all(ctx, _questions(4), limit=limit)
    assert [o.status for o in outcomes] == [AskStatus.OK, AskStatus.OK,
                                            AskStatus.BUDGET_EXHAUSTED, AskStatus.BUDGET_EXHAUSTED]
    assert len(llm_stub.chat_requests()) == 2
    assert (ctx.budget.calls, ctx.budget.started, ctx.budget.answered) == (2, 2, 2)
    assert ctx.budget.tokens == 2 * (11 + 7)
    assert room(ctx, limit) == 0


def test_endpoint_failure_is_an_outcome_not_an_exception(llm_stub: Any) -> None:
    """A 401 fails that question (status error, counted as started but not answered)."""
    llm_stub.set_handler(lambda req: StubResponse.error(401))
    ctx = _ctx(llm_stub)
    [outcome] = ask_all(ctx, _questions(1))
    assert outcome.status is AskStatus.ERROR and "DREAM_LLM_API_KEY" in outcome.reason
    assert (ctx.budget.started, ctx.budget.answered) == (1, 0)


def _no_odd(reply: Echo) -> None:
    if reply.n % 2:
        raise ReplyRejected("n must be even")


def test_rejected_and_malformed_replies_are_counted_apart(llm_stub: Any) -> None:
    """Question 1's every reply is well-formed but rejected by its validator (three calls),
    question 2's every reply is prose (three calls), question 0 is answered: the budget counts
    three rejected and three malformed replies, what tells a phase that could use none
    (before, a rejected reply counted nowhere)."""
    llm_stub.set_handler(lambda req: "prose" if "number 2" in req.user else _echo(req))
    ctx = _ctx(llm_stub)
    questions = [Question(q.prompt, Echo, _no_odd) for q in _questions(3)]
    outcomes = ask_all(ctx, questions)
    assert [o.status for o in outcomes] == [AskStatus.OK, AskStatus.INVALID, AskStatus.INVALID]
    assert [(o.malformed, o.rejected) for o in outcomes] == [(0, 0), (0, 3), (3, 0)]
    assert (ctx.budget.started, ctx.budget.malformed, ctx.budget.rejected) == (7, 3, 3)

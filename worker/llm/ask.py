"""Ask the model, validate the reply, re-ask at most twice with the reason, within the budget."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from worker import telemetry
from worker.domain.limits import json_text_problem
from worker.llm.base import LOST_ATTEMPT, REFUSED, LLMClient, LLMError, LLMReply, PromptTooLong
from worker.llm.prompts import RenderedPrompt

T = TypeVar("T", bound=BaseModel)

MAX_REASKS = 2


# Reply models are a handful of classes defined at import time: the caches stay tiny.
_SCHEMAS: dict[type[BaseModel], tuple[dict[str, Any], str]] = {}


def _schema(reply_model: type[BaseModel]) -> tuple[dict[str, Any], str]:
    cached = _SCHEMAS.get(reply_model)
    if cached is None:
        schema = reply_model.model_json_schema()
        cached = _SCHEMAS[reply_model] = (schema, json.dumps(schema, sort_keys=True))
    return cached


def reply_schema(reply_model: type[BaseModel]) -> dict[str, Any]:
    """The reply's JSON schema, built once per model class: pydantic rebuilds it on every call
    (a third of a question's own cost). Callers only read it; nobody mutates it."""
    return _schema(reply_model)[0]


def schema_text(reply_model: type[BaseModel]) -> str:
    """``reply_schema`` as canonical JSON (sorted keys): what a question's key digests."""
    return _schema(reply_model)[1]


class ReplyRejected(Exception):
    """Raised by a semantic validator: the reply parsed but cannot be applied (reason is shown).

    ``final`` ends the question without another re-ask; ``code`` names the check for counting.
    """

    def __init__(self, reason: str, *, final: bool = False, code: str = "") -> None:
        super().__init__(reason)
        self.final = final
        self.code = code


class AskStatus(StrEnum):
    OK = "ok"
    INVALID = "invalid"  # every reply was rejected (or one was rejected as final)
    BUDGET_EXHAUSTED = "budget_exhausted"
    OUT_OF_TIME = "out_of_time"  # the caller's wall-time budget ran out before a call
    ERROR = "error"  # the endpoint failed (LLMError)
    DEFERRED = "deferred"  # a provider batch gave no usable answer (expired, failed, garbage)


# Outcomes that say nothing about the question: its items are asked again by a later run.
# A step's reason when the phase's model time ran out (``finalize`` reads it: the run is blocked
# for its budget, as when its calls or tokens ran out).
OUT_OF_TIME_REASON = "the phase's model wall-time budget is spent; deferred to the next run"
# What a question of an in-process batch that outlived DREAM_LLM_BATCH_WAIT says (``finalize``
# reads it: the remedy is a longer wait, not another endpoint).
BATCH_WAIT_OUT = "not finished within DREAM_LLM_BATCH_WAIT"
DEFERRING = frozenset({AskStatus.BUDGET_EXHAUSTED, AskStatus.OUT_OF_TIME, AskStatus.ERROR,
                       AskStatus.DEFERRED})


@dataclass
class Outcome(Generic[T]):
    """The result of one question to the model, after validation and any re-asks."""

    value: T | None
    status: AskStatus
    reason: str = ""
    attempts: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    model: str = ""
    errors: list[str] = field(default_factory=list)
    # Replies that were not JSON of the reply's schema at all: a run whose every reply was so
    # could not use its model (R27).
    malformed: int = 0
    # Well-formed replies the question's validator rejected (a note id not in the question, a
    # note left out, content no note states): a phase whose every reply was malformed or
    # rejected judged nothing (``finalize``: the run is partial, not succeeded).
    rejected: int = 0
    # Replies that were the model's refusal (``LLMReply.refused``): no malformed reply (its
    # model answers JSON), but no verdict either. Before, uncounted: a phase whose every
    # question was refused judged nothing and its run read ``succeeded`` (R27).
    refused: int = 0
    # The endpoint refused the prompt as longer than the model's context window
    # (``PromptTooLong``): an ERROR that says something of the question, so it is remembered
    # (``unanswered``) and not sent again by every run, each time failing the same way.
    too_long: bool = False
    # BUDGET_EXHAUSTED because the question is more than a whole token cap (``fanout.oversized``),
    # not because the budget ran out: the questions after it are still asked.
    oversized: bool = False

    @property
    def ok(self) -> bool:
        return self.status is AskStatus.OK


def ask(
    llm: LLMClient,
    prompt: RenderedPrompt,
    reply_model: type[T],
    *,
    validate: Callable[[T], None] | None = None,
    spend: CallSpend | None = None,
    deadline: float | None = None,
) -> Outcome[T]:
    """One question, at most 1 + MAX_REASKS calls; nothing here touches the database (R12).

    ``spend`` reserves before each call (False → stop with budget_exhausted), is charged each
    reply, released when a call fails, and told of each attempt the client retries that may
    have been billed (``LOST_ATTEMPT``); no call starts after ``deadline``
    (``time.monotonic()``), so a phase's wall budget is overrun by at most one call's own cap.
    """
    schema = reply_schema(reply_model)
    user = prompt.user
    outcome: Outcome[T] = Outcome(value=None, status=AskStatus.INVALID)
    for attempt in range(1 + MAX_REASKS):
        if deadline is not None and time.monotonic() >= deadline:
            return _stop(outcome, AskStatus.OUT_OF_TIME, OUT_OF_TIME_REASON)
        if spend is not None and not spend.reserve():
            return _stop(outcome, AskStatus.BUDGET_EXHAUSTED, "model budget exhausted")
        outcome.attempts = attempt + 1
        try:
            reply = _call(llm, prompt, user, schema, spend)
        except LLMError as exc:
            outcome.too_long = isinstance(exc, PromptTooLong)
            return _stop(outcome, AskStatus.ERROR, str(exc)[:300])
        spent = spend.charge(reply) if spend is not None else (reply.tokens_in, reply.tokens_out)
        outcome.tokens_in += spent[0]
        outcome.tokens_out += spent[1]
        outcome.model = reply.model
        if reply.refused:  # not re-asked (it refuses again); counted apart from malformed
            outcome.refused, outcome.reason = 1, REFUSED
            outcome.errors.append(REFUSED)
            return outcome
        value, problem, final, malformed = check(reply_model, validate, reply.data)
        outcome.malformed += malformed
        if value is not None:
            outcome.value, outcome.reason = value, ""
            outcome.status = AskStatus.OK
            return outcome
        outcome.rejected += not malformed
        outcome.errors.append(problem)
        outcome.reason = problem
        if final:
            return outcome
        user = (
            prompt.user
            + "\n\nYour previous reply could not be used: "
            + problem
            + "\nReply again with one JSON object that follows the schema exactly."
        )
    return outcome


class CallSpend(Protocol):
    """A question's spending (``worker.llm.spending.HeldCall``)."""

    def reserve(self) -> bool: ...

    def charge(self, reply: LLMReply) -> tuple[int, int]:
        """Charge the reply (its usage, or the call's estimate without one): (in, out)."""

    def release(self) -> None: ...

    def lost_attempt(self) -> bool: ...

    def abandon(self) -> None: ...


def _call(llm: LLMClient, prompt: RenderedPrompt, user: str, schema: dict[str, Any],
          spend: CallSpend | None) -> LLMReply:
    """One call in its span; the client tells ``spend`` of each lost attempt it retries, and a
    failed call gives its reservation back (what was billed of it is charged already)."""
    lost = LOST_ATTEMPT.set(spend.lost_attempt if spend is not None else None)
    try:
        with telemetry.model_call_span(llm, prompt.name) as span:
            reply = llm.complete_json(
                prompt_name=prompt.name, system=prompt.system, user=user, schema=schema
            )
            span.model_reply(reply)
    except LLMError:
        if spend is not None:
            spend.release()
        raise
    except BaseException:
        # Stopped mid-call (the Celery task's soft time limit, an interrupt): the request may
        # be out and billed, so its estimate is charged, as for an attempt lost to a timeout.
        # Before, it was neither charged nor released.
        if spend is not None:
            spend.abandon()
        raise
    finally:
        LOST_ATTEMPT.reset(lost)
    return reply


def check(
    reply_model: type[T], validate: Callable[[T], None] | None, data: Any,
) -> tuple[T | None, str, bool, bool]:
    """``data`` as the validated reply, or None, why not (at most 300 characters), whether
    the rejection is final (no re-ask) and whether the reply was malformed (not JSON of the
    reply's schema, as opposed to a well-formed reply the validator refused)."""
    if problem := unstorable(data):
        return None, problem, False, True
    try:
        value = reply_model.model_validate(data)
    except ValidationError as exc:
        return None, _problem(exc), False, True
    try:
        if validate is not None:
            validate(value)
    except ValidationError as exc:
        return None, _problem(exc), False, False
    except ReplyRejected as exc:
        return None, str(exc)[:300], exc.final, False
    return value, "", False, False


def unstorable(data: Any) -> str:
    """Why a reply holds a string no backend can store ("" when none does): a NUL (PostgreSQL
    refuses it; SQLite kept it) or a lone surrogate (``"\\ud800"`` in the JSON: no UTF-8
    encoder writes it). Before, such a reason or fused text failed the phase's write. The
    field is named (``reply: content is not valid Unicode ...``), for the re-ask."""
    problem = json_text_problem(data)
    return f"reply: {problem}; send text without it" if problem else ""


def _problem(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()[:5]
    )[:300]


def _stop(outcome: Outcome[T], status: AskStatus, reason: str) -> Outcome[T]:
    outcome.status, outcome.reason = status, reason
    return outcome

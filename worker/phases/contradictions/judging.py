"""Judging with a model: the reply schema, the phase's call budget and the topic rounds
fanned out to concurrent calls."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
from pydantic import BaseModel, Field

from worker.domain.types import Note
from worker.llm.ask import Outcome, ReplyRejected, ask
from worker.llm.base import LLMClient
from worker.llm.prompts import render_prompt
from worker.phases.contradictions.apply import Applier, suspicious_notes
from worker.phases.contradictions.core import (
    PHASE,
    PROMPT,
    CandidatePair,
)
from worker.phases.contradictions.topics import (
    Call,
    Topic,
    TopicVerdict,
    check_topic_reply,
    follow_retirements,
    isolate_suspicious,
    pack_calls,
    plan_topics,
    prompt_topics,
)
from worker.runs.context import PhaseContext
from worker.telemetry import in_current_trace

log = structlog.get_logger(__name__)


class ValueReply(BaseModel):
    notes: list[str] = Field(max_length=100)
    fullest: str | None = None


class AttributeReply(BaseModel):
    name: str = Field("", max_length=300)
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field("", max_length=1000)
    values: list[ValueReply] = Field(max_length=100)


class TopicReply(BaseModel):
    topic: str
    attributes: list[AttributeReply] = Field(default_factory=list, max_length=50)


class ContradictionReply(BaseModel):
    topics: list[TopicReply]


@dataclass
class CallResult:
    """One prompt to the judge and what came back, before anything is applied."""

    call: Call
    round: int
    alias_of: dict[str, str] = field(default_factory=dict)
    by_topic: dict[str, Topic] = field(default_factory=dict)
    verdicts: list[TopicVerdict] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    outcome: Outcome[ContradictionReply] | None = None
    template_hash: str | None = None
    duration_ms: float = 0.0
    actions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class PhaseBudget:
    """The phase's own cap on model calls and tokens (per run and scope), thread-safe."""

    max_calls: int | None
    max_tokens: int | None
    calls: int = 0
    tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reserve(self) -> bool:
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                return False
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return False
            self.calls += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.calls -= 1

    def charge(self, tokens: int) -> None:
        with self._lock:
            self.tokens += tokens

    def calls_left(self) -> int | None:
        with self._lock:
            return None if self.max_calls is None else self.max_calls - self.calls

    def affords(self, estimated_tokens: int) -> bool:
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                return False
            return self.max_tokens is None or self.tokens + estimated_tokens <= self.max_tokens


def _calls_left(ctx: PhaseContext) -> int | None:
    b = ctx.budget
    return None if b.max_calls is None else b.max_calls - b.calls


def judge_topics(
    ctx: PhaseContext, llm: LLMClient, pairs: list[CandidatePair], applier: Applier,
) -> tuple[list[CallResult], list[Topic]]:
    """Rounds of at most ``llm_concurrency`` concurrent calls; after each round the applied
    retirements re-plan the rest, so no question is ever spent on a note already retired."""
    s = ctx.settings.contradictions
    notes = applier.notes
    budget = PhaseBudget(s.max_calls_per_run, s.max_tokens_per_run)
    suspicious = suspicious_notes(notes, pairs)
    applier.counters["notes_isolated"] = len(suspicious)
    results: list[CallResult] = []
    asked: set[tuple[str, str]] = set()
    pending, deferred = pairs, []
    round_no = 0
    while pending:
        round_no += 1
        active = {k: n for k, n in notes.items() if n.id not in applier.retired}
        planned = isolate_suspicious(plan_topics(pending, active, s.topic_size), suspicious)
        applier.counters["topics_found"] = applier.counters.get("topics_found", 0) + len(planned)
        calls = pack_calls(planned, suspicious, s.notes_per_call)
        # Never more prompts in flight than calls left: the fair order decides who is asked.
        room = min(x for x in (ctx.settings.llm_concurrency, budget.calls_left(),
                               _calls_left(ctx)) if x is not None)
        batch = calls[: max(0, room)]
        if not batch or ctx.budget.exhausted or not budget.affords(0):
            deferred = planned
            break
        with ThreadPoolExecutor(max_workers=len(batch), thread_name_prefix=PHASE) as pool:
            ask_one = partial(_ask_call, ctx, llm, notes=notes, budget=budget, round_no=round_no)
            done = list(pool.map(in_current_trace(ask_one), batch))
        for result in done:
            results.append(result)
            for verdict in result.verdicts:
                result.actions.extend(applier.apply_topic(verdict))
            for t in result.call.topics:
                asked.update(p.ids for p in t.pairs)
        unasked = [t for c in calls[len(batch):] for t in c.topics]
        unasked += [t for r in done if r.outcome is not None
                    and r.outcome.status == "budget_exhausted" for t in r.call.topics]
        if any(r.outcome is not None and r.outcome.status == "budget_exhausted" for r in done):
            deferred = unasked
            break
        active = {k: n for k, n in notes.items() if n.id not in applier.retired}
        pending = follow_retirements(pending, applier.decided_into(), asked, active)
    applier.counters["rounds"] = round_no
    applier.counters["topics_judged"] = sum(len(r.verdicts) for r in results)
    return results, deferred


def _ask_call(
    ctx: PhaseContext, llm: LLMClient, call: Call, *, notes: dict[str, Note],
    budget: PhaseBudget, round_no: int,
) -> CallResult:
    # Redaction (R29) happens at the one outbound boundary: the App wraps the client.
    items, alias_of, by_topic = prompt_topics(call, notes)
    result = CallResult(call, round_no, alias_of, by_topic)
    started = time.perf_counter()
    prompt = render_prompt(PROMPT, {"topics": items, "topic_ids": list(by_topic)})
    result.template_hash = prompt.template_hash
    estimate = (len(prompt.system) + len(prompt.user)) // 4
    last_reply: list[list[dict[str, object]]] = []

    def validate(reply: ContradictionReply) -> None:
        replied = [t.model_dump() for t in reply.topics]
        last_reply.append(replied)
        _, dropped = check_topic_reply(replied, alias_of, by_topic)
        if dropped:
            problem = "; ".join(f"{tid}: {why}" for tid, why in sorted(dropped.items()))
            raise ReplyRejected(f"every topic needs exactly one clean answer: {problem}"[:300])

    def reserve() -> bool:
        if not budget.affords(estimate) or not budget.reserve():
            return False
        if not ctx.budget.try_reserve_call():
            budget.release()
            return False
        return True

    def charge(tokens: int) -> None:
        budget.charge(tokens)
        ctx.budget.charge(tokens)

    outcome = ask(llm, prompt, ContradictionReply, validate=validate, reserve=reserve,
                  charge=charge)
    result.outcome = outcome
    result.duration_ms = (time.perf_counter() - started) * 1000
    if last_reply:
        # After the re-asks, keep the topics the last parsed reply answered cleanly; a missing,
        # doubled or malformed topic changes nothing for its notes (R12).
        result.verdicts, result.dropped = check_topic_reply(last_reply[-1], alias_of, by_topic)
    else:
        result.dropped = {tid: outcome.reason or outcome.status for tid in by_topic}
    if result.dropped:
        log.warning("contradictions.topics_dropped", run_id=ctx.run_id, scope=ctx.scope.key,
                    dropped=len(result.dropped), status=outcome.status, attempts=outcome.attempts)
    return result

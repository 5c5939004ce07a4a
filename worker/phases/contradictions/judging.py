"""Judging with a model: the reply schema, the phase's call budget and the topic rounds
fanned out to concurrent calls."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
from pydantic import BaseModel, Field

from worker.domain.types import Note
from worker.llm.ask import AskStatus, Outcome, ReplyRejected
from worker.llm.base import LLMClient, reply_cap
from worker.llm.fanout import CallLimit, Question, ask_all, oversized, room
from worker.llm.prompts import RenderedPrompt, render_prompt
from worker.phases.contradictions.apply import Applier, suspicious_notes
from worker.phases.contradictions.confirm import lone_topics
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


def judge_topics(
    ctx: PhaseContext, llm: LLMClient, pairs: list[CandidatePair], applier: Applier,
    whole: int = 0, late: Callable[[set[str]], list[CandidatePair]] | None = None,
) -> tuple[list[CallResult], list[Topic]]:
    """Rounds of at most ``llm_concurrency`` concurrent calls; after each round the applied
    retirements re-plan the rest, so no question is ever spent on a note already retired.
    ``whole``: a small scope's short notes, every pair of them a candidate, fit one topic.
    ``late``: once the rounds are done with nothing deferred, every fresh pair of a larger
    scope's short notes, asked in further rounds in topics of at most a small scope's size."""
    s = ctx.settings.contradictions
    topic_size = max(s.topic_size, whole)
    notes = applier.notes
    limit = _phase_limit(ctx)
    suspicious = suspicious_notes(notes, pairs)
    applier.counters["notes_isolated"] = len(suspicious)
    results: list[CallResult] = []
    asked: set[tuple[str, str]] = set()
    pending, deferred = pairs, list[Topic]()
    confirming: list[CandidatePair] = []  # pairs to ask alone (``confirm``)
    round_no = 0
    while pending or confirming or (late is not None and not deferred):
        if not pending and not confirming:
            assert late is not None
            pending = [p for p in late(applier.retired) if p.ids not in asked]
            late = None
            if not pending:
                break
            applier.counters["candidates_small_scope_late"] = len(pending)
            topic_size = max(topic_size, min(len({i for p in pending for i in p.ids}),
                                             s.small_scope_notes))
        round_no += 1
        active = {k: n for k, n in notes.items() if n.id not in applier.retired}
        planned = _planned(confirming, pending, notes, active, topic_size, suspicious)
        applier.counters["topics_found"] = applier.counters.get("topics_found", 0) + len(planned)
        calls = _fit_caps(ctx, llm, pack_calls(planned, suspicious, s.notes_per_call), notes, limit)
        # Never more prompts in flight than calls left: the fair order decides who is asked.
        batch = calls[: room(ctx, limit)]
        if not batch:  # the run's or the phase's calls or tokens are spent
            deferred = planned
            break
        done = _ask_round(ctx, llm, batch, notes, limit, round_no)
        for result in done:
            results.append(result)
            for verdict in result.verdicts:
                result.actions.extend(applier.apply_topic(verdict))
            for t in result.call.topics:
                asked.update(p.ids for p in t.pairs)
        spent = [r for r in done if r.outcome is not None
                 and r.outcome.status is AskStatus.BUDGET_EXHAUSTED and not r.outcome.oversized]
        if spent:
            deferred = [t for c in calls[len(batch):] for t in c.topics]
            deferred += [t for r in spent for t in r.call.topics]
            break
        active = {k: n for k, n in notes.items() if n.id not in applier.retired}
        pending = follow_retirements(pending, applier.decided_into(), asked, active)
        confirming = [p for p in confirming if p.ids not in asked]  # past the round's calls
        pending, confirming = _with_confirming(pending, confirming, applier, active)
    applier.counters["rounds"] = round_no
    applier.counters["topics_judged"] = sum(len(r.verdicts) for r in results)
    return results, deferred


def _fit_caps(ctx: PhaseContext, llm: LLMClient, calls: list[Call], notes: dict[str, Note],
              limit: CallLimit) -> list[Call]:
    """Each packed prompt no token cap can hold (``fanout.oversized``) split into its topics,
    so only a topic too large by itself is left unasked. Before, one long topic packed with
    others took them down with it, run after run. Rendered here only under a token cap."""
    if ctx.budget.max_tokens is None and limit.max_tokens is None:
        return calls
    out: list[Call] = []
    for call in calls:
        question = Question(_prompt(call, notes), ContradictionReply)
        if len(call.topics) > 1 and oversized(ctx, limit, question, reply_cap(llm)):
            out.extend(Call([t], isolated=call.isolated) for t in call.topics)
        else:
            out.append(call)
    return out


def _prompt(call: Call, notes: dict[str, Note]) -> RenderedPrompt:
    items, _, by_topic = prompt_topics(call, notes)
    return render_prompt(PROMPT, {"topics": items, "topic_ids": list(by_topic)})


def _planned(confirming: list[CandidatePair], pending: list[CandidatePair], notes: dict[str, Note],
             active: dict[str, Note], topic_size: int, suspicious: frozenset[str]) -> list[Topic]:
    """The round's topics. Pairs to confirm go in a round of their own: a topic asked beside
    them could retire one of their notes first, and the answer about the two alone be wasted."""
    if confirming:
        return lone_topics(confirming, notes)
    return isolate_suspicious(plan_topics(pending, active, topic_size), suspicious)


def _with_confirming(pending: list[CandidatePair], left: list[CandidatePair], applier: Applier,
                     active: dict[str, Note]) -> tuple[list[CandidatePair], list[CandidatePair]]:
    """The pairs left but the retirements to confirm (``confirm``: those ``left`` unasked and
    the new ones), and those, each moved to the notes that replaced a retired one: asked
    alone in the next round."""
    fresh = follow_retirements([*left, *applier.confirming.take()], applier.decided_into(),
                               set(), active)
    ids = {p.ids for p in fresh}
    return [p for p in pending if p.ids not in ids], fresh


def _phase_limit(ctx: PhaseContext) -> CallLimit:
    """The phase's own cap, from what the step's earlier executions spent (the calls still in
    their batch count again as this one collects them): a phase resumed after its batch came
    back kept to its cap only per execution before, and spent it again each time."""
    s, earlier = ctx.settings.contradictions, ctx.step_spent
    return CallLimit(s.max_calls_per_run, s.max_tokens_per_run,
                     calls=earlier.calls_started - earlier.calls_waiting if earlier else 0,
                     tokens=earlier.tokens_in + earlier.tokens_out if earlier else 0)


def _ask_round(
    ctx: PhaseContext, llm: LLMClient, calls: list[Call], notes: dict[str, Note],
    limit: CallLimit, round_no: int,
) -> list[CallResult]:
    """One round's prompts through the fan-out; each result keeps the cleanly answered topics."""
    started = time.perf_counter()
    results, questions, replies = [], [], []
    for call in calls:
        # Redaction (R29) happens at the one outbound boundary: the App wraps the client.
        items, alias_of, by_topic = prompt_topics(call, notes)
        result = CallResult(call, round_no, alias_of, by_topic)
        prompt = render_prompt(PROMPT, {"topics": items, "topic_ids": list(by_topic)})
        result.template_hash = prompt.template_hash
        last_reply: list[list[dict[str, object]]] = []
        questions.append(Question(prompt, ContradictionReply,
                                  partial(_validate, alias_of, by_topic, last_reply),
                                  about=tuple((i, notes[i].version) for i in dict.fromkeys(alias_of.values()))))
        results.append(result)
        replies.append(last_reply)
    outcomes = ask_all(ctx, questions, llm=llm, limit=limit, phase=PHASE)
    for result, outcome, last_reply in zip(results, outcomes, replies, strict=True):
        result.outcome = outcome
        result.duration_ms = (time.perf_counter() - started) * 1000
        _keep_clean_topics(ctx, result, outcome, last_reply)
    return results


def _validate(alias_of: dict[str, str], by_topic: dict[str, Topic],
              last_reply: list[list[dict[str, object]]], reply: ContradictionReply) -> None:
    replied = [t.model_dump() for t in reply.topics]
    last_reply.append(replied)
    _, dropped = check_topic_reply(replied, alias_of, by_topic)
    if dropped:
        problem = "; ".join(f"{tid}: {why}" for tid, why in sorted(dropped.items()))
        raise ReplyRejected(f"every topic needs exactly one clean answer: {problem}"[:300])


def _keep_clean_topics(ctx: PhaseContext, result: CallResult,
                       outcome: Outcome[ContradictionReply],
                       last_reply: list[list[dict[str, object]]]) -> None:
    if last_reply:
        # After the re-asks, keep the topics the last parsed reply answered cleanly; a missing,
        # doubled or malformed topic changes nothing for its notes (R12).
        result.verdicts, result.dropped = check_topic_reply(
            last_reply[-1], result.alias_of, result.by_topic)
        if result.verdicts and outcome.rejected and not outcome.ok:
            # The rejected last reply was usable in part: not counted among the replies
            # none of which the phase could use (``finalize._unusable``).
            ctx.budget.count_rejected(-1)
    else:
        result.dropped = {tid: outcome.reason or outcome.status for tid in result.by_topic}
    if result.dropped:
        log.warning("contradictions.topics_dropped", run_id=ctx.run_id, scope=ctx.scope.key,
                    dropped=len(result.dropped), status=outcome.status, attempts=outcome.attempts)

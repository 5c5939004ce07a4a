"""Questions the model refused, or answered with nothing usable, not asked (nor paid for) again
for a while (``DREAM_LLM_UNANSWERED_HOURS``), online or batched: known by their notes' ids and
versions, the model and the prompt template, never by text (a prompt names today's date)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from worker.domain.types import fingerprint_versions
from worker.llm.ask import AskStatus, Outcome

KIND = "unanswered"  # judgements.kind
REFUSED = "refused"  # the model's refusal (``LLMReply.refused``)
UNUSABLE = "unusable"  # replies no JSON of the schema, or that the question's checks rejected
TOO_LONG = "too_long"  # the endpoint refused the prompt as longer than the model's context
# An answer later runs take from memory (``Question.replay``: a review keeping every note it
# was shown), not paid for again while its notes, the model and the prompt stay as they were.
SETTLED = "settled"
SETTLED_REASON = ("answered by the model on {at:%Y-%m-%d %H:%M} UTC; not asked again before "
                  "{until:%Y-%m-%d %H:%M} UTC (DREAM_LLM_UNANSWERED_HOURS) unless one of its "
                  "notes, the model or the prompt changes")
# What a remembered question's outcome says (no note text: a date and the setting).
COOLING = ("the model {verdict} this question on {at:%Y-%m-%d %H:%M} UTC; not asked again "
           "before {until:%Y-%m-%d %H:%M} UTC (DREAM_LLM_UNANSWERED_HOURS) unless one of its "
           "notes, the model or the prompt changes; deferred")
_SAID = {REFUSED: "refused", UNUSABLE: "gave no usable answer to",
         TOO_LONG: "could not take (longer than its context window)"}


def memory_key(ctx: Any, model: str, question: Any) -> str | None:
    """The question's key across runs, or None for one about no notes (not remembered)."""
    about = list(getattr(question, "about", ()) or ())
    if not about:
        return None
    digest = hashlib.sha256()
    for part in (str(ctx.scope.key), model, question.prompt.name, question.prompt.template_hash,
                 fingerprint_versions(about)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def failure(outcome: Outcome[Any]) -> str | None:
    """REFUSED or UNUSABLE when the model was asked and what it answered could not be used
    (online after its re-asks, or a batch's one reply); None for an answer, or for a question
    the budget, the clock or the endpoint stopped (those say nothing of the question); TOO_LONG
    when the endpoint refused its prompt as longer than the model's context window (the same
    prompt fails the same way every time)."""
    if outcome.too_long:
        return TOO_LONG
    if outcome.ok or outcome.status not in (AskStatus.INVALID, AskStatus.DEFERRED):
        return None
    if outcome.refused:
        return REFUSED
    return UNUSABLE if outcome.malformed or outcome.rejected else None


def hours(settings: Any) -> float:
    """``DREAM_LLM_UNANSWERED_HOURS``: how long a question (or, in contradictions, a pair left
    unsettled) is not asked again; 0 for never remembered."""
    return float(getattr(settings, "llm_unanswered_hours", 0) or 0)


def model_name(client: Any) -> str:
    """The model a client asks, as the memory keys it; "" for none."""
    return str(getattr(client, "model", "") or "")


def _remembers(ctx: Any) -> bool:
    """Memory needs the run's store (a phase's context) and a period above 0."""
    return hours(ctx.settings) > 0 and callable(getattr(ctx, "uow", None)) and ctx.run_id is not None


def recall(ctx: Any, keys: dict[int, str], questions: Sequence[Any] = ()
           ) -> dict[int, Outcome[Any]]:
    """The questions (by index) whose key a run recorded within the cooling-off period: each
    a DEFERRED outcome that says when it may be asked again, or, for an answer remembered as
    settled, the OK outcome its question replays (``questions[i].replay``). From the phase's
    loaded memory (``ctx.unanswered``), else one short read."""
    if not keys or not _remembers(ctx):
        return {}
    period = timedelta(hours=hours(ctx.settings))
    since = ctx.now - period
    loaded = getattr(ctx, "unanswered", None)
    if loaded is not None:
        rows = {k: v for k in set(keys.values()) if (v := loaded.get(k)) is not None
                and v[1] >= since}
    else:
        with ctx.uow() as uow:
            rows = uow.judgements.of_kind_since(ctx.scope, KIND, keys.values(), since)
    out: dict[int, Outcome[Any]] = {}
    for i, key in keys.items():
        if key in rows:
            verdict, at = rows[key]
            if verdict == SETTLED:
                replay = getattr(questions[i], "replay", None) if i < len(questions) else None
                if replay is not None:  # else asked: the question replays nothing now
                    out[i] = Outcome(replay[1](), AskStatus.OK,
                                     SETTLED_REASON.format(at=at, until=at + period))
                continue
            why = COOLING.format(verdict=_SAID.get(verdict, verdict), at=at, until=at + period)
            out[i] = Outcome(None, AskStatus.DEFERRED, why)
    return out


def settled(question: Any, outcome: Outcome[Any]) -> bool:
    """The outcome is an answer its question replays on later runs (``Question.replay``)."""
    replay = getattr(question, "replay", None)
    return outcome.ok and outcome.attempts > 0 and replay is not None and replay[0](outcome.value)


def remember(ctx: Any, asked: Sequence[tuple[Any, str | None, Outcome[Any]]]) -> int:
    """Record each question (question, key, outcome) the model refused or answered unusably,
    or answered as its question replays (``settled``), in place of an older record of it;
    none in a dry run. One short write; how many.

    Unusable answers count only beside a usable one: when no question of the fan-out got one,
    the model (or the endpoint before it) is what fails, not the questions (the run is blocked,
    ``model_unusable``), and once the operator fixes it the next run asks again. A refusal is
    the model's answer to that question, and a prompt too long for the model's context is the
    question's own, so both are remembered either way."""
    if not _remembers(ctx) or getattr(ctx, "dry_run", False):
        return 0
    usable = any(o.ok for _, _, o in asked)
    rows = [{"fingerprint": key, "note_ids": sorted({i for i, _ in q.about}), "verdict": why,
             "reason": f"model {why}", "run_id": ctx.run_id, "created_at": ctx.now}
            for q, key, o in asked if key is not None
            and (why := SETTLED if settled(q, o) else failure(o)) is not None
            and (usable or why != UNUSABLE)]
    if rows:
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, getattr(ctx, "epoch", None))
            uow.judgements.replace(ctx.scope, KIND, rows)
            uow.commit()
    return len(rows)

"""ask_as_batch through the real `openai` client against the stub's files and batches API."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from tests.llm.test_fanout import Ctx, Echo, _ctx, _echo, _questions
from worker.clock import utcnow
from worker.llm.ask import AskStatus, ReplyRejected
from worker.llm.base import BatchRelease
from worker.llm.batch import BatchPending, ask_as_batch, reschedule_while_pending
from worker.llm.fanout import Question, Spending, question_key
from worker.llm.prompts import RenderedPrompt


class MemoryLedger:
    """A hand-written BatchLedger: what a run step would record, kept in a list."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, set[str]]] = []
        self.releases: list[BatchRelease] = []
        self.reads: dict[str, str] = {}
        # Batches an earlier attempt's step recorded (and handed over when interrupted).
        self.earlier: set[str] = set()
        # Submissions written ahead: key -> custom ids, and the reason of those closed.
        self.intents: dict[str, list[str]] = {}
        self.closed: dict[str, str] = {}

    def recorded(self) -> list[tuple[str, set[str]]]:
        return [(b, set(ids)) for b, ids in self.batches]

    def intend(self, submission: str, custom_ids: Sequence[str]) -> None:
        self.intents[submission] = list(custom_ids)

    def record(self, batch_id: str, custom_ids: Sequence[str], submission: str = "") -> None:
        if submission:
            assert submission in self.intents  # written ahead
            self.closed[submission] = batch_id
        self.batches.append((batch_id, set(custom_ids)))

    def open_submissions(self) -> list[tuple[str, set[str]]]:
        return [(k, set(ids)) for k, ids in self.intents.items() if k not in self.closed]

    def unsubmitted(self, submission: str, why: str) -> None:
        self.closed[submission] = why

    def released(self, release: BatchRelease) -> None:
        self.releases.append(release)

    def submitted(self) -> dict[str, datetime]:
        return dict.fromkeys((b for b, _ in self.batches), utcnow())

    def read(self, batch_id: str, status: str) -> None:
        self.reads[batch_id] = status

    def unread(self) -> dict[str, bool]:
        gone = {r.batch_id for r in self.releases} | set(self.reads)
        return {b: b not in self.earlier for b, _ in self.batches if b not in gone}

    def recorded_here(self) -> set[str]:
        return {b for b, _ in self.batches} - self.earlier


def _batch_ctx(stub: Any, **budget: int) -> Ctx:
    ctx = _ctx(stub, **budget)
    ctx.settings.llm_batch_poll = 0.01
    ctx.settings.llm_batch_wait = 5
    return ctx


def _ask(ctx: Ctx, count: int, ledger: MemoryLedger) -> list[Any]:
    questions = _questions(count)
    keys = [question_key(ctx, "stub-model", q) for q in questions]
    return ask_as_batch(ctx, ctx.app.llm, questions, keys, Spending(ctx, None), ledger)


def test_a_re_scheduled_attempt_picks_up_the_batch_it_submitted(llm_stub: Any) -> None:
    """Under Celery an unfinished batch raises BatchPending (no waiting); the next attempt finds
    the batch on the ledger, submits nothing new and gets every answer in question order."""
    llm_stub.set_handler(_echo)
    llm_stub.batches.polls = 3
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    with reschedule_while_pending(), pytest.raises(BatchPending) as pending:
        _ask(ctx, 3, ledger)
    assert pending.value.batch_ids == [ledger.batches[0][0]]
    outcomes = _ask(ctx, 3, ledger)
    assert [o.value.n for o in outcomes if isinstance(o.value, Echo)] == [0, 1, 2]
    assert len(llm_stub.batches.batches) == 1 and llm_stub.chat_requests() == []
    assert (ctx.budget.started, ctx.budget.answered) == (3, 3)
    assert ctx.budget.tokens == 3 * (11 + 7)


def test_the_budget_decides_what_goes_into_the_batch(llm_stub: Any) -> None:
    """Two calls left: two questions go into the batch, the third stops as budget_exhausted."""
    llm_stub.set_handler(_echo)
    ctx = _batch_ctx(llm_stub, max_calls=2)
    outcomes = _ask(ctx, 3, MemoryLedger())
    assert [o.status for o in outcomes] == [AskStatus.OK, AskStatus.OK,
                                            AskStatus.BUDGET_EXHAUSTED]
    (batch,) = llm_stub.batches.batches.values()
    assert len(llm_stub.batches.sent[batch.input_file_id].splitlines()) == 2


def test_an_unreachable_endpoint_fails_the_items_not_the_phase(llm_stub: Any) -> None:
    """Submitting to an endpoint that refuses the key: every item is an error outcome (deferred
    by the judges), with the one-line reason."""
    llm_stub.set_handler(_echo)
    ctx = _batch_ctx(llm_stub)
    ctx.run_id = f"run-{uuid.uuid4()}"
    llm_stub.batches.refuse_status = 401
    outcomes = _ask(ctx, 2, MemoryLedger())
    assert [o.status for o in outcomes] == [AskStatus.ERROR, AskStatus.ERROR]
    assert "DREAM_LLM_API_KEY" in outcomes[0].reason


def test_a_batch_that_cannot_be_checked_is_released_not_forgotten(llm_stub: Any) -> None:
    """The provider stops answering after the submit: the items fail for this attempt
    (deferred, asked again in a new batch next run), so nobody would read this batch; it is
    released, and what that could not do (the provider still down) is recorded for the
    ledger, never raised."""
    llm_stub.set_handler(_echo)
    llm_stub.batches.polls = 10_000
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    with reschedule_while_pending(), pytest.raises(BatchPending):
        _ask(ctx, 2, ledger)
    llm_stub.batches.refuse_status = 500
    outcomes = _ask(ctx, 2, ledger)
    assert [o.status for o in outcomes] == [AskStatus.DEFERRED, AskStatus.DEFERRED]
    (release,) = ledger.releases
    assert release.batch_id == ledger.batches[0][0] and not release.complete
    assert "500" in str(release.problem)


def _other_round(ctx: Ctx, ledger: MemoryLedger) -> list[Any]:
    """Questions none of ``_ask``'s: what a re-planned phase, or a later round, asks."""
    questions = [Question(RenderedPrompt("consolidate", "sys", f"number {k}", "h2"), Echo)
                 for k in (7, 8)]
    keys = [question_key(ctx, "stub-model", q) for q in questions]
    return ask_as_batch(ctx, ctx.app.llm, questions, keys, Spending(ctx, None), ledger)


def test_a_batch_no_question_asks_any_more_is_released_and_withdrawn(llm_stub: Any) -> None:
    """A re-scheduled phase re-planned and asks other questions: the unread batch of the first
    look is released (cancelled, its file deleted), once, and its questions no longer count as
    started (so not as failed: the model was not down)."""
    llm_stub.set_handler(_echo)
    llm_stub.batches.polls = 10_000
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    with reschedule_while_pending(), pytest.raises(BatchPending):
        _ask(ctx, 2, ledger)
    first = ledger.batches[0][0]
    with reschedule_while_pending(), pytest.raises(BatchPending):
        _other_round(ctx, ledger)
    assert [r.batch_id for r in ledger.releases] == [first] and ledger.releases[0].complete
    assert llm_stub.batches.cancelled == [first]
    llm_stub.batches.polls = 0
    outcomes = _other_round(ctx, ledger)
    assert [o.status for o in outcomes] == [AskStatus.OK, AskStatus.OK]
    assert len(ledger.releases) == 1  # released once, not at every look
    assert (ctx.budget.started, ctx.budget.answered) == (2, 2)


def test_a_batch_an_earlier_round_read_is_not_released(llm_stub: Any) -> None:
    """Contradictions ask in rounds, one batch each: the second round's questions are none of
    the first's, whose batch was read: nothing is released, nothing withdrawn."""
    llm_stub.set_handler(_echo)
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    _ask(ctx, 2, ledger)
    assert list(ledger.reads.values()) == ["completed"]
    _other_round(ctx, ledger)
    assert ledger.releases == [] and llm_stub.batches.cancelled == []
    assert (ctx.budget.started, ctx.budget.answered) == (4, 4)


def test_a_question_a_re_planned_phase_dropped_from_a_batch_is_withdrawn_once(
        llm_stub: Any) -> None:
    """The re-planned phase still asks two of the batch's three questions: the batch is read
    (not released), and the third question counts neither answered nor failed, once."""
    llm_stub.set_handler(_echo)
    llm_stub.batches.polls = 10_000
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    with reschedule_while_pending(), pytest.raises(BatchPending):
        _ask(ctx, 3, ledger)
    llm_stub.batches.polls = 0
    outcomes = _ask(ctx, 2, ledger)
    assert [o.status for o in outcomes] == [AskStatus.OK, AskStatus.OK]
    assert ledger.releases == [] and list(ledger.reads) == [ledger.batches[0][0]]
    assert (ctx.budget.started, ctx.budget.answered) == (2, 2)
    _ask(ctx, 2, ledger)  # read again (a retried phase): nothing withdrawn twice
    assert (ctx.budget.started, ctx.budget.answered) == (2, 2)


def test_the_billed_reply_to_a_dropped_question_is_charged_not_answered(
        llm_stub: Any) -> None:
    """The re-planned phase dropped one of its batch's three questions before the batch came
    back: the provider bills all three replies, so the budget is charged all three (before:
    two, the dropped reply's tokens were never counted), while only two count as answered."""
    llm_stub.set_handler(_echo)
    llm_stub.batches.polls = 10_000
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    with reschedule_while_pending(), pytest.raises(BatchPending):
        _ask(ctx, 3, ledger)
    llm_stub.batches.polls = 0
    _ask(ctx, 2, ledger)
    assert (ctx.budget.started, ctx.budget.answered) == (2, 2)
    assert ctx.budget.tokens == 3 * (11 + 7)
    assert (ctx.budget.tokens_in, ctx.budget.tokens_out) == (3 * 11, 3 * 7)


def test_a_batch_released_after_it_answered_is_charged_what_it_billed(llm_stub: Any) -> None:
    """The phase re-planned and asks none of its batch's questions, and the provider finished
    that batch meanwhile: released unread (its files deleted), but its two replies were
    billed, so their tokens (each line's usage, no reply read) are charged, recorded on the
    release, and no call counts answered or failed."""
    llm_stub.set_handler(_echo)
    llm_stub.batches.polls = 10_000
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    with reschedule_while_pending(), pytest.raises(BatchPending):
        _ask(ctx, 2, ledger)
    llm_stub.batches.polls = 0  # the release's look finds it completed
    _other_round(ctx, ledger)
    (release,) = ledger.releases
    assert release.status == "completed" and not release.cancelled and release.complete
    assert (release.billed_in, release.billed_out) == (2 * 11, 2 * 7)
    assert llm_stub.batches.files == {}
    assert (ctx.budget.started, ctx.budget.answered) == (2, 2)  # the other round's
    assert ctx.budget.tokens == 4 * (11 + 7)


def test_a_handed_over_batch_counts_as_the_resuming_steps_calls(llm_stub: Any) -> None:
    """A batch an earlier attempt's step submitted (and handed over when it was interrupted):
    the step that reads it counts its questions as its own calls, so an expired one fails
    them here (before: none started, none failed, nothing said) and an answered one answers
    them."""
    llm_stub.set_handler(_echo)
    llm_stub.batches.polls = 10_000
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    with reschedule_while_pending(), pytest.raises(BatchPending) as pending:
        _ask(ctx, 2, ledger)
    assert pending.value.calls == 2
    ledger.earlier = {ledger.batches[0][0]}
    resumed = _batch_ctx(llm_stub)  # the new attempt: the same run, a budget of its own
    resumed.run_id = ctx.run_id
    llm_stub.batches.polls, llm_stub.batches.finish_as = 0, "expired"
    outcomes = _ask(resumed, 2, ledger)
    assert [o.status for o in outcomes] == [AskStatus.DEFERRED, AskStatus.DEFERRED]
    assert outcomes[0].reason.startswith(f"provider batch {ledger.batches[0][0]} expired")
    assert (resumed.budget.started, resumed.budget.answered, resumed.budget.calls) == (2, 0, 0)


def test_a_batch_reply_the_validator_rejects_is_counted_rejected_not_malformed(
        llm_stub: Any) -> None:
    """A batch's well-formed reply its validator refuses is deferred and counted rejected;
    a prose reply is counted malformed: each unusable, neither both."""
    def odd(reply: Any) -> None:
        if reply.n % 2:
            raise ReplyRejected("n must be even")

    llm_stub.set_handler(lambda req: "prose" if "number 2" in req.user else _echo(req))
    ctx = _batch_ctx(llm_stub)
    questions = [Question(q.prompt, q.reply_model, odd) for q in _questions(3)]
    keys = [question_key(ctx, "stub-model", q) for q in questions]
    outcomes = ask_as_batch(ctx, ctx.app.llm, questions, keys, Spending(ctx, None),
                            MemoryLedger())
    assert [o.status for o in outcomes] == [AskStatus.OK, AskStatus.DEFERRED, AskStatus.DEFERRED]
    assert [(o.malformed, o.rejected) for o in outcomes] == [(0, 0), (0, 1), (1, 0)]

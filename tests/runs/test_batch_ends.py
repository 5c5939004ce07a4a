"""How a run says a provider batch ended without answering (expired, failed, cancelled at the
provider, given up past its window, output missing or torn): the endpoint answered, so the
reason names what happened and what to do, never "check DREAM_LLM_BASE_URL"; and a waiting
step interrupted while its batch works hands its calls over to the attempt that resumes the
run, which counts them where it reads the batch. Through the real `openai` client against the
local stub's files and batches endpoints (tests/support/llm_stub_batches.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from tests.llm.test_openai_batch import _store
from tests.runs.test_batches import SCOPE, _resume, _waiting_run, batch_mode
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import RunStatus
from worker.runs import service
from worker.runs.scheduling import GateResult, recover_runs
from worker.store.models import DreamRunRow, RunStepRow

AGAIN = "the next run asks these questions again in a new batch"


@pytest.fixture
def stub_app(sqlite_app: App, llm_stub: LLMStub) -> App:
    return batch_mode(sqlite_app, llm_stub)


def _end(app: App, run_id: str) -> tuple[str, str, list[Any]]:
    """The run's status and reason, and its steps."""
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        steps = uow.runs.steps(run_id)
    assert run is not None
    return run.status, str(run.status_reason), steps


def _cluster_reason(steps: list[Any]) -> str:
    (cluster,) = [s for s in steps if s.name.startswith("cluster")]
    assert (cluster.output or {})["verdict"] == "deferred"
    return str((cluster.output or {})["reason"])


def _submitted_long_ago(app: App, run_id: str, batch_id: str) -> None:
    with app.uow() as uow:
        uow.session.execute(update(RunStepRow).where(
            RunStepRow.run_id == run_id, RunStepRow.name == f"llm batch {batch_id}").values(
            started_at=utcnow() - timedelta(hours=25, minutes=1)))
        uow.commit()


def _torn(req: Any) -> bool:
    return True


# How the batch ends → what the cluster's reason and the run's reason say happened, and what
# the run's reason says to do.
ENDS = [
    ("expired", "expired: the provider's 24 h completion window ended before it answered",
     "if batches keep expiring, set DREAM_LLM_BATCH=false"),
    ("failed", "failed at the provider (token_limit_exceeded)",
     "if it fails again, look up the batch's errors at the provider"),
    ("cancelled", "was cancelled before it answered", AGAIN),
    ("given_up", "given up (still in_progress 25 h after it was submitted, past the "
     "provider's 24 h window)", "keeps batches unfinished for a day"),
    ("torn", "finished without a readable answer (no line for this request in its output)",
     "check what the server writes to batch output files"),
]


@pytest.mark.parametrize(("how", "happened", "todo"), ENDS)
def test_a_batch_that_ends_unanswered_says_what_happened_not_check_the_endpoint(
        stub_app: App, llm_stub: LLMStub, how: str, happened: str, todo: str) -> None:
    """Each way a batch ends with the cluster unanswered: the cluster's reason and the run's
    one-line reason name the batch and what happened (a failed batch with the provider's
    error code, never its message), and say that the next run asks again and what to change
    if it recurs. Before, every one ended "check DREAM_LLM_BASE_URL and the endpoint"."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    (batch_id,) = llm_stub.batches.batches
    batch = llm_stub.batches.batches[batch_id]
    llm_stub.batches.polls = 0
    if how == "given_up":
        _submitted_long_ago(stub_app, run_id, batch_id)
        llm_stub.batches.polls = 10_000
    elif how == "cancelled":  # by the provider (or an operator there), not by this run
        batch.status = "cancelled"
    elif how == "torn":
        llm_stub.batches.corrupt_line = _torn
    else:
        llm_stub.batches.finish_as = how
        llm_stub.batches.failed_files = False  # OpenAI's failed batch: errors, no file
        llm_stub.batches.batch_errors = [{"code": "token_limit_exceeded", "line": None,
                                          "message": "Enqueued token limit reached for "
                                          "note text that must never be repeated"}]
    assert _resume(stub_app, run_id) == RunStatus.BLOCKED.value
    status, reason, steps = _end(stub_app, run_id)
    said = f"provider batch {batch_id} {happened}"
    assert _cluster_reason(steps) == f"{said}; deferred to the next run"
    assert reason.startswith(f"model unavailable: 1 of 1 model calls failed ({said}: the "
                             "endpoint answered, the batch did not); the next run asks these "
                             "questions again in a new batch"), reason
    assert todo in reason and "DREAM_LLM_BASE_URL" not in reason
    assert "\n" not in reason and "must never be repeated" not in reason


def test_a_batch_failing_one_request_says_so(stub_app: App, llm_stub: LLMStub) -> None:
    """A completed batch whose one line failed (HTTP 500 in the error file): the request's
    own error, not the endpoint's configuration."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    (batch_id,) = llm_stub.batches.batches
    llm_stub.batches.polls = 0
    llm_stub.batches.fail_line = _torn
    assert _resume(stub_app, run_id) == RunStatus.BLOCKED.value
    _, reason, steps = _end(stub_app, run_id)
    said = f"provider batch {batch_id} answered this request with an error (HTTP 500)"
    assert _cluster_reason(steps).startswith(said)
    assert f"({said}: the endpoint answered" in reason and "if it recurs, check the server" in (
        reason) and "DREAM_LLM_BASE_URL" not in reason


def _interrupt(app: App, run_id: str) -> None:
    """The run's lease lapses while it waits on its batch; the gate check gives it back for
    another attempt."""
    with app.uow() as uow:
        uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == run_id).values(
            lease_expires_at=utcnow() - timedelta(minutes=5)))
        uow.commit()
    result = GateResult([], {}, [], [])
    recover_runs(app, utcnow(), result)
    assert result.retried == [run_id]


def _phase_steps(steps: list[Any]) -> dict[str, dict[str, Any]]:
    return {s.status: s.output or {} for s in steps if s.parent_id is None
            and s.phase == "consolidate"}


@pytest.mark.parametrize(("finish", "status"), [("completed", RunStatus.SUCCEEDED.value),
                                                ("expired", RunStatus.BLOCKED.value),
                                                ("never", RunStatus.BLOCKED.value)])
def test_a_waiting_step_interrupted_hands_its_calls_over(
        stub_app: App, llm_stub: LLMStub, finish: str, status: str) -> None:
    """A Celery run waits on its batch; its lease lapses and the gate check retries it. The
    interrupted step's call is handed over, not failed (before, it read 1 of 1 failed), and
    the attempt that resumes the run reads the batch and counts the call as its own: answered,
    the run succeeds; expired, or not finished within the in-process wait, the run says so
    (before, the resumed attempt counted no call at all and ended succeeded, its cluster
    deferred)."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    _interrupt(stub_app, run_id)
    _, _, steps = _end(stub_app, run_id)
    old = _phase_steps(steps)["interrupted"]
    assert (old["model_calls_started"], old["model_calls_failed"],
            old["model_calls_handed_over"]) == (1, 0, 1)
    assert "model_calls_waiting" not in old
    llm_stub.batches.polls = 10_000 if finish == "never" else 0
    llm_stub.batches.finish_as = "completed" if finish == "never" else finish
    stub_app.settings.llm_batch_wait = 0.3
    assert service.execute_run(stub_app, run_id) == status  # `dream run --due`, in-process
    _, reason, steps = _end(stub_app, run_id)
    new = _phase_steps(steps)["succeeded"]
    failed = 0 if finish == "completed" else 1
    assert (new["model_calls_started"], new["model_calls_failed"]) == (1, failed)
    if finish == "expired":
        assert "expired: the provider's 24 h completion window" in reason
    elif finish == "never":
        assert "not finished within DREAM_LLM_BATCH_WAIT (0.3s)" in reason
    assert len(llm_stub.batches.batches) == 1  # the resumed attempt submitted nothing new


def _totals(app: App, run_id: str) -> dict[str, Any]:
    with app.uow() as uow:
        run = uow.runs.get(run_id)
    assert run is not None and run.totals is not None
    return dict(run.totals)


@pytest.mark.parametrize("finish", ["completed", "expired"])
def test_a_handed_over_call_is_counted_once(stub_app: App, llm_stub: LLMStub,
                                            finish: str) -> None:
    """One real call, submitted by an attempt interrupted while it waited and settled by the
    attempt that resumed the run: the run's totals, its budget (MAX_CALLS_PER_RUN 2 is not
    reached) and /metrics' per-phase usage count it once, on the interrupted step that spent
    it; the resuming step says it took it over. Before, the resuming step counted it again
    (its cluster step names the model, its calls started hold it): model_calls 2, and the
    limit of 2 read as reached."""
    _store(stub_app, SCOPE, every_phase=False)
    stub_app.settings.budget.max_calls_per_run = 2
    run_id = _waiting_run(stub_app)
    _interrupt(stub_app, run_id)
    llm_stub.batches.polls, llm_stub.batches.finish_as = 0, finish
    status = RunStatus.SUCCEEDED if finish == "completed" else RunStatus.BLOCKED
    assert service.execute_run(stub_app, run_id) == status.value
    _, reason, steps = _end(stub_app, run_id)
    totals = _totals(stub_app, run_id)
    tokens = (11, 7) if finish == "completed" else (0, 0)
    assert (totals["model_calls"], totals["tokens_in"], totals["tokens_out"]) == (1, *tokens)
    assert "budget" not in reason and "model calls" not in " ".join(totals["flags"])
    with stub_app.uow() as uow:
        metrics = uow.run_history.step_usage(SCOPE)
    assert metrics["consolidate"]["calls"] == 1
    old, new = _phase_steps(steps)["interrupted"], _phase_steps(steps)["succeeded"]
    assert (old["model_calls_handed_over"], new["model_calls_started"],
            new["model_calls_taken_over"]) == (1, 1, 1)


@pytest.mark.parametrize("finish", ["completed", "expired"])
def test_an_interrupted_attempts_words_never_state_the_runs_cause(
        stub_app: App, llm_stub: LLMStub, finish: str) -> None:
    """The interrupted attempt's step has a child that met an endpoint failure and deferred
    its cluster (a write of that attempt committed before it waited); the attempt that
    resumes the run settles the handed-over batch. Its run's cause is what the latest attempt
    met: answered, the run succeeded with nothing left for later; expired, the reason names
    the batch's expiry. Before, the old child made the phase read "left for later" (with
    MAX_CALLS_PER_RUN 1 spent: blocked, budget ran out with work left) and its "model
    endpoint failed" became the run's stated cause ("check DREAM_LLM_BASE_URL")."""
    _store(stub_app, SCOPE, every_phase=False)
    stub_app.settings.budget.max_calls_per_run = 1
    run_id = _waiting_run(stub_app)
    _interrupt(stub_app, run_id)
    with stub_app.uow() as uow:
        (old,) = [s for s in uow.runs.steps(run_id) if s.parent_id is None
                  and s.phase == "consolidate" and s.status == "interrupted"]
        uow.runs.add_step({
            "run_id": run_id, "parent_id": old.id, "scope_key": SCOPE.key,
            "phase": "consolidate", "name": "cluster 9", "seq": 9, "status": "skipped",
            "input": {}, "output": {"verdict": "deferred", "reason": "model endpoint failed "
                                    "after 2 attempts (APIConnectionError); deferred to the "
                                    "next run"},
            "error": None, "prompt_name": None, "template_hash": None, "model": None,
            "tokens_in": 0, "tokens_out": 0, "started_at": old.started_at,
            "finished_at": old.started_at, "duration_ms": None})
        uow.commit()
    llm_stub.batches.polls, llm_stub.batches.finish_as = 0, finish
    status = RunStatus.SUCCEEDED if finish == "completed" else RunStatus.BLOCKED
    assert service.execute_run(stub_app, run_id) == status.value
    _, reason, _ = _end(stub_app, run_id)
    assert "model endpoint" not in str(reason) and "DREAM_LLM_BASE_URL" not in str(reason)
    if finish == "expired":
        assert "expired: the provider's 24 h completion window" in reason
    else:
        assert "deferred" not in reason and "work left" not in reason

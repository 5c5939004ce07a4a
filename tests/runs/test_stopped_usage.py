"""A run's model usage is in its totals however it ends (SQLite and PostgreSQL): a run whose
consolidate phase made model calls (the real phase, through the real `openai` client against
the local stub) and was then stopped without ``finalize`` — cancelled running or interrupted,
cancelled by its user's erasure, given up by the gate check or by its task's deliveries —
stores the calls and tokens of every step it wrote, as ``finalize`` counts them, in the
transaction that stopped it. Before, its totals held no usage: its spend was invisible to
`dream runs show`, the API and the cost reports that read run totals."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import event

from tests.phases.consolidate.test_service import merge_reply
from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.run_usage import usage_totals
from worker.domain.types import RunStatus, Scope
from worker.llm.fake import FakeLLM
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import engine, service
from worker.runs.deliveries import begin_delivery

SCOPE = Scope("agent-1", "u1")
USAGE = ("tokens_in", "tokens_out", "model_calls", "model_tokens")


def _with_model(app: App, stub: LLMStub) -> App:
    stub.set_handler(FakeLLM(default=merge_reply()))
    app.llm = OpenAICompatibleLLM(base_url=stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=1)
    return app


def _consolidated(app: App, scope: Scope = SCOPE) -> str:
    """A run of ``scope`` whose consolidate phase (one Celery phase task's worth) merged its
    similar notes with one model call; still running, between its phases."""
    add_notes(app, *[{"id": f"{scope.agent_id}-d{k}", "agent_id": scope.agent_id,
                      "user_id": scope.user_id, "type": "Preference", "content": text,
                      "created_at": days_ago(30 - k)} for k, text in enumerate(DARK_MODE_NOTES)])
    run_id = service.create_run(app, scope, force=True, clock=NOW)
    assert run_id is not None
    assert engine.execute_phase(app, run_id, "consolidate", service.phase_registry()).status \
        is None
    return run_id


def _later(app: App, seconds: int = 0) -> Any:
    return utcnow() + timedelta(seconds=app.settings.lease_seconds + 1 + seconds)


def _cancelled_running(app: App, run_id: str) -> str:
    service.cancel_run(app, run_id, "ops test")
    return RunStatus.CANCELLED.value


def _cancelled_interrupted(app: App, run_id: str) -> str:
    """Its lease lapsed and the gate check interrupted it (to be retried); then cancelled."""
    assert service.gate_check(app, now=_later(app), create=False).retried == [run_id]
    service.cancel_run(app, run_id, "ops test")
    return RunStatus.CANCELLED.value


def _erased(app: App, run_id: str) -> str:
    from worker.safety.erase import erase

    assert erase(app, user_id="u1").cancelled_runs == [run_id]
    return RunStatus.CANCELLED.value


def _given_up_by_the_gate(app: App, run_id: str) -> str:
    """Its lease lapsed on its last attempt: the gate check fails it."""
    app.settings.max_attempts = 1
    assert service.gate_check(app, now=_later(app), create=False).failed == [run_id]
    return RunStatus.FAILED.value


def _never_claimed_again(app: App, run_id: str) -> str:
    """Interrupted by a lapsed lease, then handed out until the gate check gives up on it."""
    assert service.gate_check(app, now=_later(app), create=False).retried == [run_id]
    app.settings.max_attempts = 1
    wait = app.settings.queued_timeout_seconds + 1
    assert service.gate_check(app, now=_later(app, wait), create=False).requeued == [run_id]
    assert service.gate_check(app, now=_later(app, 2 * wait + 1), create=False).failed \
        == [run_id]
    return RunStatus.FAILED.value


def _deliveries_died(app: App, run_id: str) -> str:
    """Its next phase task's worker died on every delivery of the same message."""
    for _ in range(app.settings.max_attempts):
        assert not begin_delivery(app, run_id, "dream.contradictions", "m-1").gave_up
    assert begin_delivery(app, run_id, "dream.contradictions", "m-1").gave_up
    return RunStatus.FAILED.value


STOPS: dict[str, Callable[[App, str], str]] = {
    "cancelled running": _cancelled_running,
    "cancelled interrupted": _cancelled_interrupted,
    "user erased": _erased,
    "given up by the gate check": _given_up_by_the_gate,
    "never claimed again": _never_claimed_again,
    "task deliveries died": _deliveries_died,
}


def _run(app: App, run_id: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(status, totals, the usage its steps record as ``finalize`` reads it)."""
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        return run.status, dict(run.totals or {}), usage_totals(uow.runs.steps(run_id))


@pytest.mark.parametrize("stop", list(STOPS))
def test_a_run_stopped_after_a_model_call_keeps_its_usage_in_its_totals(
        app: App, llm_stub: LLMStub, stop: str) -> None:
    """The consolidate phase's call (its tokens as the stub reported them) is in the stopped
    run's totals, equal to what its steps record."""
    run_id = _consolidated(_with_model(app, llm_stub))
    status = STOPS[stop](app, run_id)
    now, totals, steps = _run(app, run_id)
    assert now == status
    assert steps["model_calls"] == 1 and steps["tokens_in"] > 0 and steps["tokens_out"] > 0
    assert {k: totals.get(k) for k in USAGE} == {k: steps[k] for k in USAGE}
    assert totals["model_tokens"] == totals["tokens_in"] + totals["tokens_out"]


def test_runs_show_says_what_a_cancelled_run_spent(app: App, llm_stub: LLMStub,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`dream runs show` of a run cancelled after its consolidate phase's call says it; before,
    it showed no usage line at all. The API's run reads the same totals."""
    run_id = _consolidated(_with_model(app, llm_stub))
    service.cancel_run(app, run_id, "ops test")
    _, totals, _ = _run(app, run_id)
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    shown = CliRunner().invoke(main, ["runs", "show", run_id])
    assert shown.exit_code == 0, shown.output
    assert f"model calls 1  tokens {totals['tokens_in']}/{totals['tokens_out']}" in shown.output


@pytest.mark.parametrize("how", ["cancel", "abandon"])
def test_a_run_stopped_before_any_step_reports_no_spending(app: App, how: str) -> None:
    """A queued run cancelled, or failed because its message never reached the broker, spent
    nothing, and its totals say so (before: no usage keys, as if unknown)."""
    add_notes(app, {"content": "a note", "user_id": "u1"})
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    if how == "cancel":
        service.cancel_run(app, run_id, "ops test")
    else:
        assert service.abandon_run(app, run_id, "broker down")
    _, totals, _ = _run(app, run_id)
    assert {k: totals.get(k) for k in USAGE} == dict.fromkeys(USAGE, 0)


@contextmanager
def _totals_writes(app: App) -> Iterator[list[int]]:
    """The rows of each statement that writes run totals while the block runs (an
    executemany counts once, with its rows)."""
    writes: list[int] = []

    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
             executemany: bool) -> None:
        if statement.lstrip().upper().startswith("UPDATE DREAM_RUNS SET TOTALS"):
            writes.append(len(parameters) if executemany else 1)

    event.listen(app.engine, "before_cursor_execute", seen)
    try:
        yield writes
    finally:
        event.remove(app.engine, "before_cursor_execute", seen)


@pytest.mark.parametrize("stop", ["user erased", "given up by the gate check"])
def test_runs_stopped_together_store_their_usage_in_one_statement(
        app: App, llm_stub: LLMStub, stop: str) -> None:
    """An erasure cancels every unfinished run of its user, a gate check fails every run it
    gives up: their usage goes in with one executemany, not a statement per run."""
    _with_model(app, llm_stub)
    runs = sorted([_consolidated(app, SCOPE), _consolidated(app, Scope("agent-2", "u1"))])
    with _totals_writes(app) as writes:
        if stop == "user erased":
            from worker.safety.erase import erase

            assert sorted(erase(app, user_id="u1").cancelled_runs) == runs
        else:
            app.settings.max_attempts = 1
            assert sorted(service.gate_check(app, now=_later(app), create=False).failed) \
                == runs
    assert writes == [2]
    for run_id in runs:
        _, totals, steps = _run(app, run_id)
        assert totals["model_calls"] == 1
        assert {k: totals[k] for k in USAGE} == {k: steps[k] for k in USAGE}

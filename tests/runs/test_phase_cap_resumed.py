"""A phase's own model cap (contradictions' MAX_CALLS_PER_RUN) holds across the executions of
its step: under Celery a phase waiting on a provider batch is re-scheduled, and the execution
that resumes it starts from what the step spent. Before, each execution counted from zero, so
a phase resumed after each round spent its whole cap again every time."""

from __future__ import annotations

from tests.llm.test_openai_batch import TEA_NOTES, _store, answer
from tests.runs.test_batches import _resume, batch_mode
from tests.support.factories import DARK_MODE_NOTES, NOW
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.domain.types import Scope
from worker.runs import service


def test_a_resumed_phase_keeps_to_its_own_call_cap(sqlite_app: App, llm_stub: LLMStub) -> None:
    """Thirteen topics of two notes, one a call, a cap of two calls: two calls in all (they
    go out together in the first round), however many times the waiting phase is resumed.
    Before, each resumed execution asked two more: thirteen batch lines."""
    _capped_run(batch_mode(sqlite_app, llm_stub), llm_stub, "capped", cap=2)
    assert len(llm_stub.batches.line_requests) == 2, len(llm_stub.batches.line_requests)


def test_a_phase_resumed_twice_counts_the_calls_of_each_earlier_execution(
        sqlite_app: App, llm_stub: LLMStub) -> None:
    """Two calls a round, a cap of four: the first execution sends round one, the second
    collects it and sends round two, the third collects that and has no calls left. Before,
    the third started from round two's calls only and sent a third round."""
    app = batch_mode(sqlite_app, llm_stub)
    app.settings.llm_concurrency = 2
    _capped_run(app, llm_stub, "capped-twice", cap=4)
    assert len(llm_stub.batches.line_requests) == 4, len(llm_stub.batches.line_requests)


def _capped_run(app: App, llm_stub: LLMStub, name: str, cap: int) -> None:
    """A contradictions-only run of topics of two notes, one a call, under a phase cap of
    ``cap`` calls, its waiting phase resumed until it ends."""
    llm_stub.set_handler(answer)
    llm_stub.batches.polls = 1
    app.settings.contradictions.max_calls_per_run = cap
    app.settings.contradictions.notes_per_call = 2
    app.settings.contradictions.topic_size = 2
    app.settings.contradictions.small_scope_notes = 0
    scope = Scope(name)
    _store(app, scope, clusters=(DARK_MODE_NOTES, TEA_NOTES), every_phase=False)
    run_id = service.create_run(app, scope, force=True, phases=["contradictions"], clock=NOW)
    assert run_id is not None
    _resume(app, run_id)

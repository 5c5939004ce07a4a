"""Undo gives back everything a run changed (issue 12 item 6): examples it archived, and the
judgement (verdict memory) and review rows it recorded — not only notes. SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from tests.phases.contradictions.test_service import IMPERIAL, METRIC, with_stub
from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.cli import main
from worker.domain.types import Scope
from worker.ingest import import_examples
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import service
from worker.safety.undo import undo_run
from worker.store.models import ExampleRow, JudgementRow, NoteRow, ReviewRow

SCOPE = Scope("agent-1")
REFUSE = {"should_consolidate": False, "content": "", "type": "Preference", "source_ids": [],
          "reason": "different nuances"}


def _run(app: App, phase: str) -> str:
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW, phases=[phase])
    assert run_id
    service.execute_run(app, run_id)
    return run_id


def _rows(app: App, model: type) -> list:  # type: ignore[type-arg]
    with app.uow() as uow:
        return list(uow.session.scalars(select(model)))


def test_undo_gives_archived_examples_their_status_back(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """An expired auto-generated example archived by a run is active again after `dream undo`,
    with a logged undo row; the CLI says how many examples it gave back."""
    import_examples(app, [json.dumps({"id": "ex1", "agent_id": "agent-1", "input": "q",
                                      "output": "a", "expires_at": days_ago(3)})])
    run_id = _run(app, "archive")
    assert {r.id: r.status for r in _rows(app, ExampleRow)} == {"ex1": "archived"}
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    out = CliRunner().invoke(main, ["undo", run_id])
    assert out.exit_code == 0, out.output
    assert "gave 1 examples their status back" in out.output
    assert {r.id: r.status for r in _rows(app, ExampleRow)} == {"ex1": "active"}


def test_undo_refuses_when_an_archived_example_changed_since(app: App) -> None:
    """Like notes: an example edited after the run blocks undo unless --force-cascade."""
    import_examples(app, [json.dumps({"id": "ex1", "agent_id": "agent-1", "input": "q",
                                      "output": "a", "expires_at": days_ago(3)})])
    run_id = _run(app, "archive")
    with app.uow() as uow:
        row = uow.session.get(ExampleRow, "ex1")
        assert row is not None
        row.version += 1
        uow.commit()
    with pytest.raises(Exception, match="example ex1 was changed since"):
        undo_run(app, run_id)
    assert undo_run(app, run_id, force_cascade=True).examples == ["ex1"]


def test_undo_forgets_the_runs_verdict_memory_so_the_next_run_asks_again(
        app: App, llm_stub: LLMStub) -> None:
    """A refused cluster is remembered (not asked again at the same versions); once the run
    that refused it is undone, that memory is gone and the next run asks the model again."""
    add_notes(app, *({"id": f"d{k}", "content": t} for k, t in enumerate(DARK_MODE_NOTES)))
    llm_stub.set_handler(lambda req: REFUSE)
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    first = _run(app, "consolidate")
    assert [j.run_id for j in _rows(app, JudgementRow)] == [first]
    asked = len(llm_stub.chat_requests())
    _run(app, "consolidate")
    assert len(llm_stub.chat_requests()) == asked  # remembered: not asked again
    result = undo_run(app, first)
    assert result.judgements == 1 and _rows(app, JudgementRow) == []
    _run(app, "consolidate")
    assert len(llm_stub.chat_requests()) > asked


def test_undo_removes_the_review_records_of_the_run(app: App, llm_stub: LLMStub) -> None:
    """A conflict with a protected note is flagged for review (flags + a review row); undo takes
    the flags off and deletes the review, so no queue item outlives the undone decision."""
    add_notes(app, {"id": "m", "content": METRIC, "protection": "protected",
                    "created_at": days_ago(10)},
              {"id": "i", "content": IMPERIAL, "created_at": days_ago(1)})
    with_stub(app, llm_stub)
    run_id = _run(app, "contradictions")
    reviews = _rows(app, ReviewRow)
    assert [r.run_id for r in reviews] == [run_id]
    result = undo_run(app, run_id)
    assert result.reviews == 1 and _rows(app, ReviewRow) == []
    assert all(not r.flags for r in _rows(app, NoteRow))


def test_undo_refuses_an_interrupted_run_that_may_still_resume(app: App) -> None:
    """An interrupted run owns its scope and resumes its remaining phases; undo says to wait or
    cancel it first and changes nothing."""
    from tests.support.safety import run_row

    run_id = run_row(app, SCOPE, status="interrupted")
    with pytest.raises(Exception, match=f"dream runs cancel {run_id}"):
        undo_run(app, run_id)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status == "interrupted"

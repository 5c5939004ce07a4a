"""Undo gives back everything a run changed (issue 12 item 6): examples it archived, and the
judgement (verdict memory) and review rows it recorded — not only notes. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.api.conftest import ADMIN, TOKENS, auth
from tests.conftest import app_on
from tests.phases.contradictions.test_service import IMPERIAL, METRIC, with_stub
from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from tests.support.safety import run_row
from worker.api import create_api
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.ingest import import_examples
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.mcp.tools import ScopedTools
from worker.review import service as review
from worker.review.items import ChangeKind, ProposedChange
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
    assert "gave 1 example its status back" in out.output
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
    run_id = run_row(app, SCOPE, status="interrupted")
    with pytest.raises(Exception, match=f"dream runs cancel {run_id}"):
        undo_run(app, run_id)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status == "interrupted"


# ---- what undo says it did, on every surface ----------------------------------------------
def _undo_by(surface: str, app: App, run_id: str) -> tuple[dict[str, Any], str]:
    """``dream undo`` / ``POST /api/runs/{id}/undo`` / the MCP ``undo_run`` tool: (the result's
    fields, as the API and MCP answer them, or {} for the CLI; the CLI's line, or "")."""
    if surface == "cli":
        out = CliRunner().invoke(main, ["undo", run_id],
                                 env={"DREAM_DATABASE_URL": app.settings.database_url})
        assert out.exit_code == 0, out.output
        return {}, out.output
    if surface == "api":
        with TestClient(create_api(app)) as client:
            answer = client.post(f"/api/runs/{run_id}/undo", headers=auth(ADMIN), json={})
        assert answer.status_code == 200, answer.text
        return answer.json(), ""
    return ScopedTools(app, SCOPE).undo_run(run_id), ""


def _said(fields: dict[str, Any], line: str) -> tuple[int, int, int]:
    """(reviews deleted, review items withdrawn, review items undone) as the surface says."""
    if fields:
        return (fields["reviews"], fields["review_items_withdrawn"],
                fields["review_items_undone"])
    # A count of nothing is left out of the line: absent reads as 0.
    counts = []
    for pattern in (r"removed (\d+) reviews? the run\(s\) recorded",
                    r"withdrew (\d+) open review items?", r"marked (\d+) applied review items? undone"):
        found = re.search(pattern, line)
        counts.append(int(found[1]) if found else 0)
    assert any(counts) or "nothing to revert" in line, line
    assert " 0 " not in line, line
    return counts[0], counts[1], counts[2]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def token_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    """An app with API tokens (the API surface), on SQLite and on PostgreSQL."""
    with app_on(request.param, tmp_path, api_tokens=TOKENS) as app:
        yield app


@pytest.mark.parametrize("surface", ["cli", "api", "mcp"])
def test_undo_says_review_items_were_withdrawn_and_undone_not_removed(
        token_app: App, surface: str) -> None:
    """Undo keeps review items: an undone approval's item reads ``undone`` and an undone
    proposing run's open item is withdrawn (declined). Every surface reports those two apart
    from the review rows it deleted, under the same names (``reviews``,
    ``review_items_withdrawn``, ``review_items_undone``); before, all three were summed into
    ``reviews`` and the CLI said "removed 1 reviews" of items still there."""
    app = token_app
    add_notes(app, {"id": "t1", "content": "Prefers green tea."},
              {"id": "t2", "content": "Prefers green tea in the morning."},
              {"id": "c1", "content": "Works from Lisbon."},
              {"id": "c2", "content": "Works from Lisbon on Fridays."})
    proposer = run_row(app, SCOPE)
    with app.uow() as uow:
        uow.review.add_many(SCOPE, proposer, [_merge(["t1", "t2"], "Prefers green tea."),
                                              _merge(["c1", "c2"], "Works from Lisbon.")],
                            utcnow())
        uow.commit()
        first = min(int(i.id) for i in uow.review.list(SCOPE))
    (approved,) = review.approve(app, SCOPE, review.Selector(item_id=first), "ana")
    assert approved.run_id is not None

    assert _said(*_undo_by(surface, app, approved.run_id)) == (0, 0, 1)
    assert _said(*_undo_by(surface, app, proposer)) == (0, 1, 0)
    with app.uow() as uow:
        statuses = sorted(i.status for i in uow.review.list(SCOPE, status=None))
    assert statuses == ["declined", "undone"]  # both kept


def _merge(ids: list[str], content: str) -> dict[str, Any]:
    return ProposedChange(phase="consolidate", kind=ChangeKind.MERGE,
                          versions=dict.fromkeys(ids, 1), reason="rule: identical",
                          content=content, source_ids=tuple(ids),
                          payload={"rule": "identical", "similarity": 1.0}).row()

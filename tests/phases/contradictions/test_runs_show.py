"""`dream runs show` and the dashboard's run page name what a model-judged contradictions step
decided: the notes it asked about and the one it retired, ids only. Before, the child step line
read `model succeeded 12.0 ms attempts=1 tokens 10/5`; the decisions were only in `--json`."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.phases.contradictions.test_service import (
    IMPERIAL,
    METRIC,
    SCOPE,
    run_phase,
    with_stub,
)
from tests.runs.test_outcome_blocked import ADMIN, api
from tests.support.factories import add_notes, days_ago
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.reporting import render_tree, run_tree

__all__ = ["api"]  # the fixture, used by name


def test_runs_show_and_the_dashboard_name_the_note_a_model_call_retired(
        app: App, llm_stub: LLMStub, api: TestClient) -> None:
    with_stub(app, llm_stub)
    add_notes(app, {"id": "old", "content": METRIC, "created_at": days_ago(20)},
              {"id": "new", "content": IMPERIAL, "created_at": days_ago(6)})
    run_id = run_phase(app, SCOPE)
    lines = render_tree(run_tree(app, run_id)).splitlines()
    at = next(k for k, line in enumerate(lines) if line.lstrip().startswith("model "))
    assert lines[at].endswith("notes: new, old"), lines[at]
    decided = lines[at + 1].strip()
    assert decided.startswith("new ~ old: conflicting, revoke old ("), lines
    assert "metric" not in "\n".join(lines).lower()  # ids, never the notes' text
    page = api.get(f"/dashboard/runs/{run_id}", headers={"Authorization": f"Bearer {ADMIN}"})
    assert page.status_code == 200
    assert "new ~ old: conflicting, revoke old (" in page.text

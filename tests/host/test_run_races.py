"""Host writes through the real API while a dream of the same scope holds its lease and its
model is thinking (SQLite and PostgreSQL): the host's write keeps its own version checks, and
the run skips what the host changed instead of overwriting it (R10)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.api.conftest import AGENT_1, TOKENS, auth
from tests.conftest import app_on
from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubRequest
from worker.api import create_api
from worker.app import App
from worker.domain.types import Scope
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import service
from worker.store.models import NoteRow

FUSED = "User prefers dark mode in the code editor and terminal, at night too"
ALIASES = ["n1", "n2", "n3", "n4", "n5"]  # the prompt's names of d0..d4


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def race_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    with app_on(request.param, tmp_path, api_tokens=TOKENS) as a:
        add_notes(a, *({"id": f"d{k}", "type": "Preference", "content": t,
                        "created_at": days_ago(30 - k)} for k, t in enumerate(DARK_MODE_NOTES)))
        yield a


def _states(app: App) -> dict[str, tuple[str, int, str | None]]:
    with app.uow() as uow:
        rows = uow.session.execute(select(NoteRow.id, NoteRow.status, NoteRow.version,
                                          NoteRow.consolidated_into_id)).all()
    return {r.id: (r.status, r.version, r.consolidated_into_id) for r in rows}


def _dream_while(app: App, stub: LLMStub, host: Callable[[TestClient], Any]) -> dict[str, Any]:
    """A consolidate-only run whose model blocks until ``host`` (API calls) has run."""
    asked, release = threading.Event(), threading.Event()

    def blocking(req: StubRequest) -> Any:
        asked.set()
        release.wait(20)
        return {"should_consolidate": True, "content": FUSED, "type": "Preference",
                "source_ids": ALIASES, "reason": "same editor preference"}

    stub.set_handler(blocking)
    app.llm = OpenAICompatibleLLM(base_url=stub.url, model="stub-model", api_key="k",
                                  timeout=30, max_retries=1)
    run_id = service.create_run(app, Scope("agent-1"), force=True, phases=["consolidate"],
                                clock=NOW)
    assert run_id is not None
    worker = threading.Thread(target=service.execute_run, args=(app, run_id))
    worker.start()
    out: dict[str, Any] = {}
    try:
        assert asked.wait(20), "the run never asked the model"
        with TestClient(create_api(app)) as client:
            out["host"] = host(client)
            out["after_host"] = _states(app)
    finally:
        release.set()
        worker.join(30)
    with app.uow() as uow:
        steps = uow.runs.steps(run_id)
    out["phase"] = next(s for s in steps if s.parent_id is None).output
    out["children"] = [s.output for s in steps if s.parent_id is not None]
    out["end"] = _states(app)
    return out


def test_a_host_fuse_during_the_model_call_wins_and_the_run_skips_the_cluster(
        race_app: App, llm_stub: LLMStub) -> None:
    """The host fuses two of the cluster's notes while the model fuses all five: the host's
    fusion stands as written, the run's cluster is stale and nothing of it is applied."""
    out = _dream_while(race_app, llm_stub, lambda c: c.post(
        "/api/forgetting/fuse", headers=auth(AGENT_1),
        json={"source_ids": ["d0", "d1"], "fused_content": DARK_MODE_NOTES[0]}))
    assert out["host"].status_code == 201, out["host"].text
    assert out["phase"]["clusters_skipped_stale"] == 1 and out["phase"]["clusters_merged"] == 0
    assert out["end"] == out["after_host"]


def test_a_remember_update_during_the_model_call_wins_and_the_run_skips_the_cluster(
        race_app: App, llm_stub: LLMStub) -> None:
    """A host write that supersedes one of the cluster's notes (a longer near-duplicate): the
    UPDATE stands, the run's cluster is stale."""
    longer = "User prefers dark mode in the code editor and terminal at night and by day"
    out = _dream_while(race_app, llm_stub, lambda c: c.post(
        "/api/notes", headers=auth(AGENT_1), json={"content": longer, "type": "Preference"}))
    assert out["host"].status_code == 201 and out["host"].json()["action"] == "UPDATE"
    assert out["phase"]["clusters_skipped_stale"] == 1 and out["phase"]["clusters_merged"] == 0
    assert out["end"] == out["after_host"]


def test_a_host_fuse_of_notes_the_run_retired_meanwhile_is_a_conflict(
        race_app: App, llm_stub: LLMStub) -> None:
    """The host read the candidates before the run merged them and fuses after: 409 naming
    a note, nothing written by the host; the run's merge stands."""
    with TestClient(create_api(race_app)) as client:
        listed = client.post("/api/forgetting/fusion-candidates", headers=auth(AGENT_1),
                             json={"threshold": 0.3}).json()["candidates"]
        assert any(set(c["note_ids"]) <= {f"d{k}" for k in range(5)} for c in listed)
        llm_stub.set_handler(lambda req: {"should_consolidate": True, "content": FUSED,
                                          "type": "Preference", "source_ids": ALIASES,
                                          "reason": "same"})
        race_app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model",
                                           api_key="k", timeout=30, max_retries=1)
        run_id = service.create_run(race_app, Scope("agent-1"), force=True,
                                    phases=["consolidate"], clock=NOW)
        assert run_id is not None
        service.execute_run(race_app, run_id)
        merged = _states(race_app)
        r = client.post("/api/forgetting/fuse", headers=auth(AGENT_1),
                        json={"source_ids": ["d0", "d1"], "fused_content": DARK_MODE_NOTES[0]})
        assert r.status_code == 409 and "not active" in r.json()["detail"], r.text
        assert _states(race_app) == merged

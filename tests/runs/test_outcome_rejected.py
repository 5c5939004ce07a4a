"""A model that answers every question in the asked JSON shape but not to the point (note ids
not in the question): the validators reject every reply after the re-asks and the phase judges
nothing. Before, only replies that were no JSON of the schema counted as unusable, so such a
run ended `succeeded`, exit 0, with no reason and no flag. Through the real openai client
against the local HTTP stub."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from tests.phases.contradictions.test_service import (
    IMPERIAL,
    METRIC,
    answering,
    phase_step,
    run_phase,
    topics,
    with_stub,
)
from tests.runs.test_outcome_blocked import ADMIN, SCOPE, api, dream, jsonl
from tests.support.factories import DARK_MODE_NOTES, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubRequest
from worker.app import App
from worker.domain.types import Scope

__all__ = ["api"]  # the fixture, used by name

PARTIAL = 11  # `dream run`'s exit code for a run that ended partial (worker.cli.common)
ENV = {"DREAM_LLM_PROVIDER": "openai", "DREAM_LLM_API_KEY": "k", "DREAM_LLM_MODEL": "stub-model"}


def _fusion(source_ids: list[str], should: bool = True) -> dict[str, Any]:
    return {"should_consolidate": should, "content": "The user prefers dark mode in editors",
            "type": "Preference", "source_ids": source_ids, "reason": "same preference"}


def _import_dark_mode(app: App) -> None:
    notes = [{"agent_id": "agent-1", "user_id": "u1", "content": t, "type": "Preference"}
             for t in DARK_MODE_NOTES]
    dream(app, "entities", "import", "-",
          stdin=jsonl([{"kind": "agent", "id": "agent-1"}, {"kind": "user", "id": "u1"}]))
    dream(app, "notes", "import", "-", stdin=jsonl(notes))


def test_a_phase_whose_every_reply_names_notes_not_asked_about_makes_the_run_partial(
        app: App, llm_stub: LLMStub, api: TestClient) -> None:
    llm_stub.set_handler(lambda req: _fusion(["n99"]))
    _import_dark_mode(app)
    dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", "--phase", "consolidate",
          code=PARTIAL, **ENV, DREAM_LLM_BASE_URL=llm_stub.url)

    [listed] = json.loads(dream(app, "runs", "list", "--json").stdout)
    replies = len(llm_stub.chat_requests())
    assert replies >= 3  # the question and its two re-asks, each rejected
    assert (listed["status"], listed["totals"]["flags"]) == ("partial", ["model_partial"])
    reason = listed["status_reason"]
    assert reason.startswith(f"model answers unusable in the consolidate phase: its checks "
                             f"rejected {replies} of {replies} replies (notes not in the "
                             "question"), reason
    assert "what it was to judge is left as it was" in reason
    assert "not JSON" not in reason and "dark" not in reason
    shown = dream(app, "runs", "show", listed["id"]).stdout
    assert reason in shown
    step = next(s for s in json.loads(dream(app, "runs", "show", listed["id"], "--json").stdout)
                ["steps"] if s["phase"] == "consolidate")
    assert step["output"]["model_replies_rejected"] == replies
    assert step["output"]["model_replies_malformed"] == 0
    got = api.get(f"/api/runs/{listed['id']}", headers={"Authorization": f"Bearer {ADMIN}"})
    assert got.status_code == 200, got.text
    assert got.json()["status_reason"] == reason
    with app.uow() as uow:
        assert uow.notes.count_by_status(SCOPE) == {"active": len(DARK_MODE_NOTES)}


def test_a_phase_with_one_usable_reply_among_rejected_ones_still_succeeds(
        app: App, llm_stub: LLMStub) -> None:
    """The first ask of each cluster names a note not in it, the re-ask answers: the run
    judged its clusters and is `succeeded` as before; the rejections are only counted."""
    def handle(req: StubRequest) -> dict[str, Any]:
        reasked = "Your previous reply could not be used" in req.user
        return _fusion([], should=False) if reasked else _fusion(["n99"])

    llm_stub.set_handler(handle)
    _import_dark_mode(app)
    dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", "--phase", "consolidate",
          code=0, **ENV, DREAM_LLM_BASE_URL=llm_stub.url)
    [listed] = json.loads(dream(app, "runs", "list", "--json").stdout)
    assert (listed["status"], listed["status_reason"]) == ("succeeded", None), listed
    step = next(s for s in json.loads(dream(app, "runs", "show", listed["id"], "--json").stdout)
                ["steps"] if s["phase"] == "consolidate")
    replies = len(llm_stub.chat_requests())
    assert step["output"]["model_replies_rejected"] == replies // 2 >= 1


def _misnamed(handle: Any) -> Any:
    """``handle``'s answers with every note alias replaced by one not in the question."""
    def answer(req: StubRequest) -> dict[str, Any]:
        reply: dict[str, Any] = handle(req)
        for topic in reply["topics"]:
            for attribute in topic["attributes"]:
                for value in attribute["values"]:
                    value["notes"] = ["n99" for _ in value["notes"]]
        return reply
    return answer


UNITS = Scope("agent-1")


def _units(app: App) -> None:
    add_notes(app, {"id": "old", "content": METRIC, "created_at": days_ago(20)},
              {"id": "new", "content": IMPERIAL, "created_at": days_ago(6)})


def test_contradictions_whose_every_reply_is_rejected_make_the_run_partial(
        app: App, llm_stub: LLMStub) -> None:
    with_stub(app, llm_stub)
    llm_stub.set_handler(_misnamed(answering(topics)))
    _units(app)
    run_id = run_phase(app, UNITS)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        assert uow.notes.count_by_status(UNITS) == {"active": 2}
    replies = len(llm_stub.chat_requests())
    assert run.status == "partial"
    assert (run.status_reason or "").startswith(
        f"model answers unusable in the contradictions phase: its checks rejected {replies} of "
        f"{replies} replies"), run.status_reason
    assert phase_step(app, run_id)["output"]["model_replies_rejected"] == replies


def test_contradictions_keeping_the_clean_topics_of_a_rejected_reply_succeed(
        app: App, llm_stub: LLMStub) -> None:
    """Every reply also answers a topic that was never asked (rejected, re-asked), but the
    asked topic is answered cleanly: the phase applies it, so the run is not partial."""
    with_stub(app, llm_stub)
    llm_stub.set_handler(answering(topics, extra=[{"topic": "t99", "attributes": []}]))
    _units(app)
    run_id = run_phase(app, UNITS)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        assert uow.notes.count_by_status(UNITS) == {"active": 1, "revoked": 1}
    assert (run.status, run.status_reason) == ("succeeded", None)
    assert phase_step(app, run_id)["output"]["model_replies_rejected"] == len(
        llm_stub.chat_requests()) - 1

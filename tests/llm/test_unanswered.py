"""A question the model refused, or answered with nothing usable, is not asked (nor paid for)
again by the next runs until its cooling-off period ends (DREAM_LLM_UNANSWERED_HOURS), online
and in a provider batch alike; each phase's step counts the questions it skipped. Before, every
run asked every refused question again, each time paying for it. Through the real openai client
against the local HTTP stub, every judge (consolidate, contradictions, prune and archive
reviews)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from tests.llm.test_openai_batch import TEA_NOTES, _notes_of, _refused, _store, answer
from tests.support.factories import DARK_MODE_NOTES, NOW
from tests.support.llm_stub import LLMStub, StubRequest, StubResponse
from tests.support.sql import recorded_statements
from worker.app import App
from worker.domain.types import Scope
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.llm.unanswered import KIND
from worker.runs import service
from worker.store.models import NoteRow

JUDGES = {"consolidate", "contradictions", "prune", "archive"}
ONLY = ["consolidate"]


def judging_app(app: App, stub: LLMStub, batch: bool) -> App:
    """The real client on the stub judging in every phase (prune's and archive's reviews too),
    online or in provider batches."""
    app.llm = OpenAICompatibleLLM(base_url=stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    app.settings.prune.review = "llm"
    app.settings.archive.review = "llm"
    app.settings.llm_batch = batch
    app.settings.llm_batch_poll = 0.05
    app.settings.llm_batch_wait = 20
    return app


def _run(app: App, scope: Scope, at: Any, phases: list[str] | None = None,
         ) -> dict[str, dict[str, Any]]:
    """One forced run at ``at``; each phase's parent step output, by phase, and the run's
    status, reason and flags (``"run"``)."""
    run_id = service.create_run(app, scope, force=True, clock=at, phases=phases)
    assert run_id is not None
    service.execute_run(app, run_id)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        return {"run": {"status": run.status, "reason": run.status_reason,
                        "flags": (run.totals or {}).get("flags")},
                **{s.phase: dict(s.output or {}) for s in uow.runs.steps(run_id)
                   if s.parent_id is None}}


def _asked(stub: LLMStub) -> int:
    """Questions that reached the model: chat requests, or lines of provider batches."""
    return len(stub.chat_requests()) + len(stub.batches.line_requests)


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_a_refused_question_is_not_asked_again_until_its_cooling_off_ends(
        app: App, llm_stub: LLMStub, batch: bool) -> None:
    """Every judge refuses. The first run archives an idle note, so the next day's run asks
    contradictions about the notes left, and nothing else; the run after it asks nothing, and
    each judging phase says how many questions it skipped. Past the period (7 days by
    default) they are asked again."""
    llm_stub.set_handler(lambda req: _refused())
    judging_app(app, llm_stub, batch)
    scope = Scope("cooling")
    _store(app, scope)
    first = _run(app, scope, NOW)
    assert {p for p, o in first.items() if o.get("model_replies_refused")} == JUDGES, first
    asked = _asked(llm_stub)
    second = _run(app, scope, NOW + timedelta(days=1))
    assert {p for p, o in second.items() if o.get("model_calls_started")} == {"contradictions"}
    assert {p for p, o in second.items() if o.get("model_questions_cooling")} == JUDGES - {
        "contradictions"}
    assert _asked(llm_stub) == asked + 1
    third = _run(app, scope, NOW + timedelta(days=2))
    assert _asked(llm_stub) == asked + 1  # not one question paid for again
    assert not any(o.get("model_calls_started") for o in third.values()), third
    assert {p: o.get("model_questions_cooling") for p, o in third.items() if p in JUDGES} == {
        p: 1 for p in JUDGES}
    # A run that judged nothing for it says so (R27): partial, flag model_cooling, each phase
    # named with its count, no note text.
    assert (third["run"]["status"], third["run"]["flags"]) == ("partial", ["model_cooling"])
    assert third["run"]["reason"].startswith(
        "1 question of the consolidate phase not asked again: the model refused or answered "
        "unusably on a recent run;"), third["run"]
    assert all(f"of the {p} phase" in third["run"]["reason"] for p in JUDGES)
    assert "dark" not in third["run"]["reason"].lower()
    _run(app, scope, NOW + timedelta(days=8, minutes=1))
    assert _asked(llm_stub) == asked + 1 + len(JUDGES)


def test_garbage_is_remembered_and_what_the_endpoint_failed_is_not(
        app: App, llm_stub: LLMStub) -> None:
    """A question the endpoint failed (HTTP 500) says nothing of the question: asked again by
    the next run. A reply that is no JSON of the schema (after its re-asks) beside a usable
    answer to another question cools off like a refusal."""
    judging_app(app, llm_stub, batch=False)
    scope = Scope("garbage")
    _store(app, scope, clusters=(DARK_MODE_NOTES, TEA_NOTES), every_phase=False)
    llm_stub.set_handler(lambda req: StubResponse.error(500))
    _run(app, scope, NOW, ONLY)
    failed = len(llm_stub.chat_requests())

    def tea_garbage(req: StubRequest) -> Any:
        return "this is not JSON" if "green tea" in req.user else answer(req)

    llm_stub.set_handler(tea_garbage)
    garbage = _run(app, scope, NOW + timedelta(days=1), ONLY)
    assert len(llm_stub.chat_requests()) == failed + 1 + 3  # asked again; tea: 2 re-asks
    assert garbage["consolidate"]["model_replies_malformed"] == 3
    again = _run(app, scope, NOW + timedelta(days=2), ONLY)
    assert len(llm_stub.chat_requests()) == failed + 4
    assert again["consolidate"]["model_questions_cooling"] == 1
    # The dark-mode cluster was fused: the run had nothing else to ask, so it judged nothing.
    assert (again["run"]["status"], again["run"]["flags"]) == ("partial", ["model_cooling"])
    with app.uow() as uow:
        rows = uow.judgements.of_kinds(scope, [KIND])
    assert [(r.verdict, r.reason) for r in rows] == [("unusable", "model unusable")]


def test_garbage_to_every_question_is_not_remembered(app: App, llm_stub: LLMStub) -> None:
    """No usable reply at all: the model (or a proxy before it) is what fails, and the run
    is blocked for it (model_unusable); once it is fixed the next run asks again."""
    judging_app(app, llm_stub, batch=False)
    scope = Scope("all-garbage")
    _store(app, scope, every_phase=False)
    llm_stub.set_handler(lambda req: "this is not JSON")
    assert _run(app, scope, NOW)["run"]["flags"] == ["model_unusable"]
    llm_stub.set_handler(answer)
    fixed = _run(app, scope, NOW + timedelta(days=1))
    assert fixed["consolidate"].get("model_calls_started") == 1
    assert "model_questions_cooling" not in fixed["consolidate"]


def test_a_changed_note_is_asked_about_at_once(app: App, llm_stub: LLMStub) -> None:
    """The memory holds the notes at their versions: a host's edit of one of them makes a
    new question, asked on the next run."""
    judging_app(app, llm_stub, batch=False)
    llm_stub.set_handler(lambda req: _refused())
    scope = Scope("edited")
    _store(app, scope, every_phase=False)
    _run(app, scope, NOW)
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == "edited-c0-0").values(
            importance=0.9, version=NoteRow.version + 1))
        uow.commit()
    second = _run(app, scope, NOW + timedelta(days=1))
    assert [r.prompt_name for r in llm_stub.chat_requests()].count("consolidate") == 2
    assert "model_questions_cooling" not in second["consolidate"]


def test_the_period_0_turns_the_memory_off(app: App, llm_stub: LLMStub) -> None:
    """DREAM_LLM_UNANSWERED_HOURS=0: every run asks again, as before."""
    judging_app(app, llm_stub, batch=False)
    app.settings.llm_unanswered_hours = 0
    llm_stub.set_handler(lambda req: _refused())
    scope = Scope("off")
    _store(app, scope, every_phase=False)
    _run(app, scope, NOW)
    asked = len(llm_stub.chat_requests())
    _run(app, scope, NOW + timedelta(days=1))
    assert len(llm_stub.chat_requests()) == 2 * asked


def test_a_phase_recalls_from_the_memory_it_loaded(app: App, llm_stub: LLMStub) -> None:
    """Consolidation and contradictions load the scope's verdict memory anyway: the questions
    they skip are found there, with no statement of their own. Before, each fan-out read the
    judgements again (a statement per phase and per contradictions round: the bench's SQL per
    scope went from 24.5 to 26.6, over the 25 the engine holds to)."""
    llm_stub.set_handler(lambda req: _refused())
    judging_app(app, llm_stub, batch=False)
    scope = Scope("recalled")
    _store(app, scope, every_phase=False)
    phases = ["consolidate", "contradictions"]
    _run(app, scope, NOW, phases)
    with recorded_statements(app) as seen:
        second = _run(app, scope, NOW + timedelta(days=1), phases)
    assert second["consolidate"]["model_questions_cooling"] >= 1, second
    assert "model_calls_started" not in second["consolidate"], second
    reads = [s for s in seen if s.startswith("SELECT") and "FROM judgements" in s]
    assert reads and not [s for s in reads if "judgements.created_at >=" in s], reads


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_a_prompt_longer_than_the_model_takes_is_not_sent_again_by_every_run(
        app: App, llm_stub: LLMStub, batch: bool) -> None:
    """The endpoint refuses the cluster's prompt as longer than the model's context (HTTP 400
    ``context_length_exceeded``, online or as a batch line): the same prompt fails the same
    way every time, so it is remembered like a refusal and the next runs send nothing, each
    saying why. Before, every run sent it again (online, twice: once more in JSON mode) and
    was blocked "model unavailable" for it, for ever."""
    llm_stub.set_handler(lambda req: StubResponse(status=400, body={"error": {
        "message": "This model's maximum context length is 8192 tokens", "type":
        "invalid_request_error", "code": "context_length_exceeded"}}))
    judging_app(app, llm_stub, batch)
    scope = Scope("too-long")
    _store(app, scope, every_phase=False)
    first = _run(app, scope, NOW, ONLY)
    assert _asked(llm_stub) == 1
    if not batch:
        assert "longer than the model's context window" in first["run"]["reason"]
    with app.uow() as uow:
        rows = uow.judgements.of_kinds(scope, [KIND])
    assert [r.verdict for r in rows] == ["too_long"]
    later = _run(app, scope, NOW + timedelta(days=1), ONLY)
    assert _asked(llm_stub) == 1  # not sent again
    assert later["consolidate"]["model_questions_cooling"] == 1


def _keep(req: StubRequest) -> Any:
    """Prune's and archive's review keeping every note it is shown."""
    return {"decisions": [{"id": n["id"], "decision": "keep", "reason": "still useful"}
                          for n in _notes_of(req)]}


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_notes_a_review_kept_are_not_asked_about_again_by_every_run(
        app: App, llm_stub: LLMStub, batch: bool) -> None:
    """Prune's review keeps the orphan, archive's keeps the important idle note: the next runs,
    on a store where nothing changed, ask nothing (the notes stay, the run succeeds, nothing
    counted as cooling); past DREAM_LLM_UNANSWERED_HOURS, or once a note changes, they are
    asked again. Before, every run asked about every kept note again, paying each time."""
    llm_stub.set_handler(_keep)
    judging_app(app, llm_stub, batch)
    scope = Scope("kept")
    _store(app, scope)
    phases = ["prune", "archive"]
    first = _run(app, scope, NOW, phases)
    assert {p: first[p].get("model_calls_started") for p in phases} == {"prune": 1, "archive": 1}
    asked = _asked(llm_stub)
    second = _run(app, scope, NOW + timedelta(days=1), phases)
    assert _asked(llm_stub) == asked  # nothing paid for again
    assert second["run"]["status"] == "succeeded", second["run"]
    assert not any(second[p].get("model_questions_cooling") for p in phases)
    with app.uow() as uow:
        active = {n.id for n in uow.notes.load_scope(scope).notes}
    assert {f"{scope.agent_id}-orphan", f"{scope.agent_id}-old"} <= active
    _run(app, scope, NOW + timedelta(days=8, minutes=1), phases)
    assert _asked(llm_stub) == asked + 2

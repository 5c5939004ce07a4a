"""A model that refuses every question (the API's ``message.refusal``, no content): no
malformed reply, so not `model_unusable`, but no verdict either, and the phase judged nothing.
Before, a refusal was counted nowhere: the run ended `succeeded`, exit 0, with no reason and
no flag, online (each item invalid) and in a provider batch (each item deferred). Through the
real openai client against the local HTTP stub."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.llm.test_openai_batch import TEA_NOTES, _refused, _store, answer
from tests.llm.test_unanswered import judging_app
from tests.phases.contradictions.test_service import phase_step, run_phase, with_stub
from tests.runs.test_outcome_blocked import dream
from tests.runs.test_outcome_rejected import ENV, PARTIAL, UNITS, _import_dark_mode, _units
from tests.support.factories import DARK_MODE_NOTES, NOW
from tests.support.llm_stub import LLMStub, StubRequest
from worker.app import App
from worker.domain.types import Scope
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import service
from worker.runs.outcome import PhaseOutcome, RunFacts, decide_outcome

REFUSED = "model refused in the {} phase: {n} of {n} replies were refusals"


def _consolidate_step(app: App, run_id: str) -> dict[str, Any]:
    shown = json.loads(dream(app, "runs", "show", run_id, "--json").stdout)
    return next(s for s in shown["steps"] if s["phase"] == "consolidate")


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_a_model_that_refuses_every_question_makes_the_run_partial(
        app: App, llm_stub: LLMStub, batch: bool) -> None:
    llm_stub.set_handler(lambda req: _refused())
    _import_dark_mode(app)
    mode = {"DREAM_LLM_BATCH": "true", "DREAM_LLM_BATCH_POLL": "0.05"} if batch else {}
    dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", "--phase", "consolidate",
          code=PARTIAL, **ENV, **mode, DREAM_LLM_BASE_URL=llm_stub.url)

    [listed] = json.loads(dream(app, "runs", "list", "--json").stdout)
    assert listed["status"] == "partial", listed
    assert listed["totals"]["flags"] == ["model_partial", "model_refused"]
    step = _consolidate_step(app, listed["id"])
    asked = step["output"]["model_calls_started"]
    assert asked >= 1 and step["output"]["model_replies_refused"] == asked
    assert step["output"]["model_replies_malformed"] == 0  # no advice to use a JSON model
    reason = listed["status_reason"]
    assert reason.startswith(REFUSED.format("consolidate", n=asked)), reason
    assert "what it was to judge is left as it was" in reason
    assert "not JSON" not in reason and "can't help" not in reason and "dark" not in reason
    assert reason in dream(app, "runs", "show", listed["id"]).stdout
    verdict = "clusters_deferred" if batch else "clusters_invalid"
    assert step["output"][verdict] == asked
    with app.uow() as uow:
        assert uow.notes.count_by_status(Scope("agent-1", "u1")) == {
            "active": len(DARK_MODE_NOTES)}


def test_a_refusal_among_usable_replies_is_only_counted(app: App, llm_stub: LLMStub) -> None:
    """One cluster refused, the other fused: the phase judged, the run is `succeeded` as
    before, and the refusal is counted on the phase's step."""
    def handle(req: StubRequest) -> Any:
        if "green tea" in req.user:
            return _refused()
        return answer(req)

    llm_stub.set_handler(handle)
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    scope = Scope("mixed")
    _store(app, scope, clusters=(DARK_MODE_NOTES, TEA_NOTES), every_phase=False)
    run_id = service.create_run(app, scope, force=True, phases=["consolidate"], clock=NOW)
    assert run_id is not None
    service.execute_run(app, run_id)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
    assert (run.status, run.status_reason) == ("succeeded", None)
    step = _consolidate_step(app, run_id)
    assert step["output"]["model_replies_refused"] == 1
    assert (step["output"]["clusters_merged"], step["output"]["clusters_invalid"]) == (1, 1)


def test_contradictions_whose_every_reply_is_a_refusal_make_the_run_partial(
        app: App, llm_stub: LLMStub) -> None:
    with_stub(app, llm_stub)
    llm_stub.set_handler(lambda req: _refused())
    _units(app)
    run_id = run_phase(app, UNITS)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        assert uow.notes.count_by_status(UNITS) == {"active": 2}
    replies = len(llm_stub.chat_requests())
    assert run.status == "partial"
    assert (run.totals or {})["flags"] == ["model_partial", "model_refused"]
    assert (run.status_reason or "").startswith(
        REFUSED.format("contradictions", n=replies)), run.status_reason
    assert phase_step(app, run_id)["output"]["model_replies_refused"] == replies


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_every_judge_refusing_names_each_phase(app: App, llm_stub: LLMStub, batch: bool) -> None:
    """Every phase that asks a model (consolidate, contradictions, prune's and archive's
    reviews), online and as provider batches: each one that asked is named."""
    llm_stub.set_handler(lambda req: _refused())
    judging_app(app, llm_stub, batch)
    scope = Scope("every-judge")
    _store(app, scope)
    run_id = service.create_run(app, scope, force=True, clock=NOW)
    assert run_id is not None
    service.execute_run(app, run_id)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        parents = [s for s in uow.runs.steps(run_id) if s.parent_id is None]
    asked = [s.phase for s in parents if (s.output or {}).get("model_calls_started")]
    assert set(asked) == {"consolidate", "contradictions", "prune", "archive"}, asked
    assert run.status == "partial", run.status_reason
    for phase in asked:
        assert f"model refused in the {phase} phase" in (run.status_reason or "")


def test_a_phase_of_refusals_and_other_unusable_replies_says_each_count() -> None:
    """The reason of a phase none of whose replies was usable, some refused: the refusals
    first, then what its checks rejected and what was no JSON of the schema."""
    facts = RunFacts(phases={"consolidate": PhaseOutcome.SUCCEEDED}, model_calls=6,
                     model_replies_malformed=1, phases_unusable=["consolidate"],
                     phases_rejected={"consolidate": (2, 6)},
                     phases_refused={"consolidate": (3, 6)})
    outcome = decide_outcome(facts)
    assert (outcome.status, outcome.flags) == ("partial", ["model_partial", "model_refused"])
    assert outcome.reason is not None and outcome.reason.startswith(
        "model refused in the consolidate phase: 3 of 6 replies were refusals (a refusal is no "
        "verdict; its steps' errors say which), 2 rejected by its checks, 1 not JSON of the "
        "asked schema; what it was to judge is left as it was")

"""What a run's totals say of its provider batches across attempts and after it ended: only the
latest attempt's steps state its guard trips and open candidates; the batch calls an
interrupted attempt left waiting read handed over (a later attempt settled them) or given up
(the run stopped for good: nobody read them); and what the provider billed for a batch that
its phase never charged (found by the release of a run stopped for good, or by a later retry
of a release) is charged to the run that sent it, once. Through the real `openai` client
against the local stub's files and batches endpoints (tests/support/llm_stub_batches.py)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, TOKENS, auth
from tests.llm.test_openai_batch import _store
from tests.runs.test_batch_ends import _end, _interrupt, _phase_steps, _totals
from tests.runs.test_batches import SCOPE, _cli, _resume, _waiting_run, batch_mode
from tests.support.llm_stub import LLMStub
from worker.api import create_api
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import RunStatus
from worker.phases.consolidate.service import open_candidates, unmerged_clusters
from worker.runs import service
from worker.runs.batches import retry_incomplete_releases
from worker.safety.guard import GUARD_STEP

OLD_TRIP = "blast-radius guard of an interrupted attempt: 4 of 5 active notes"


@pytest.fixture
def stub_app(sqlite_app: App, llm_stub: LLMStub) -> App:
    return batch_mode(sqlite_app, llm_stub)


def _child(app: App, run_id: str, name: str, output: dict[str, Any]) -> None:
    """A child step the interrupted attempt's consolidate step committed before it waited."""
    with app.uow() as uow:
        (old,) = [s for s in uow.runs.steps(run_id) if s.parent_id is None
                  and s.phase == "consolidate" and s.status == "interrupted"]
        uow.runs.add_step({
            "run_id": run_id, "parent_id": old.id, "scope_key": SCOPE.key,
            "phase": "consolidate", "name": name, "seq": 9, "status": "skipped",
            "input": {}, "output": output, "error": None, "prompt_name": None,
            "template_hash": None, "model": None, "tokens_in": 0, "tokens_out": 0,
            "started_at": old.started_at, "finished_at": old.started_at, "duration_ms": None})
        uow.commit()


@pytest.mark.parametrize("finish", ["completed", "expired"])
def test_an_interrupted_attempts_guard_trip_and_open_clusters_are_not_the_runs(
        stub_app: App, llm_stub: LLMStub, finish: str) -> None:
    """The interrupted attempt's consolidate step holds a guard trip and a cluster left open
    (committed before it waited); the attempt that resumes the run judges the scope again and
    settles the batch. The run's guard reasons and open candidates are the latest attempt's:
    answered, it succeeds with none open; expired, its reason is the batch's expiry. Before,
    the old trip blocked the run ("blast-radius guard ...") and the old open cluster was
    counted in its open candidates, listed by `open_candidates` and handed to contradictions."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    _interrupt(stub_app, run_id)
    _child(stub_app, run_id, GUARD_STEP, {"reason": OLD_TRIP, "guard": True})
    old_open = ["batched-c0-0", "batched-c0-1"]
    _child(stub_app, run_id, "cluster 9", {"verdict": "open", "note_ids": old_open,
                                           "reason": "the rule judge left it open"})
    llm_stub.batches.polls, llm_stub.batches.finish_as = 0, finish
    expected = RunStatus.SUCCEEDED if finish == "completed" else RunStatus.BLOCKED
    assert service.execute_run(stub_app, run_id) == expected.value
    _, reason, _ = _end(stub_app, run_id)
    assert "guard" not in reason, reason
    assert _totals(stub_app, run_id)["open_candidates"] == 0
    assert open_candidates(stub_app, SCOPE) == []
    with stub_app.uow() as uow:
        assert old_open not in unmerged_clusters(uow, run_id)
    if finish == "expired":
        assert "expired: the provider's 24 h completion window" in reason


def _show(app: App, llm_stub: LLMStub, run_id: str) -> str:
    out = _cli(app, llm_stub, "runs", "show", run_id)
    assert out.exit_code == 0, out.output
    return str(out.output)


def _api_and_dashboard(app: App, run_id: str) -> tuple[dict[str, Any], str]:
    app.settings.api_tokens = TOKENS
    with TestClient(create_api(app)) as client:
        r = client.get(f"/api/runs/{run_id}", headers=auth(ADMIN))
        assert r.status_code == 200, r.text
        page = client.get(f"/dashboard/runs/{run_id}", headers=auth(ADMIN))
        assert page.status_code == 200, page.text
    return dict(r.json()["totals"]), page.text


@pytest.mark.parametrize("interrupted", [False, True])
def test_a_run_stopped_for_good_gives_its_batch_calls_up_and_is_charged_what_they_billed(
        stub_app: App, llm_stub: LLMStub, interrupted: bool) -> None:
    """A run waits on its batch (and, ``interrupted``, its lease lapsed and the gate retried
    it); the batch answers at the provider, and the operator cancels the run before anyone
    reads it. The call was given up, not handed over: its step, the run's totals, `dream runs
    show`, the API and the dashboard say so; and what the provider billed for the answer
    nobody reads (11 in, 7 out) is the run's: its tokens and the phase's usage (/metrics), once,
    however often the release is recorded. Before, the step read "handed over", the run's
    totals were empty and the billed tokens were charged to nobody."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    if interrupted:
        _interrupt(stub_app, run_id)
    llm_stub.batches.polls = 0  # answered at the provider, not read
    out = _cli(stub_app, llm_stub, "runs", "cancel", run_id)
    assert out.exit_code == 0, out.output
    _, _, steps = _end(stub_app, run_id)
    old = _phase_steps(steps)["interrupted"]
    assert "model_calls_handed_over" not in old or interrupted
    totals = _totals(stub_app, run_id)
    assert (totals["model_calls"], totals["tokens_in"], totals["tokens_out"],
            totals["model_tokens"]) == (1, 11, 7, 18)
    assert totals["model_calls_given_up"] == 1 and "model_calls_handed_over" not in totals
    assert totals["tokens_billed_late"] == {"tokens_in": 11, "tokens_out": 7}
    if not interrupted:
        assert (old["model_calls_given_up"], old["model_calls_failed"]) == (1, 0)
    from worker.runs.run_usage import charge_late

    with stub_app.uow() as uow:
        usage = uow.run_history.step_usage(SCOPE)["consolidate"]
        assert (usage["calls"], usage["tokens_in"], usage["tokens_out"]) == (1, 11, 7)
        (batch,) = [s for s in steps if s.name.startswith("llm batch ")]
        batch_id = str(batch.input["batch_id"])
        record = dict(batch.output["release"])
        uow.batches.record_release(run_id, batch_id, {**record, "billed_in": 0,
                                                      "billed_out": 0})
        uow.batches.record_release(run_id, batch_id, record)
        charge_late(uow, [run_id])
        uow.commit()
    assert _totals(stub_app, run_id) == totals  # recorded again: charged once
    shown = _show(stub_app, llm_stub, run_id)
    assert "model calls 1  tokens 11/7" in shown
    assert "batch calls: 1 given up" in shown and "handed over to" not in shown
    assert "tokens billed after their phase 11/7" in shown
    api, page = _api_and_dashboard(stub_app, run_id)
    assert api["model_calls_given_up"] == 1 and api["tokens_in"] == 11
    assert "batch calls: 1 given up" in page and "model calls 1" in page


def test_handed_over_calls_a_later_attempt_settled_read_handed_over(
        stub_app: App, llm_stub: LLMStub) -> None:
    """A call handed over by an interrupted attempt and answered in the attempt that resumed
    the run reads handed over in the run's totals and `dream runs show`, counted once."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    _interrupt(stub_app, run_id)
    llm_stub.batches.polls = 0
    assert service.execute_run(stub_app, run_id) == RunStatus.SUCCEEDED.value
    totals = _totals(stub_app, run_id)
    assert (totals["model_calls"], totals["model_calls_handed_over"]) == (1, 1)
    assert "model_calls_given_up" not in totals and "tokens_billed_late" not in totals
    shown = _show(stub_app, llm_stub, run_id)
    assert "batch calls: 1 handed over to the attempt that resumed the run" in shown
    assert "given up" not in shown


def test_a_batch_billed_after_its_run_ended_is_charged_to_that_run(
        stub_app: App, llm_stub: LLMStub) -> None:
    """The run's batch cannot be checked (the provider answers 500 once it is submitted), so
    its cluster is deferred and its release fails; the run ends blocked with no tokens. The
    provider then finishes the batch; the gate's retry of the release finds its output billed
    (11 in, 7 out): the ended run's totals take it, said as billed after its phase. Before,
    the run's tokens stayed 0/0."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    llm_stub.batches.refuse_status = 500
    assert _resume(stub_app, run_id) == RunStatus.BLOCKED.value
    before = _totals(stub_app, run_id)
    assert (before["model_calls"], before["tokens_in"], before["tokens_out"]) == (1, 0, 0)
    llm_stub.batches.refuse_status, llm_stub.batches.polls = None, 0
    retried = retry_incomplete_releases(stub_app, utcnow())
    assert (retried.tried, retried.released) == (1, 1)
    after = _totals(stub_app, run_id)
    assert (after["model_calls"], after["tokens_in"], after["tokens_out"],
            after["model_tokens"]) == (1, 11, 7, 18)
    assert after["tokens_billed_late"] == {"tokens_in": 11, "tokens_out": 7}
    assert {k: v for k, v in after.items() if not k.startswith(("tokens", "model_tokens"))} == {
        k: v for k, v in before.items() if not k.startswith(("tokens", "model_tokens"))}
    assert "tokens billed after their phase 11/7" in _show(stub_app, llm_stub, run_id)


def test_a_run_whose_deliveries_died_gives_its_batch_calls_up(stub_app: App) -> None:
    """A run waits on its batch; every delivery of its next task dies until the run is failed.
    Nobody will read that batch (it is released): its waiting step's call reads given up, as a
    cancel or the gate check's give-up records it, and the run's totals say so. Before, the
    step read the call handed over to an attempt that never came."""
    from worker.runs.deliveries import begin_delivery

    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    for _ in range(stub_app.settings.max_attempts):
        assert not begin_delivery(stub_app, run_id, "dream.run", "m-1").gave_up
    assert begin_delivery(stub_app, run_id, "dream.run", "m-1").gave_up
    status, _, steps = _end(stub_app, run_id)
    assert status == RunStatus.FAILED.value
    old = _phase_steps(steps)["interrupted"]
    assert (old.get("model_calls_given_up"), old.get("model_calls_handed_over")) == (1, None)
    totals = _totals(stub_app, run_id)
    assert (totals["model_calls"], totals["model_calls_given_up"]) == (1, 1)

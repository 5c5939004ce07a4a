"""A run stopped for good while a provider batch works for it (cancelled by the operator or
the API, failed by recovery, stopped by an erasure, out of time in-process) releases the batch:
cancelled at the provider, its input and output files deleted, what was done recorded on the
batch's step. A provider error there never holds the stop back: it is recorded, said in one
line with what to do, and `dream runs cancel` tries again. Through the real `openai` client
against the local stub's files and batches endpoints (tests/support/llm_stub_batches.py)."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import update
from structlog.testing import capture_logs

from tests.llm.test_openai_batch import _store, answer
from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import RunStatus, Scope
from worker.llm.batch import reschedule_while_pending
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import service
from worker.runs.batches import ReleaseRetries, retry_incomplete_releases
from worker.runs.scheduling import GateResult, recover_runs
from worker.safety.erase import erase
from worker.store.models import DreamRunRow, RunStepRow

SCOPE = Scope("batched")


def batch_mode(app: App, llm_stub: LLMStub) -> App:
    """Batch mode against the stub, whose batches stay in progress until a test says."""
    llm_stub.set_handler(answer)
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    app.settings.llm_batch = True
    app.settings.llm_batch_poll = 0.05
    llm_stub.batches.polls = 10_000
    return app


@pytest.fixture
def stub_app(sqlite_app: App, llm_stub: LLMStub) -> App:
    return batch_mode(sqlite_app, llm_stub)


def _waiting_run(app: App, scope: Scope = SCOPE) -> str:
    """A run whose consolidation waits on its provider batch, as a Celery run task leaves it."""
    run_id = service.create_run(app, scope, force=True, phases=["consolidate"], clock=NOW)
    assert run_id is not None
    with reschedule_while_pending():
        result = service.execute_run_task(app, run_id)
    assert result.retry_after is not None  # waiting, the run still running
    return run_id


def _release(app: App, run_id: str) -> dict[str, Any] | None:
    """The release recorded on the run's batch step."""
    with app.uow() as uow:
        (step,) = [s for s in uow.runs.steps(run_id) if s.name.startswith("llm batch ")]
    return (step.output or {}).get("release")


def _status(app: App, run_id: str) -> str:
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        return run.status


def _cli(app: App, stub: LLMStub, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env={
        "DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LLM_PROVIDER": "openai",
        "DREAM_LLM_BASE_URL": stub.url, "DREAM_LLM_API_KEY": "k",
        "DREAM_LLM_MAX_RETRIES": "0", "DREAM_LOG_LEVEL": "WARNING"})


def test_cancelling_a_run_cancels_its_batch_and_deletes_its_files(
        stub_app: App, llm_stub: LLMStub) -> None:
    """`dream runs cancel` on a run waiting on its batch: the run is cancelled, the batch is
    cancelled at the provider (it would bill on for answers nobody reads), its input file is
    deleted, and the batch step records both; the command says so in a line."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    (batch_id,) = llm_stub.batches.batches
    assert llm_stub.batches.files  # the uploaded prompts, at the provider
    out = _cli(stub_app, llm_stub, "runs", "cancel", run_id)
    assert out.exit_code == 0, out.output
    assert f"provider batch {batch_id}: cancelled, 1 file(s) deleted" in out.output
    assert _status(stub_app, run_id) == RunStatus.CANCELLED.value
    assert llm_stub.batches.cancelled == [batch_id] and llm_stub.batches.files == {}
    release = _release(stub_app, run_id)
    assert release is not None
    assert (release["cancelled"], release["status"], release["problem"]) == (
        True, "cancelled", None)


def test_a_provider_error_while_releasing_does_not_block_the_cancel(
        stub_app: App, llm_stub: LLMStub) -> None:
    """The provider answers 500 to everything: the run is cancelled all the same, the step
    records the problem, the command exits 0 with one warning line naming the batch and what
    to do; cancelling again once the provider answers releases it."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    (batch_id,) = llm_stub.batches.batches
    llm_stub.batches.refuse_status = 500
    out = _cli(stub_app, llm_stub, "runs", "cancel", run_id)
    assert out.exit_code == 0, out.output
    assert _status(stub_app, run_id) == RunStatus.CANCELLED.value
    (warning,) = out.stderr.strip().splitlines()
    assert warning.startswith(f"warning: provider batch {batch_id} of run {run_id} not "
                              "released: model endpoint answered 500")
    assert f"`dream runs cancel {run_id}` tries again" in warning
    release = _release(stub_app, run_id)
    assert release is not None and release["problem"] and not release["cancelled"]
    assert llm_stub.batches.batches[batch_id].status == "in_progress"
    llm_stub.batches.refuse_status = None
    again = _cli(stub_app, llm_stub, "runs", "cancel", run_id)
    assert again.exit_code == 0, again.output
    assert "was cancelled already" in again.output and "cancelled, 1 file(s)" in again.output
    assert llm_stub.batches.cancelled == [batch_id] and llm_stub.batches.files == {}
    nothing_left = _cli(stub_app, llm_stub, "runs", "cancel", run_id)
    assert nothing_left.exit_code != 0 and "only queued, interrupted or running" in (
        nothing_left.stderr)


def test_a_batch_still_cancelling_leaves_its_output_for_the_next_release(
        stub_app: App, llm_stub: LLMStub) -> None:
    """A provider that takes a while to cancel (OpenAI: minutes) writes what it did not answer
    after the cancel: the first release says so and the API answers it; the next cancel deletes
    the file written since."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    llm_stub.batches.cancel_to = "cancelling"
    done = service.cancel_run(stub_app, run_id, "operator stop")
    (first,) = done.batches
    assert first.release.cancelled and "still cancelling" in str(first.release.problem)
    again = service.cancel_run(stub_app, run_id, "operator stop")
    (second,) = again.batches
    assert again.was == RunStatus.CANCELLED.value and second.release.complete
    assert second.release.deleted and llm_stub.batches.files == {}


@pytest.mark.parametrize("lost", ["lease expired", "never claimed again"])
def test_a_run_recovery_fails_releases_its_batch(
        stub_app: App, llm_stub: LLMStub, lost: str) -> None:
    """The gate check gives a run up (its lease lapsed a last time, or, interrupted, nobody
    claimed it again): the failure is committed and its batch is cancelled, its file deleted."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    long_ago = utcnow() - timedelta(days=2)
    values: dict[str, Any] = {"attempts": stub_app.settings.max_attempts,
                              "lease_expires_at": long_ago}
    if lost == "never claimed again":
        values = {"status": RunStatus.INTERRUPTED.value, "enqueued_at": long_ago,
                  "requeues": stub_app.settings.max_attempts}
    with stub_app.uow() as uow:
        uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == run_id).values(**values))
        uow.commit()
    result = GateResult([], {}, [], [])
    recover_runs(stub_app, utcnow(), result)
    assert result.failed == [run_id] and _status(stub_app, run_id) == RunStatus.FAILED.value
    assert llm_stub.batches.cancelled == list(llm_stub.batches.batches)
    assert llm_stub.batches.files == {}
    release = _release(stub_app, run_id)
    assert release is not None and release["cancelled"]


def test_erasing_a_user_releases_the_batches_quoting_their_notes(
        stub_app: App, llm_stub: LLMStub) -> None:
    """The user's run is cancelled by their erasure; its batch's input file holds their notes'
    text at the provider: it is cancelled and deleted, and the erase answer says so."""
    scope = Scope("agent-e", "erin")
    add_notes(stub_app, *({"agent_id": scope.agent_id, "user_id": "erin", "content": text}
                          for text in DARK_MODE_NOTES))
    run_id = _waiting_run(stub_app, scope)
    result = erase(stub_app, user_id="erin")
    assert result.cancelled_runs == [run_id]
    (done,) = result.batches
    assert done.release.complete and done.release.cancelled
    assert llm_stub.batches.files == {}
    assert not any(DARK_MODE_NOTES[0].encode() in data
                   for data in llm_stub.batches.files.values())


def test_a_batch_out_of_time_in_process_is_cancelled_not_left_running(
        stub_app: App, llm_stub: LLMStub) -> None:
    """In-process a phase defers what its batch did not answer within DREAM_LLM_BATCH_WAIT and
    asks it again next run, in a new batch: the old one is cancelled and deleted there and
    then, recorded on its step, so a later cancel of the run has nothing to release."""
    _store(stub_app, SCOPE, every_phase=False)
    stub_app.settings.llm_batch_wait = 0.2
    run_id = service.create_run(stub_app, SCOPE, force=True, phases=["consolidate"], clock=NOW)
    assert run_id is not None
    service.execute_run(stub_app, run_id)
    assert llm_stub.batches.cancelled == list(llm_stub.batches.batches)
    assert llm_stub.batches.files == {}
    release = _release(stub_app, run_id)
    assert release is not None and release["cancelled"] and release["problem"] is None
    with stub_app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status == RunStatus.BLOCKED.value
        # The endpoint answered: what to do is wait longer, not check DREAM_LLM_BASE_URL.
        assert "not finished within DREAM_LLM_BATCH_WAIT (0.2s)" in str(run.status_reason)
        assert "set a longer DREAM_LLM_BATCH_WAIT" in str(run.status_reason)
        assert "DREAM_LLM_BASE_URL" not in str(run.status_reason)


def test_a_run_failing_with_its_batch_out_releases_it(stub_app: App, llm_stub: LLMStub) -> None:
    """Consolidation submits its batch, then fails before it reads it: the run (consolidation
    alone) ends failed, and nobody would ever read that batch: it is released as the run is
    finalized."""
    from worker.llm.batch import BatchPending
    from worker.phases import phase_registry

    real = phase_registry()

    def submit_then_fail(ctx: Any, step_id: str) -> Any:
        with reschedule_while_pending(), pytest.raises(BatchPending):
            real["consolidate"](ctx, step_id)
        raise RuntimeError("the apply broke")

    _store(stub_app, SCOPE, every_phase=False)
    run_id = service.create_run(stub_app, SCOPE, force=True, phases=["consolidate"], clock=NOW)
    assert run_id is not None
    status = service.execute_run(stub_app, run_id, {**real, "consolidate": submit_then_fail})
    assert status == RunStatus.FAILED.value
    assert llm_stub.batches.cancelled == list(llm_stub.batches.batches) != []
    assert llm_stub.batches.files == {}
    release = _release(stub_app, run_id)
    assert release is not None and release["cancelled"]


def _retried(logs: list[MutableMapping[str, Any]]) -> MutableMapping[str, Any]:
    (event,) = [e for e in logs if e["event"] == "gate.batch_releases_retried"]
    return event


def test_the_gate_check_deletes_the_output_a_cancelling_batch_wrote_later(
        stub_app: App, llm_stub: LLMStub) -> None:
    """A batch still cancelling when its run was cancelled writes its output file once the
    provider is done: the next gate check releases it again, deletes that file and records a
    complete release (its first release's time kept), logging counts only; the check after it
    has nothing to retry and calls no provider."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    (batch_id,) = llm_stub.batches.batches
    llm_stub.batches.cancel_to = "cancelling"
    service.cancel_run(stub_app, run_id, "operator stop")
    first = _release(stub_app, run_id)
    assert first is not None and "still cancelling" in first["problem"]
    with capture_logs() as logs:
        recover_runs(stub_app, utcnow(), GateResult([], {}, [], []))
    assert _retried(logs) == {"event": "gate.batch_releases_retried", "tried": 1,
                              "released": 1, "incomplete": 0, "given_up": 0,
                              "log_level": "info"}
    assert llm_stub.batches.files == {}  # the input and the error file written since
    release = _release(stub_app, run_id)
    assert release is not None and release["problem"] is None and release["deleted"]
    assert release["first_at"] == first["at"] and release["status"] == "cancelled"
    looks = llm_stub.batches.batches[batch_id].retrieves
    with capture_logs() as logs:
        recover_runs(stub_app, utcnow(), GateResult([], {}, [], []))
    assert not [e for e in logs if e["event"] == "gate.batch_releases_retried"]
    assert llm_stub.batches.batches[batch_id].retrieves == looks


def test_a_gate_check_retries_a_bounded_number_oldest_first(
        stub_app: App, llm_stub: LLMStub) -> None:
    """Two runs cancelled while the provider answered 500: both releases are incomplete. A
    check allowed one batch releases the older one only; the next check the other."""
    runs = []
    for scope in (Scope("batched-a"), Scope("batched-b")):
        _store(stub_app, scope, every_phase=False)
        runs.append(_waiting_run(stub_app, scope))
    llm_stub.batches.refuse_status = 500
    for run_id in runs:
        service.cancel_run(stub_app, run_id, "operator stop")
    llm_stub.batches.refuse_status = None
    assert retry_incomplete_releases(stub_app, utcnow(), limit=1).released == 1
    assert [(_release(stub_app, r) or {})["cancelled"] for r in runs] == [True, False]
    assert retry_incomplete_releases(stub_app, utcnow(), limit=1).released == 1
    assert llm_stub.batches.cancelled == list(llm_stub.batches.batches)
    assert llm_stub.batches.files == {}


def test_a_release_incomplete_for_a_day_is_given_up_and_recorded(
        stub_app: App, llm_stub: LLMStub) -> None:
    """A provider that keeps refusing: a day after the first release the gate check stops
    trying (no call to the provider), records when on the release, warns with the counts, and
    never selects it again; `dream runs cancel` still may."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    (batch_id,) = llm_stub.batches.batches
    llm_stub.batches.refuse_status = 500
    service.cancel_run(stub_app, run_id, "operator stop")
    later = utcnow() + timedelta(days=1, minutes=1)
    looks = llm_stub.batches.batches[batch_id].retrieves
    with capture_logs() as logs:
        recover_runs(stub_app, later, GateResult([], {}, [], []))
    assert _retried(logs) == {"event": "gate.batch_releases_retried", "tried": 0,
                              "released": 0, "incomplete": 0, "given_up": 1,
                              "log_level": "warning"}
    assert llm_stub.batches.batches[batch_id].retrieves == looks
    release = _release(stub_app, run_id)
    assert release is not None and release["given_up"] == later.isoformat()
    assert "500" in release["problem"]
    assert retry_incomplete_releases(stub_app, later) == ReleaseRetries()  # nothing selected
    llm_stub.batches.refuse_status = None
    (again,) = service.cancel_run(stub_app, run_id, "operator stop").batches
    assert again.release.complete and llm_stub.batches.files == {}


def test_a_batch_past_the_provider_window_is_given_up_not_waited_on_for_ever(
        stub_app: App, llm_stub: LLMStub) -> None:
    """A provider that never finishes a batch (never says expired; one stuck finalizing):
    under Celery each look re-scheduled the phase and renewed the run's lease, so the run held
    its scope for ever. Submitted 25 h ago or more, the batch is given up at the next look:
    released (cancelled, its files deleted), its cluster deferred with the reason, nothing
    applied, the run finished."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    (batch_id,) = llm_stub.batches.batches
    with stub_app.uow() as uow:  # submitted a day and a bit ago
        uow.session.execute(update(RunStepRow).where(
            RunStepRow.run_id == run_id, RunStepRow.name == f"llm batch {batch_id}").values(
            started_at=utcnow() - timedelta(hours=25, minutes=1)))
        uow.commit()
    with reschedule_while_pending(), capture_logs() as logs:
        result = service.execute_run_task(stub_app, run_id)
    assert result.retry_after is None  # not waiting any more
    assert _status(stub_app, run_id) not in ("running", "queued")
    assert llm_stub.batches.cancelled == [batch_id] and llm_stub.batches.files == {}
    release = _release(stub_app, run_id)
    assert release is not None and release["cancelled"]
    with stub_app.uow() as uow:
        (cluster,) = [s for s in uow.runs.steps(run_id) if s.name.startswith("cluster")]
        active = uow.notes.load_scope(SCOPE).notes
    output = cluster.output or {}
    assert output["verdict"] == "deferred"
    assert output["reason"] == (f"provider batch {batch_id} given up (still in_progress 25 h "
                                "after it was submitted, past the provider's 24 h window); "
                                "deferred to the next run")
    assert sorted(n.content for n in active) == sorted(DARK_MODE_NOTES)
    assert [e["batch_id"] for e in logs if e["event"] == "llm.batch_given_up"] == [batch_id]


def test_a_batch_within_the_provider_window_is_still_waited_on(
        stub_app: App, llm_stub: LLMStub) -> None:
    """The control: 23 h after it was submitted the batch is still waited on."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    with stub_app.uow() as uow:
        uow.session.execute(update(RunStepRow).where(
            RunStepRow.run_id == run_id, RunStepRow.name.startswith("llm batch ")).values(
            started_at=utcnow() - timedelta(hours=23)))
        uow.commit()
    with reschedule_while_pending():
        assert service.execute_run_task(stub_app, run_id).retry_after is not None
    assert llm_stub.batches.cancelled == [] and _status(stub_app, run_id) == "running"


def _resume(app: App, run_id: str) -> str:
    """Looks of the run's Celery run task until the run ends; its status."""
    for _ in range(40):
        with reschedule_while_pending():
            result = service.execute_run_task(app, run_id)
        if result.retry_after is None and not result.hand_off:
            return result.status
    raise AssertionError("the run never ended")


def test_a_batch_a_re_planned_phase_no_longer_asks_is_released(
        stub_app: App, llm_stub: LLMStub) -> None:
    """A host's keep_apart changes the cluster a waiting consolidation asked about: resumed,
    the phase re-plans and asks another question in a new batch. The first batch, whose
    answers nobody will read, is released (cancelled, its file of note text deleted), its step
    reads skipped with the release, and its question is no failed model call: the run, every
    question it still wanted answered, succeeds."""
    from worker.host.fusion import keep_apart

    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    (first,) = llm_stub.batches.batches
    keep_apart(stub_app, [f"{SCOPE.agent_id}-c0-0", f"{SCOPE.agent_id}-c0-1"],
               allowed_scope=SCOPE)
    llm_stub.batches.polls = 2
    assert _resume(stub_app, run_id) == RunStatus.SUCCEEDED.value
    assert len(llm_stub.batches.batches) == 2 and llm_stub.batches.cancelled == [first]
    assert llm_stub.batches.files == {}
    with stub_app.uow() as uow:
        steps = {s.name: s for s in uow.runs.steps(run_id)}
    old = steps[f"llm batch {first}"]
    assert old.status == "skipped" and (old.output or {})["release"]["cancelled"]
    (new,) = [s for n, s in steps.items() if n.startswith("llm batch ") and n != old.name]
    assert new.status == "succeeded" and "release" not in (new.output or {})
    assert (steps["consolidate"].output or {})["model_calls_failed"] == 0


def test_a_cancelled_waiting_phase_shows_why_it_ended_not_what_it_waited_on(
        stub_app: App, llm_stub: LLMStub) -> None:
    """`dream runs show` of a run cancelled while a phase waited on its batch: the phase says
    it was interrupted (not "waiting on batch ..."), the batch step reads skipped and says it
    was released."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    (batch_id,) = llm_stub.batches.batches
    assert _cli(stub_app, llm_stub, "runs", "cancel", run_id).exit_code == 0
    out = _cli(stub_app, llm_stub, "runs", "show", run_id)
    assert out.exit_code == 0, out.output
    (phase,) = [line for line in out.output.splitlines() if line.startswith("  consolidate ")]
    assert "— interrupted; the run was cancelled" in phase and "waiting on" not in phase
    (batch,) = [line for line in out.output.splitlines() if f"llm batch {batch_id}" in line]
    assert " skipped " in batch and "released" in batch and "cancelled, 1 file(s)" in batch


def _submitted_unknown(app: App, stub: LLMStub, run_id: str, key: str) -> str:
    """A batch the provider made with ``key`` whose create answer the run never got (its
    process died before recording it): the submission written ahead on the run's consolidate
    step, open, and the batch at the stub; the batch's id."""
    line = {"custom_id": "q-lost", "method": "POST", "url": "/v1/chat/completions", "body": {}}
    input_id = stub.batches._store(json.dumps(line).encode() + b"\n", "batch", f"{key}.jsonl")
    _, body = stub.batches._create({"input_file_id": input_id, "completion_window": "24h",
                                    "endpoint": "/v1/chat/completions",
                                    "metadata": {"source": "dream-worker", "submission": key}})
    with app.uow() as uow:
        (batch_step,) = [s for s in uow.runs.steps(run_id) if s.name.startswith("llm batch ")]
        uow.runs.add_step({
            "run_id": run_id, "parent_id": batch_step.parent_id, "scope_key": batch_step.scope_key,
            "phase": "consolidate", "name": f"llm batch {key}", "seq": 0, "status": "succeeded",
            "input": {"submission": key, "custom_ids": ["q-lost"]}, "output": {"submitting": 1},
            "error": None, "prompt_name": None, "template_hash": None, "model": None,
            "tokens_in": 0, "tokens_out": 0, "started_at": utcnow(), "finished_at": utcnow(),
            "duration_ms": None})
        uow.commit()
    return str(body["id"])


def test_cancelling_a_run_releases_the_batch_it_never_learned_of(
        stub_app: App, llm_stub: LLMStub) -> None:
    """A run whose process died between the provider making a batch and recording it, then
    cancelled: before, that batch ran on unknown (billed, its file of note text kept) as the
    run only released the batches it had recorded. Now the submission written ahead is looked
    up by its key, the batch found is cancelled and its file deleted, recorded on the step;
    a batch another run made under another key is left alone."""
    _store(stub_app, SCOPE, every_phase=False)
    _store(stub_app, Scope("other-scope"), every_phase=False)
    run_id = _waiting_run(stub_app)
    (recorded,) = llm_stub.batches.batches
    lost = _submitted_unknown(stub_app, llm_stub, run_id, "dw-" + "c" * 32)
    other = _waiting_run(stub_app, Scope("other-scope"))
    (foreign,) = set(llm_stub.batches.batches) - {recorded, lost}
    out = _cli(stub_app, llm_stub, "runs", "cancel", run_id)
    assert out.exit_code == 0, out.output
    assert f"provider batch {lost}: cancelled, 1 file(s) deleted" in out.output
    assert sorted(llm_stub.batches.cancelled) == sorted([recorded, lost])
    assert llm_stub.batches.batches[foreign].input_file_id in llm_stub.batches.files
    with stub_app.uow() as uow:
        (step,) = [s for s in uow.runs.steps(run_id) if s.name == f"llm batch {lost}"]
    assert (step.input or {})["submission"] == "dw-" + "c" * 32 and step.status == "skipped"
    assert _status(stub_app, other) == RunStatus.RUNNING.value

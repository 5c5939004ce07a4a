"""A batch create or file upload whose answer was lost (the connection closed after the
provider carried it out): the batch is found again by the submission key the run wrote ahead
and sent in its metadata, and adopted (read and charged once, no second batch); an uploaded
file is found by its name and deleted. Nothing made under another key is touched. Through the
real `openai` client against the local stub (tests/support/llm_stub_batches.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.llm.test_batch import MemoryLedger, _ask, _batch_ctx
from tests.llm.test_fanout import Echo, _echo
from tests.llm.test_openai_batch import (
    _active,
    _consolidate_run,
    _store,
    _usage,
    stub_app,  # noqa: F401  (the fixture)
)
from tests.support.factories import DARK_MODE_NOTES
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.runs.scheduling import GateResult, recover_runs


def _batch_steps(app: App, run_id: str) -> list[Any]:
    with app.uow() as uow:
        return [s for s in uow.runs.steps(run_id) if s.name.startswith("llm batch ")]


def test_a_batch_whose_create_answer_was_lost_is_adopted_and_billed_once(
        stub_app: App, llm_stub: LLMStub) -> None:  # noqa: F811  (the fixture)
    """The provider made the batch and its answer never came: before, the cluster was deferred
    and the batch ran unknown to the run (billed, never charged, never released) while the next
    run submitted the same question again. Now the batch made with the run's key is found
    among the provider's batches and read like any: the cluster merges, one batch, one upload,
    and the run is charged what a run whose create was answered is charged."""
    stub_app.settings.llm_batch = True
    answered, lost = Scope("answered"), Scope("lost")
    _store(stub_app, answered, every_phase=False)
    _store(stub_app, lost, every_phase=False)
    answered_run, _ = _consolidate_run(stub_app, answered)
    batches_before = len(llm_stub.batches.batches)
    llm_stub.batches.lost_creates = 1
    run_id, clusters = _consolidate_run(stub_app, lost)
    assert [v for v, _ in clusters] == ["merge"]
    assert len(_active(stub_app, lost)) == 1
    assert len(llm_stub.batches.batches) == batches_before + 1  # no second batch
    assert len(llm_stub.batches.sent) == 2 * 2  # one upload and one output file per run
    assert _usage(stub_app, run_id) == _usage(stub_app, answered_run) != (0, 0)
    [step] = _batch_steps(stub_app, run_id)
    batch = llm_stub.batches.batches[step.input["batch_id"]]
    assert batch.metadata["submission"] == step.input["submission"]
    assert step.input["submission"].startswith("dw-") and "lost" not in step.input["submission"]
    assert llm_stub.batches.files == {}  # read, its files deleted
    assert any("/batches?" in p for p in llm_stub.batches.lists)


def test_a_lost_upload_answer_leaves_no_file_at_the_provider(
        stub_app: App, llm_stub: LLMStub) -> None:  # noqa: F811  (the fixture)
    """The provider stored the upload (every prompt: note text) and its answer never came:
    before, the file stayed at the provider for good. Now it is found by the name the run gave
    it and deleted (another key's file is not); the cluster is deferred with one line saying
    so, and no batch is made."""
    scope = Scope("lost-upload")
    _store(stub_app, scope, every_phase=False)
    stub_app.settings.llm_batch = True
    other = llm_stub.batches._store(b"{}\n", "batch", "dw-" + "e" * 32 + ".jsonl")
    llm_stub.batches.lost_uploads = 1
    run_id, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["deferred"]
    assert "1 file(s) it stored all the same deleted" in clusters[0][1], clusters[0][1]
    assert len(llm_stub.batches.sent) == 2 and list(llm_stub.batches.files) == [other]
    assert llm_stub.batches.batches == {}
    [step] = _batch_steps(stub_app, run_id)
    assert step.status == "skipped" and "batch_id" not in step.input
    assert len(_active(stub_app, scope)) == len(DARK_MODE_NOTES)
    _, clusters = _consolidate_run(stub_app, scope)  # the next run asks again
    assert [v for v, _ in clusters] == ["merge"]


class Crash(Exception):
    """The process dies between the provider's answer and the ledger's record."""


class CrashingLedger(MemoryLedger):
    def __init__(self) -> None:
        super().__init__()
        self.crashes = 1

    def record(self, batch_id: str, custom_ids: Any, submission: str = "") -> None:
        if self.crashes:
            self.crashes -= 1
            raise Crash
        super().record(batch_id, custom_ids, submission)


def _foreign(llm_stub: LLMStub) -> tuple[str, str]:
    """A batch another run (another scope) made under its own key, newer than the lost one,
    for the same prompt, and a file another run's lost upload left under its own name: their
    ids."""
    stub = llm_stub.batches
    line = {"custom_id": "other-1", "method": "POST", "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": "number 9"}]}}
    input_id = stub._store(json.dumps(line).encode() + b"\n", "batch",
                           "dw-" + "f" * 32 + ".jsonl")
    _, body = stub._create({"input_file_id": input_id, "endpoint": "/v1/chat/completions",
                            "completion_window": "24h",
                            "metadata": {"source": "dream-worker", "prompt": "consolidate",
                                         "submission": "dw-" + "f" * 32}})
    orphan = stub._store(b"{}\n", "batch", "dw-" + "e" * 32 + ".jsonl")
    return str(body["id"]), orphan


def test_a_batch_a_dead_process_never_recorded_is_adopted_and_nothing_else_touched(
        llm_stub: LLMStub) -> None:
    """The process died after the provider made the batch and before the run recorded it:
    before, the retried step submitted the same questions in a second batch (both billed, the
    first never read, charged or released). Now the submission written ahead is looked up by
    its key: the batch is adopted and its answers used, and the batch and file of another key
    (newer, same prompt) are neither adopted, cancelled, read nor deleted."""
    llm_stub.set_handler(_echo)
    ctx, ledger = _batch_ctx(llm_stub), CrashingLedger()
    with pytest.raises(Crash):
        _ask(ctx, 3, ledger)
    [mine] = list(llm_stub.batches.batches)
    foreign, orphan = _foreign(llm_stub)
    outcomes = _ask(ctx, 3, ledger)  # the retried step, with the same ledger
    assert [o.value.n for o in outcomes if isinstance(o.value, Echo)] == [0, 1, 2]
    assert [b for b, _ in ledger.batches] == [mine]
    assert set(llm_stub.batches.batches) == {mine, foreign}
    assert llm_stub.batches.batches[foreign].status in ("validating", "in_progress")
    assert llm_stub.batches.cancelled == []
    assert orphan in llm_stub.batches.files
    assert llm_stub.batches.batches[foreign].input_file_id in llm_stub.batches.files
    assert ctx.budget.tokens == 3 * (11 + 7)


def test_a_submission_that_cannot_be_looked_up_is_not_asked_again(llm_stub: LLMStub) -> None:
    """The create's answer was lost and the provider's list failed too: whether the batch
    exists is unknown, so its questions are deferred (not sent in a second batch) and the
    submission stays open; the next attempt that can look finds and adopts it."""
    llm_stub.set_handler(_echo)
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    llm_stub.batches.lost_creates, llm_stub.batches.refuse_list = 1, 503
    outcomes = _ask(ctx, 2, ledger)
    assert [o.status.value for o in outcomes] == ["error", "error"]
    assert "if the provider lists a batch with metadata submission=dw-" in outcomes[0].reason
    assert len(ledger.open_submissions()) == 1 and len(llm_stub.batches.batches) == 1
    outcomes = _ask(ctx, 2, ledger)  # the list still fails: nothing is sent again
    assert [o.status.value for o in outcomes] == ["deferred", "deferred"]
    assert len(llm_stub.batches.batches) == 1
    llm_stub.batches.refuse_list = None
    outcomes = _ask(ctx, 2, ledger)
    assert [o.value.n for o in outcomes if isinstance(o.value, Echo)] == [0, 1]
    assert len(llm_stub.batches.batches) == 1 and ledger.open_submissions() == []


def test_the_gate_check_finds_and_releases_the_batch_of_a_run_that_ended_without_it(
        stub_app: App, llm_stub: LLMStub) -> None:  # noqa: F811  (the fixture)
    """The create's answer was lost and the provider's list failed: the run deferred the
    cluster and ended, its submission open. Before, nothing looked again (no attempt of an
    ended run does) and the batch worked and billed at the provider for answers nobody would
    read, its files holding the prompts. Now the gate check looks it up, adopts it on its step
    and releases it (cancelled, files deleted, the run's usage charged late); the check after
    lists nothing."""
    stub_app.settings.llm_batch = True
    scope = Scope("ended")
    _store(stub_app, scope, every_phase=False)
    llm_stub.batches.polls = 10_000  # the batch stays in progress until cancelled
    llm_stub.batches.lost_creates, llm_stub.batches.refuse_list = 1, 503
    run_id, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["deferred"]
    (batch_id,) = llm_stub.batches.batches
    assert llm_stub.batches.cancelled == [] and llm_stub.batches.files != {}
    llm_stub.batches.refuse_list = None
    recover_runs(stub_app, utcnow(), GateResult([], {}, [], []))
    assert llm_stub.batches.cancelled == [batch_id]
    assert llm_stub.batches.files == {}
    [step] = _batch_steps(stub_app, run_id)
    assert step.input["batch_id"] == batch_id and step.output["release"]["cancelled"] is True
    looks = len(llm_stub.batches.lists)
    recover_runs(stub_app, utcnow(), GateResult([], {}, [], []))
    assert len(llm_stub.batches.lists) == looks  # nothing open is left to look up

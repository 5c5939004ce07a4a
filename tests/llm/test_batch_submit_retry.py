"""Submitting a provider batch when the endpoint refuses for now (a 429, a 5xx) or lists the
batch late: the upload and a create the endpoint says it did not carry out are tried again,
honouring Retry-After, and no second batch is ever made for the same questions; what is left
at the end waits for the next run with one reason and leaves no input file behind. Through
the real `openai` client against the local stub (tests/support/llm_stub_batches.py)."""

from __future__ import annotations

import time

import pytest

from tests.llm.test_batch import MemoryLedger, _ask, _batch_ctx
from tests.llm.test_batch_orphans import _batch_steps
from tests.llm.test_fanout import Echo, _echo
from tests.llm.test_openai_batch import (
    _active,
    _consolidate_run,
    _store,
    stub_app,  # noqa: F401  (the fixture)
)
from tests.support.factories import DARK_MODE_NOTES
from tests.support.llm_stub import LLMStub
from tests.support.llm_stub_batches import Refusal
from worker.app import App
from worker.domain.types import Scope
from worker.llm import batch_lookup
from worker.llm.base import BatchItem, LLMError, SubmissionUnknown
from worker.llm.batch_submit import new_submission
from worker.llm.openai_compat import OpenAICompatibleLLM

ITEM = BatchItem("q-1", "consolidate", "sys", "user", {"type": "object"})


def _llm(llm_stub: LLMStub, retries: int = 2) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                               timeout=10, max_retries=retries)


@pytest.mark.parametrize("route", ["upload", "create"])
def test_a_429_is_tried_again_after_its_retry_after(llm_stub: LLMStub, route: str) -> None:
    """Before, the batch path's client never retried (a create may have been carried out), so
    a rate limit on the upload or the create deferred the items to the next run. A 429 says
    nothing was done: the call is made again after the Retry-After it gave, and one batch is
    made of one upload."""
    llm_stub.batches.refuse_next[route] = [Refusal(429, 0.4)]
    started = time.monotonic()
    batch_id = _llm(llm_stub).submit_batch([ITEM], new_submission())
    assert time.monotonic() - started >= 0.4
    assert list(llm_stub.batches.batches) == [batch_id]
    assert len(llm_stub.batches.sent) == 1
    assert llm_stub.batches.posts.count(route) == 2


def test_an_upload_5xx_or_lost_answer_is_tried_again_and_leaves_no_file(
        llm_stub: LLMStub) -> None:
    """An upload answered 503, then one stored whose answer was lost: an upload makes no
    batch, so it is tried again, the file the lost one stored deleted first (found by its
    name). One batch; the only file left at the provider is that batch's input."""
    llm_stub.batches.refuse_next["upload"] = [Refusal(503)]
    llm_stub.batches.lost_uploads = 1
    batch_id = _llm(llm_stub).submit_batch([ITEM], new_submission())
    assert llm_stub.batches.posts == ["upload", "upload", "upload", "create"]
    assert list(llm_stub.batches.files) == [llm_stub.batches.batches[batch_id].input_file_id]
    assert len(llm_stub.batches.sent) == 2 and len(llm_stub.batches.deleted) == 1


def test_a_create_5xx_is_not_sent_again_and_its_input_kept(llm_stub: LLMStub) -> None:
    """A 5xx to the create may come after the provider made the batch: it is not sent again
    (a second batch would be billed), and as the batch may be listed late the input file is
    kept and the outcome unknown (the submission stays open for a later look)."""
    llm_stub.batches.refuse_next["create"] = [Refusal(503, 0)]
    with pytest.raises(SubmissionUnknown, match="no batch with its key is listed yet"):
        _llm(llm_stub).submit_batch([ITEM], new_submission())
    assert llm_stub.batches.posts == ["upload", "create"]
    assert list(llm_stub.batches.files) == list(llm_stub.batches.sent)


@pytest.mark.parametrize(("route", "refusal"), [("upload", Refusal(429)),
                                                ("upload", Refusal(500)),
                                                ("create", Refusal(429))])
def test_a_refusal_that_lasts_defers_the_items_with_one_reason_and_no_file(
        stub_app: App, llm_stub: LLMStub, route: str,  # noqa: F811  (the fixture)
        refusal: Refusal) -> None:
    """Refused every time: tried DREAM_LLM_MAX_RETRIES more times, then the cluster is
    deferred with one line saying how often, the submission closed with that reason, no
    batch made and no uploaded request (note text) left at the provider."""
    llm = getattr(stub_app.llm, "inner", None)  # under the outbound boundary
    assert isinstance(llm, OpenAICompatibleLLM)
    llm.max_retries = 2
    stub_app.settings.llm_batch = True
    scope = Scope(f"refused-{route}-{refusal.status}")
    _store(stub_app, scope, every_phase=False)
    llm_stub.batches.refuse_next[route] = [refusal] * 3
    run_id, clusters = _consolidate_run(stub_app, scope)
    assert [v for v, _ in clusters] == ["deferred"]
    assert clusters[0][1].endswith("(tried 3 times); the items are deferred to the next run")
    assert llm_stub.batches.posts.count(route) == 3
    assert llm_stub.batches.batches == {} and llm_stub.batches.files == {}
    [step] = _batch_steps(stub_app, run_id)
    assert step.status == "skipped" and "tried 3 times" in step.output["lookup"]["why"]
    assert len(_active(stub_app, scope)) == len(DARK_MODE_NOTES)


def test_a_retry_after_past_the_cap_is_not_waited_for(llm_stub: LLMStub) -> None:
    """A rate limit asking for an hour is not waited out inside a phase: one try, the items
    deferred."""
    llm_stub.batches.refuse_next["upload"] = [Refusal(429, 3600)]
    started = time.monotonic()
    with pytest.raises(LLMError, match="answered 429"):
        _llm(llm_stub).submit_batch([ITEM], new_submission())
    assert time.monotonic() - started < 5 and llm_stub.batches.posts == ["upload"]


def test_a_batch_listed_late_keeps_its_input_and_is_adopted_not_sent_twice(
        llm_stub: LLMStub) -> None:
    """The create's answer was lost and the provider lists the batch a while later. Before,
    the first look found none: the input file was deleted under the running batch, the
    submission closed, and the next attempt sent the questions in a second batch. Now a look
    that finds none for a young key settles nothing: the file is kept, the questions are not
    sent again, and the look after the provider lists it adopts the batch."""
    llm_stub.set_handler(_echo)
    ctx, ledger = _batch_ctx(llm_stub), MemoryLedger()
    llm_stub.batches.lost_creates, llm_stub.batches.list_late = 1, True
    outcomes = _ask(ctx, 2, ledger)
    assert [o.status.value for o in outcomes] == ["error", "error"]
    assert "no batch with its key is listed yet" in outcomes[0].reason
    [batch] = llm_stub.batches.batches.values()
    assert batch.input_file_id in llm_stub.batches.files and ledger.closed == {}
    outcomes = _ask(ctx, 2, ledger)  # still unlisted: nothing is sent again
    assert [o.status.value for o in outcomes] == ["deferred", "deferred"]
    assert len(llm_stub.batches.batches) == 1 and batch.input_file_id in llm_stub.batches.files
    llm_stub.batches.unlisted.clear()  # the provider lists it now
    outcomes = _ask(ctx, 2, ledger)
    assert [o.value.n for o in outcomes if isinstance(o.value, Echo)] == [0, 1]
    assert len(llm_stub.batches.batches) == 1 and ledger.open_submissions() == []


def test_a_look_made_once_the_key_is_old_enough_rules_the_batch_out(
        llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """No batch listed for a key older than LISTED_WITHIN: none was made, the files of its
    name are deleted and the submission may close (its questions asked again). A key of the
    earlier layout (a uuid4, no time) counts as old."""
    stub, llm = llm_stub.batches, _llm(llm_stub)
    young, old = new_submission(), "dw-" + "4" * 32
    files = {key: stub._store(b"{}\n", "batch", f"{key}.jsonl") for key in (young, old)}
    assert llm.find_submission(young).problem is not None and files[young] in stub.files
    assert llm.find_submission(old).problem is None and files[old] not in stub.files
    monkeypatch.setattr(batch_lookup, "LISTED_WITHIN", 0.0)
    assert llm.find_submission(young).problem is None and stub.files == {}

"""`dream runs cancel` (and the API's cancel) on a run with a batch submission whose batch is
unknown (its create's answer was lost): the look made before the release may settle nothing
(the provider's list fails, or the key is too young for a "none"). Before, that was only
logged and the command said nothing of a batch that may bill and hold note text; now it says
so in one line with what to do. Through the real `openai` client against the local stub."""

from __future__ import annotations

from typing import Any

import pytest

from tests.llm.test_openai_batch import _store
from tests.runs.test_batches import SCOPE, _cli, _submitted_unknown, _waiting_run
from tests.runs.test_batches import stub_app as stub_app  # noqa: F401  (the fixture)
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.llm.batch_submit import new_submission
from worker.runs import service


@pytest.mark.parametrize(("key", "says"), [
    ("dw-" + "d" * 32, "could not list the provider's batches and files (HTTP 503)"),
    (None, "no batch with its key is listed yet"),
])
def test_a_look_that_settles_nothing_is_said_by_the_cancel(
        stub_app: App, llm_stub: LLMStub, key: str | None, says: str) -> None:
    """The provider's list answers 503, or the batch is not listed yet (a young key): the
    run is cancelled, its recorded batch released as before, and the submission left open is
    one warning line naming it, why and what to do; the API's answer carries the same line."""
    _store(stub_app, SCOPE, every_phase=False)
    run_id = _waiting_run(stub_app)
    key = key or new_submission()
    lost = _submitted_unknown(stub_app, llm_stub, run_id, key)
    llm_stub.batches.unlisted.add(lost)  # listed late, or the list fails
    if key.startswith("dw-d"):
        llm_stub.batches.refuse_list = 503
    out = _cli(stub_app, llm_stub, "runs", "cancel", run_id)
    assert out.exit_code == 0, out.output
    warnings = [x for x in out.stderr.splitlines() if x.startswith("warning: ")]
    assert len(warnings) == 1, out.stderr
    assert warnings[0].startswith(f"warning: batch submission {key} of run {run_id} not "
                                  f"settled: {says}")
    assert f"`dream runs cancel {run_id}` looks again" in warnings[0]
    assert lost not in llm_stub.batches.cancelled and llm_stub.batches.cancelled
    answer: Any = service.cancel_run(stub_app, run_id)  # again, as the API calls it
    assert [(b.submission, b.line()) for b in answer.batches] == [
        (key, warnings[0].removeprefix("warning: "))]

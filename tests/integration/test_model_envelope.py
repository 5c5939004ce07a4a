"""What the endpoint says around a reply (its token usage, the model's name, how deep its JSON
nests) is model output too: garbage there defers or re-asks the item like garbage in the reply,
never fails the phase or gives the budget back. Through the real `openai` client and the stub."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_model_misbehaviour import (
    _add_dark,
    _run,
    _scope,
    _state,
    _use_stub,
    _valid_reply,
)
from tests.support.llm_stub import LLMStub, StubResponse
from worker.app import App

GOOD = json.dumps(_valid_reply())


@pytest.mark.parametrize(("defect", "answer"), [
    ("negative usage", StubResponse.completion(GOOD, usage={"prompt_tokens": -10**9, "completion_tokens": -5})),
    ("huge usage", StubResponse.completion(GOOD, usage={"prompt_tokens": 10**30, "completion_tokens": 5})),
    ("usage of text", StubResponse.completion(GOOD, usage={"prompt_tokens": "abc", "completion_tokens": 5})),
])
def test_a_usage_that_is_no_token_count_defers_the_cluster(
    app: App, llm_stub: LLMStub, defect: str, answer: StubResponse,
) -> None:
    """Before: a negative count was charged (the run's totals read -1,000,000,005 tokens, the
    budget given back) and the fusion applied; a huge one failed the run's step write
    (OverflowError); a string failed the phase (ValueError). Now the cluster is deferred, its
    notes unchanged, the phase succeeded and no token is counted."""
    scope = _scope()
    _add_dark(app, scope)
    before = _state(app, scope)
    _use_stub(app, llm_stub, lambda req: answer, max_retries=0)
    result = _run(app, scope)
    assert result["parent"].status == "succeeded", defect
    (child,) = result["children"]
    assert child.output["verdict"] == "deferred", defect
    assert "no token count" in child.output["reason"]
    assert (result["out"]["tokens_in"], result["out"]["tokens_out"]) == (0, 0)
    assert _state(app, scope) == before


def test_a_reply_nested_past_the_parser_depth_is_invalid_not_a_failed_phase(
    app: App, llm_stub: LLMStub,
) -> None:
    """100,000 opening brackets made json.loads raise RecursionError: the phase failed. Now it
    is a reply that is not JSON: re-asked, and the cluster skipped as invalid."""
    scope = _scope()
    _add_dark(app, scope)
    before = _state(app, scope)
    _use_stub(app, llm_stub, lambda req: StubResponse.completion("[" * 100_000), max_retries=0)
    result = _run(app, scope)
    assert result["parent"].status == "succeeded"
    (child,) = result["children"]
    assert child.output["verdict"] == "invalid" and child.output["attempts"] == 3
    assert _state(app, scope) == before


def test_a_model_name_that_is_no_name_records_the_configured_model(
    app: App, llm_stub: LLMStub,
) -> None:
    """An object as the reply's model failed the phase; now the fusion applies and its step
    records the configured model."""
    scope = _scope()
    _add_dark(app, scope)
    _use_stub(app, llm_stub, lambda req: StubResponse.completion(GOOD, model={"name": "x"}), max_retries=0)
    result = _run(app, scope)
    assert result["parent"].status == "succeeded"
    (child,) = result["children"]
    assert child.output["verdict"] == "merge" and child.model == "stub-model"


def test_a_refusing_model_is_no_unusable_model(app: App, llm_stub: LLMStub) -> None:
    """Every cluster refused: before, each was asked three times and the run ended blocked
    "model answers unusable: 3 of 3 replies were not JSON". Now one call each, the cluster
    invalid with the refusal named, no note changed, and the run not flagged unusable."""
    scope = _scope()
    _add_dark(app, scope)
    before = _state(app, scope)
    refusal = StubResponse.completion("", choices=[{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": None, "refusal": "I can't help with that."}}])
    _use_stub(app, llm_stub, lambda req: refusal, max_retries=0)
    result = _run(app, scope)
    (child,) = result["children"]
    assert child.output["verdict"] == "invalid" and child.output["attempts"] == 1
    assert child.output["reason"].startswith("the model refused to answer")
    assert "model_unusable" not in (result["run"].totals or {}).get("flags", [])
    assert len(llm_stub.chat_requests()) == 1
    assert _state(app, scope) == before

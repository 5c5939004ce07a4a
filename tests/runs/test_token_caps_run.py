"""A run's token cap holds before calls go out, and a run that spent past a cap anyway is never
plain `succeeded`: through the real `openai` client, the stub and the run engine.

Before, `DREAM_BUDGET__MAX_TOKENS_PER_RUN=50` with `DREAM_LLM_MAX_OUTPUT_TOKENS=16` let a
~800-token call go out (0 < 50), the run spent 823 tokens and read `succeeded`, no flag."""

from __future__ import annotations

from typing import Any

from tests.integration.test_model_misbehaviour import _add_dark, _scope, _valid_reply
from tests.support.factories import NOW
from tests.support.llm_stub import LLMStub, StubResponse
from worker.app import App
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import service


def _use(app: App, stub: LLMStub, tokens_out: int, cap: int | None) -> None:
    """The stub counts usage as a server does (about 4 characters a token of what was sent)."""
    stub.set_handler(lambda req: StubResponse(
        content=_valid_reply(), tokens_in=(len(req.system) + len(req.user)) // 4,
        tokens_out=tokens_out))
    app.llm = OpenAICompatibleLLM(base_url=stub.url, model="stub-model", api_key="k",
                                  timeout=5.0, max_retries=0, max_output_tokens=cap)


def _run(app: App) -> tuple[Any, dict[str, Any]]:
    scope = _scope()
    _add_dark(app, scope)
    run_id = service.create_run(app, scope, force=True, phases=["consolidate"], clock=NOW)
    assert run_id is not None
    service.execute_run(app, run_id)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
    assert run is not None
    return run, dict(run.totals or {})


def test_a_call_the_token_cap_cannot_hold_is_not_sent_and_the_run_is_blocked(
    app: App, llm_stub: LLMStub,
) -> None:
    """The audit's repro: cap 50, reply cap 16, a prompt of some 800 tokens. No call goes
    out, nothing is spent, the run is blocked for its budget (before: one call, 800-odd
    tokens spent, `succeeded`)."""
    app.settings.budget.max_tokens_per_run = 50
    _use(app, llm_stub, tokens_out=16, cap=16)
    run, totals = _run(app)
    assert llm_stub.chat_requests() == []
    assert totals["model_tokens"] == 0
    assert run.status == "blocked" and totals["flags"] == ["budget"]
    assert "not fitting" in (run.status_reason or "")


def test_a_run_that_spent_past_its_cap_is_blocked_with_a_flag(app: App, llm_stub: LLMStub) -> None:
    """No reply cap: the call reserves its prompt only, and a reply of 5,000 tokens takes the
    run past its cap of 2,000. The run says so (`over_budget`, blocked); before, it did its
    work, spent 2.5× its cap and read `succeeded` with no flag."""
    app.settings.budget.max_tokens_per_run = 2_000
    _use(app, llm_stub, tokens_out=5_000, cap=None)
    run, totals = _run(app)
    assert len(llm_stub.chat_requests()) == 1
    assert totals["model_tokens"] > 2_000
    assert run.status == "blocked" and "over_budget" in totals["flags"]
    assert f"spent {totals['model_tokens']} of 2000 tokens" in (run.status_reason or "")
    assert "DREAM_LLM_MAX_OUTPUT_TOKENS" in (run.status_reason or "")

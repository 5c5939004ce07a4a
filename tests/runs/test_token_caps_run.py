"""A run's token cap holds before calls go out, and a run that spent past a cap anyway is never
plain `succeeded`: through the real `openai` client, the stub and the run engine.

Before, `DREAM_BUDGET__MAX_TOKENS_PER_RUN=50` with `DREAM_LLM_MAX_OUTPUT_TOKENS=16` let a
~800-token call go out (0 < 50), the run spent 823 tokens and read `succeeded`, no flag."""

from __future__ import annotations

from typing import Any

from tests.integration.test_model_misbehaviour import _add_dark, _scope, _valid_reply
from tests.support.factories import NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubResponse
from tests.support.topic_judge import prompt_topics
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


def test_a_topic_no_token_cap_holds_does_not_hold_up_the_others(
    app: App, llm_stub: LLMStub,
) -> None:
    """Contradictions: one pair of long notes needs more than the whole token cap, three short
    pairs fit. The short ones are asked (the long topic, packed with them, is split off), the
    long one is deferred with a line saying why, and the run is blocked for its budget. Before,
    the long topic read as the budget running out: every topic after it was deferred, nothing
    was asked, run after run."""
    scope = _scope()
    pad = " It came up in a long talk about many other unrelated things." * 1000
    notes: list[dict[str, Any]] = [
        {"id": f"{scope.agent_id}-big{k}", "agent_id": scope.agent_id, "user_id": scope.user_id,
         "type": "Context", "content": f"User's home city is {city}.{pad}",
         "created_at": days_ago(40 - k)} for k, city in enumerate(["Lisbon", "Porto"])]
    for k, (a, b) in enumerate([("blue", "green"), ("Acme", "Globex"), ("42", "43")]):
        notes += [{"id": f"{scope.agent_id}-s{k}{v}", "agent_id": scope.agent_id,
                   "user_id": scope.user_id, "type": "Preference",
                   "content": f"User's favourite thing number {k} is {value}",
                   "created_at": days_ago(20 - 10 * j)}
                  for j, (v, value) in enumerate([("a", a), ("b", b)])]
    add_notes(app, *notes)
    app.settings.budget.max_tokens_per_run = 20_000
    llm_stub.set_handler(lambda req: {"topics": [
        {"topic": t["topic"], "attributes": []} for t in prompt_topics(req.user)]})
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=5.0, max_retries=0, max_output_tokens=500)
    run_id = service.create_run(app, scope, force=True, phases=["contradictions"], clock=NOW)
    assert run_id is not None
    service.execute_run(app, run_id)
    asked = llm_stub.chat_requests()
    assert len(asked) == 1 and "favourite thing number 0" in asked[0].user
    assert "home city" not in asked[0].user
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        dropped = [d["reason"] for s in uow.runs.steps(run_id) if s.parent_id is not None
                   for d in (s.output or {}).get("dropped", [])]
    assert run is not None and run.status == "blocked"
    assert len(dropped) == 1 and "more than the whole token cap (20,000" in dropped[0]

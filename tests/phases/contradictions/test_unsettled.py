"""An attribute a topic answer applies nothing of is not asked (nor paid for) again by every
run: its pairs are remembered as unsettled for DREAM_LLM_UNANSWERED_HOURS, at the notes'
versions and with the model. Before, each later run found them fresh and sent the model the
same question, refused the same way, for ever: a value the texts refuse ("Never deploys on
Fridays" / "Deploys Monday to Thursday only": one negated, one not), an attribute too
uncertain to order its values. (An attribute joining notes judged apart is still asked again
by the next run: test_small_scope pins it.)

The real `openai` client against the local stub.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import update

from tests.phases.contradictions.test_lumped_value import run_contradictions
from tests.support.factories import NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubRequest
from tests.support.topic_judge import prompt_topics
from worker.app import App
from worker.domain.types import Scope
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")
NEVER = "Never deploys on Fridays"
ONLY = "Deploys Monday to Thursday only"
OLD = "Deployments go out on Tuesdays"
NEW = "The team ships releases on Thursdays"
Groups = Callable[[dict[str, str]], list[dict[str, Any]]]


def _model(stub: LLMStub, app: App, attributes: Groups, name: str = "stub-model") -> None:
    """Answers each topic with ``attributes(text → alias)``."""
    def handle(req: StubRequest) -> dict[str, Any]:
        return {"topics": [{"topic": t["topic"],
                            "attributes": attributes({n["text"]: n["alias"] for n in t["notes"]})}
                           for t in prompt_topics(req.user)]}

    stub.set_handler(handle)
    app.llm = OpenAICompatibleLLM(base_url=stub.url, model=name, api_key="k", timeout=10,
                                  max_retries=0)


def _attribute(values: list[list[str]], confidence: float = 0.95) -> dict[str, Any]:
    return {"name": "deploy days", "confidence": confidence, "reason": "one schedule",
            "values": [{"notes": v} for v in values]}


def _one_value(alias: dict[str, str]) -> list[dict[str, Any]]:
    return [_attribute([[alias[NEVER], alias[ONLY]]])] if {NEVER, ONLY} <= set(alias) else []


def _status(app: App) -> dict[str, str]:
    with app.uow() as uow:
        return {r.id: r.status for r in uow.session.query(NoteRow).all()}


def _asked(stub: LLMStub) -> int:
    return len(stub.chat_requests())


def test_a_refused_value_is_asked_again_only_once_a_note_changes_or_the_period_ends(
    app: App, llm_stub: LLMStub
) -> None:
    _model(llm_stub, app, _one_value)
    add_notes(app, {"id": "never", "content": NEVER, "created_at": days_ago(20)},
              {"id": "only", "content": ONLY, "created_at": days_ago(10)})
    status, out = run_contradictions(app)
    assert status == "succeeded" and _asked(llm_stub) == 1
    # The next day: the same question at the same versions is not sent again.
    status, again = run_contradictions(app, NOW + timedelta(days=1))
    assert status == "succeeded" and _asked(llm_stub) == 1
    assert out["values_unsupported"] == 1 and out["pairs_unsettled"] == 1
    (refused,) = [a for a in out["actions"] if a.get("kind") == "unsupported"]
    assert "DREAM_LLM_UNANSWERED_HOURS" in refused["why"]
    assert again["pairs_cooling"] == 1 and "values_unsupported" not in again
    assert _status(app) == {"never": "active", "only": "active"}
    # Once the period has passed it is asked again; refused again, its date is renewed.
    hours = app.settings.llm_unanswered_hours
    run_contradictions(app, NOW + timedelta(hours=hours + 1))
    assert _asked(llm_stub) == 2
    run_contradictions(app, NOW + timedelta(hours=hours + 2))
    assert _asked(llm_stub) == 2
    # Another model is asked at once; so is the pair once a note of it changes.
    _model(llm_stub, app, _one_value, name="another-model")
    run_contradictions(app, NOW + timedelta(hours=hours + 3))
    assert _asked(llm_stub) == 3
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == "only").values(
            importance=0.9, version=NoteRow.version + 1))
        uow.commit()
    run_contradictions(app, NOW + timedelta(hours=hours + 4))
    assert _asked(llm_stub) == 4
    assert _status(app) == {"never": "active", "only": "active"}


def test_with_no_period_a_refused_value_is_asked_by_every_run(
    app: App, llm_stub: LLMStub
) -> None:
    app.settings.llm_unanswered_hours = 0
    _model(llm_stub, app, _one_value)
    add_notes(app, {"id": "never", "content": NEVER, "created_at": days_ago(20)},
              {"id": "only", "content": ONLY, "created_at": days_ago(10)})
    run_contradictions(app)
    _, again = run_contradictions(app, NOW + timedelta(days=1))
    assert _asked(llm_stub) == 2 and again["values_unsupported"] == 1


def test_an_attribute_too_uncertain_to_order_is_not_asked_by_every_run(
    app: App, llm_stub: LLMStub
) -> None:
    def unsure(alias: dict[str, str]) -> list[dict[str, Any]]:
        both = {OLD, NEW} <= set(alias)
        return [_attribute([[alias[OLD]], [alias[NEW]]], confidence=0.5)] if both else []

    _model(llm_stub, app, unsure)
    add_notes(app, {"id": "old", "content": OLD, "created_at": days_ago(40)},
              {"id": "new", "content": NEW, "created_at": days_ago(12)})
    _, out = run_contradictions(app)
    _, again = run_contradictions(app, NOW + timedelta(days=1))
    assert _asked(llm_stub) == 1
    assert out["pairs_unsettled"] == 1 and again["pairs_cooling"] == 1
    assert _status(app) == {"old": "active", "new": "active"}

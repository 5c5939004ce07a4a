"""Long-running memory profiles through a full dream run with a scripted model: exact end states.

Each scenario is one user's store after months of use (preferences that evolve, a tool replaced,
units switched, a policy with a one-off exception, a revert). The scripted model answers like a
careful judge would; the code's policy (newer wins, exceptions kept) decides the end state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import select

from tests.support.factories import NOW, add_entities, add_notes, days_ago
from tests.support.topic_judge import topic_reply
from worker.app import App
from worker.domain.types import Scope
from worker.llm.fake import FakeLLM, FakeRule
from worker.runs import service
from worker.store.models import NoteRow

# Opposing values the scripted judge recognises: a pair stating one side each conflicts.
OPPOSITES = [("tabs", "spaces"), ("Express", "Fastify"), ("miles", "kilometres"),
             ("dark", "light"), ("Jenkins", "GitHub Actions")]


def _relation(a: str, b: str) -> str:
    for x, y in OPPOSITES:
        if (x in a and y in b and y not in a) or (y in a and x in b and x not in a):
            return "conflicting"
    wa = set(re.findall(r"\w+", a.casefold()))
    wb = set(re.findall(r"\w+", b.casefold()))
    if wa == wb:
        return "equivalent"
    if wa > wb:
        return "a_subsumes_b"
    if wb > wa:
        return "b_subsumes_a"
    return "independent"


def _judge(prompt_name: str, system: str, user: str) -> dict[str, Any]:
    return topic_reply(user, _relation)


def scripted_llm() -> FakeLLM:
    """Refuses every fusion (so contradictions decide), classifies pairs by OPPOSITES."""
    return FakeLLM(
        rules=[FakeRule(prompt="contradictions", reply=_judge)],
        default={"should_consolidate": False, "content": "", "type": "Context",
                 "source_ids": [], "reason": "keep separate"},
        model="scripted-scenarios",
    )


@dataclass
class Scenario:
    name: str
    notes: list[tuple[str, float]]  # (content, age in days)
    active_after: set[str]


SCENARIOS = [
    Scenario("evolving_preference", [
        ("User indents Python code with tabs", 240),
        ("User indents Python code with spaces", 20),
        ("User reviews pull requests every morning", 100),
    ], {"User indents Python code with spaces", "User reviews pull requests every morning"}),
    Scenario("tool_replaced", [
        ("The billing API is built on Express", 300),
        ("The billing API is built on Fastify", 30),
        ("CI for the billing API runs on Jenkins", 200),
        ("CI for the billing API runs on GitHub Actions", 10),
    ], {"The billing API is built on Fastify", "CI for the billing API runs on GitHub Actions"}),
    Scenario("units_switched", [
        ("User records running distances in miles", 400),
        ("User records running distances in kilometres", 15),
        ("User runs three times a week", 60),
    ], {"User records running distances in kilometres", "User runs three times a week"}),
    Scenario("policy_with_one_off_exception", [
        ("User always flies economy class for work trips", 200),
        ("User flew business class once for a long work trip to Tokyo", 12),
    ], {"User always flies economy class for work trips",
        "User flew business class once for a long work trip to Tokyo"}),
    Scenario("revert", [
        ("User prefers the dark theme in the editor", 300),
        ("User prefers the light theme in the editor", 100),
        ("User prefers the dark theme in the editor again", 5),
    ], {"User prefers the dark theme in the editor again"}),
]


def _run(app: App, scenario: Scenario) -> set[str]:
    scope = Scope("agent-1", f"user-{scenario.name}")
    add_entities(app, {"kind": "agent", "id": "agent-1"},
                 {"kind": "user", "id": scope.user_id})
    add_notes(app, *[
        {"user_id": scope.user_id, "content": text, "created_at": days_ago(age),
         "last_accessed_at": days_ago(1), "access_count": 1}
        for text, age in scenario.notes
    ])
    app.llm = scripted_llm()
    run_id = service.create_run(app, scope, trigger="test", force=True, clock=NOW)
    assert run_id is not None
    assert service.execute_run(app, run_id) in ("succeeded", "partial")
    with app.uow() as uow:
        rows = uow.session.execute(
            select(NoteRow.content).where(NoteRow.scope_key == scope.key,
                                          NoteRow.status == "active")
        ).all()
    return {r.content for r in rows}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_end_state(app: App, scenario: Scenario) -> None:
    """After one dream with the scripted judge, exactly the expected notes stay active: the newer
    side of each conflict wins, a one-off exception does not overturn the policy, a revert
    leaves only the latest statement."""
    assert _run(app, scenario) == scenario.active_after


def test_scenario_second_run_changes_nothing(sqlite_app: App) -> None:
    """A second dream over a settled store retires nothing more (the end state is a fixed point)."""
    scenario = SCENARIOS[4]
    first = _run(sqlite_app, scenario)
    scope = Scope("agent-1", f"user-{scenario.name}")
    run_id = service.create_run(sqlite_app, scope, trigger="test", force=True, clock=NOW)
    assert run_id is not None
    service.execute_run(sqlite_app, run_id)
    with sqlite_app.uow() as uow:
        again = {r.content for r in uow.session.execute(
            select(NoteRow.content).where(NoteRow.scope_key == scope.key,
                                          NoteRow.status == "active"))}
    assert again == first == scenario.active_after

"""``GET /api/runs`` filters as `dream runs list` does: ``agent_id`` (with ``user_id`` /
``company_id``) means every scope with those parts, ``scope`` one exact scope; a token bound
to a scope still sees that scope's runs only (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, auth
from tests.conftest import app_on
from worker.api import create_api
from worker.app import App
from worker.domain.types import Scope
from worker.runs import service

ALICE = "alice-token-0123456789abcdef"  # bound to ["agent-1","u1",null]
BARE = "bare-token-0123456789abcdefgh"  # bound to ["agent-1",null,null]
TOKENS = json.dumps({ADMIN: {"role": "admin"}, ALICE: {"agent_id": "agent-1", "user_id": "u1"},
                     BARE: {"agent_id": "agent-1"}})
SCOPES = (Scope("agent-1"), Scope("agent-1", "u1"), Scope("agent-1", "u2", "c1"),
          Scope("agent-2", "u1"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def runs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[TestClient, dict[Scope, str]]]:
    """A client over an App with one queued run in each of ``SCOPES``."""
    with app_on(request.param, tmp_path, api_tokens=TOKENS) as app:
        made = _runs(app)
        with TestClient(create_api(app)) as client:
            yield client, made


def _runs(app: App) -> dict[Scope, str]:
    made = {scope: service.create_run(app, scope) for scope in SCOPES}
    return {scope: run_id for scope, run_id in made.items() if run_id is not None}


def _listed(client: TestClient, token: str, **params: Any) -> set[str] | int:
    """The run ids listed, or the status code of a refusal."""
    r = client.get("/api/runs", headers=auth(token), params=params)
    return {run["id"] for run in r.json()["runs"]} if r.status_code == 200 else r.status_code


def test_agent_id_lists_every_scope_of_the_agent_as_the_cli_does(
        runs: tuple[TestClient, dict[Scope, str]]) -> None:
    """``agent_id=agent-1`` listed the one scope ["agent-1",null,null], while `dream runs list
    --agent agent-1` lists all three of agent-1's scopes. Now the API lists them too; user_id
    and company_id narrow it (alone, every agent's scopes of that user); ``scope`` is the one
    exact scope; both at once is a 422."""
    client, made = runs

    def of(*scopes: Scope) -> set[str]:
        return {made[s] for s in scopes}

    assert _listed(client, ADMIN, agent_id="agent-1") == of(*SCOPES[:3])
    assert _listed(client, ADMIN, agent_id="agent-1", user_id="u1") == of(SCOPES[1])
    assert _listed(client, ADMIN, agent_id="agent-1", company_id="c1") == of(SCOPES[2])
    assert _listed(client, ADMIN, user_id="u1") == of(SCOPES[1], SCOPES[3])
    assert _listed(client, ADMIN, scope=SCOPES[0].key) == of(SCOPES[0])
    assert _listed(client, ADMIN) == of(*SCOPES)
    assert _listed(client, ADMIN, scope=SCOPES[0].key, agent_id="agent-1") == 422
    assert _listed(client, ADMIN, agent_id="a" * 65) == 422


def test_an_admins_filter_no_scope_has_is_404_as_dream_runs_list_says_it(
        runs: tuple[TestClient, dict[Scope, str]]) -> None:
    """An agent, user or scope key no note, session or run has is a typo: 404 naming it
    (before: 200 with no runs, read as "nothing ran"); a filter that matches known scopes
    only in another status lists nothing."""
    client, _ = runs
    r = client.get("/api/runs", headers=auth(ADMIN), params={"agent_id": "agent-3"})
    assert (r.status_code, r.json()["detail"]) == (
        404, "unknown scope agent_id 'agent-3': no note, session or run has it")
    r = client.get("/api/runs", headers=auth(ADMIN), params={"scope": Scope("agent-3").key})
    assert (r.status_code, r.json()["detail"]) == (
        404, 'unknown scope ["agent-3",null,null]: it has no notes, sessions or runs; check '
        "agent/user/company (null is a value, not a wildcard)")
    assert _listed(client, ADMIN, agent_id="agent-1", user_id="u9") == 404
    assert _listed(client, ADMIN, agent_id="agent-1", status="failed") == set()


def test_an_admins_filter_of_a_known_scope_without_runs_lists_nothing(tmp_path: Path) -> None:
    """A scope that has only sessions is known: its runs listing is empty, not a 404."""
    from worker.ingest.sessions import import_sessions

    with app_on("sqlite", tmp_path, api_tokens=TOKENS) as app:
        import_sessions(app, iter([json.dumps({"agent_id": "agent-4",
                                               "started_at": "2026-01-01T00:00:00Z"})]))
        with TestClient(create_api(app)) as client:
            assert _listed(client, ADMIN, agent_id="agent-4") == set()
            assert _listed(client, ADMIN, scope=Scope("agent-4").key) == set()


def test_a_scoped_token_still_sees_its_own_scope_only(
        runs: tuple[TestClient, dict[Scope, str]]) -> None:
    """The widening never reaches past a token's scope: agent-1's bare token asking for
    agent-1 gets ["agent-1",null,null]'s run, not those of agent-1's users; alice's token
    (agent-1, u1) gets hers with any filter her scope matches; a filter her scope does not
    match (another agent, another user, a company she has none of, another scope's key) is
    404, as an unknown scope."""
    client, made = runs
    assert _listed(client, BARE, agent_id="agent-1") == {made[SCOPES[0]]}
    assert _listed(client, BARE) == {made[SCOPES[0]]}
    assert _listed(client, BARE, user_id="u1") == 404
    for params in ({}, {"agent_id": "agent-1"}, {"user_id": "u1"},
                   {"agent_id": "agent-1", "user_id": "u1"}, {"scope": SCOPES[1].key}):
        assert _listed(client, ALICE, **params) == {made[SCOPES[1]]}, params
    for params in ({"agent_id": "agent-2"}, {"user_id": "u2"}, {"company_id": "c1"},
                   {"agent_id": "agent-1", "user_id": "u2"}, {"scope": SCOPES[0].key},
                   {"scope": SCOPES[3].key}):
        assert _listed(client, ALICE, **params) == 404, params

"""DREAM_API_TOKENS grants (worker.api.auth.parse_tokens): every key is checked, so no typo or
ambiguous grant binds a tenant's token to another scope or to every scope (R24)."""

from __future__ import annotations

import json

import pytest

from worker.api.auth import Principal, parse_tokens
from worker.config import ConfigError
from worker.domain.types import ERASED_USER, Scope

TOKEN = "tenant-token-0123456789"


def _grant(grant: object) -> str:
    return json.dumps({TOKEN: grant})


@pytest.mark.parametrize(("grant", "says"), [
    # "user" for "user_id": the token bound ["agent-1",null,null], the agent's shared scope
    # with every user's agent-wide notes, instead of alice's.
    ({"agent_id": "agent-1", "user": "alice"}, "unknown key 'user'"),
    ({"agent_id": "agent-1", "company": "acme"}, "unknown key 'company'"),
    # An admin meant for one agent was an admin of every scope.
    ({"role": "admin", "agent_id": "agent-1"}, "not both"),
    # Any other role was ignored: the grant read as a scope.
    ({"role": "viewer", "agent_id": "agent-1"}, "not both"),
    # A list or a flag is no id (it was stored as the text "['alice']").
    ({"agent_id": "agent-1", "user_id": ["alice"]}, "user_id must be a string"),
    ({"agent_id": "agent-1", "user_id": True}, "user_id must be a string"),
    ({"agent_id": 7.5}, "agent_id must be a string"),
    # The placeholder the runs of every erased user of the agent are kept under.
    ({"agent_id": "agent-1", "user_id": ERASED_USER}, "reserved for the runs kept of erased"),
    # An id no note can have.
    ({"agent_id": "agent-1", "company_id": "c" * 65}, "company_id has 65 characters"),
    ({"agent_id": " "}, "agent_id must be a non-empty string"),
], ids=["user", "company", "admin-and-scope", "other-role", "list", "bool", "float", "erased",
        "long", "blank"])
def test_a_grant_that_could_reach_another_scope_is_refused(grant: object, says: str) -> None:
    """One line naming the entry (never the token) and what is wrong with its grant."""
    with pytest.raises(ConfigError) as err:
        parse_tokens(_grant(grant))
    message = str(err.value)
    assert message.startswith("DREAM_API_TOKENS entry 1: ") and says in message, message
    assert TOKEN not in message and "\n" not in message


@pytest.mark.parametrize(("grant", "principal"), [
    ({"role": "admin"}, Principal(None)),
    ({"agent_id": "agent-1"}, Principal(Scope("agent-1"))),
    ({"agent_id": "agent-1", "user_id": 7, "company_id": None},
     Principal(Scope("agent-1", "7", None))),
    ({"agent_id": "agent-1", "user_id": "alice", "company_id": "acme"},
     Principal(Scope("agent-1", "alice", "acme"))),
])
def test_well_formed_grants_parse_as_before(grant: object, principal: Principal) -> None:
    assert parse_tokens(_grant(grant)) == [(TOKEN.encode(), principal)]

"""`dream entities import`: what an entity line may name."""

from __future__ import annotations

import pytest

from worker.domain.types import ERASED_USER
from worker.ingest.entities import parse_entity
from worker.ingest.jsonl import InputError


def test_no_user_may_be_called_the_erased_users_placeholder() -> None:
    """Notes, sessions, examples, the API and `--user` refuse the user id ``[erased]`` (the
    scope the runs of erased users are kept under); a user entity of that name was upserted
    into the registry. Refused now, naming the line; an agent or conversation of that name
    is not a user and stays allowed."""
    with pytest.raises(InputError) as refused:
        parse_entity({"kind": "user", "id": ERASED_USER}, 3)
    assert str(refused.value) == (
        f"line 3: id {ERASED_USER} is reserved for the runs kept of erased users")
    for kind in ("agent", "company", "conversation"):
        assert parse_entity({"kind": kind, "id": ERASED_USER}, 1)[1]["id"] == ERASED_USER

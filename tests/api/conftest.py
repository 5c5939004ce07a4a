"""An App with API tokens configured (SQLite and PostgreSQL) and a TestClient over it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import app_on, make_sqlite_app
from worker.api import create_api
from worker.app import App

ADMIN = "admin-token-0123456789abcdef"
AGENT_1 = "agent-1-token-0123456789abcdef"
AGENT_2 = "agent-2-token-0123456789abcdef"
TOKENS = json.dumps({
    ADMIN: {"role": "admin"},
    AGENT_1: {"agent_id": "agent-1"},
    AGENT_2: {"agent_id": "agent-2"},
})


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def api_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    """The same API test on SQLite and on PostgreSQL+pgvector."""
    with app_on(request.param, tmp_path, api_tokens=TOKENS) as a:
        yield a


@pytest.fixture
def sqlite_api_app(tmp_path: Path) -> Iterator[App]:
    a = make_sqlite_app(tmp_path, api_tokens=TOKENS)
    yield a
    a.dispose()


@pytest.fixture
def client(api_app: App) -> Iterator[TestClient]:
    with TestClient(create_api(api_app)) as c:
        yield c

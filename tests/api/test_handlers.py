"""The API's answers to a database it cannot use (worker.api.handlers): 503 with one line for
the caller (no host or setting of the operator's), the remedy in the server log, never a 500
logged as a bug."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import IntegrityError
from starlette.requests import Request
from structlog.testing import capture_logs

from worker.api import create_api
from worker.api.handlers import database_failure
from worker.app import App, build_app
from worker.config import Settings

ADMIN = "admin-token-0123456789abcdef"
SCOPED = "scoped-token-0123456789abcdef"
DOWN = "postgresql://nobody@127.0.0.1:1/x"  # nothing listens: every connection is refused
CALLS = [("get", "/api/runs", None),
         ("post", "/api/notes", {"content": "The user prefers tea."}),
         ("post", "/api/forgetting/fusion-candidates", {}),
         ("get", "/api/review/items", None),
         ("get", "/metrics", None),
         ("get", "/dashboard", None)]


def _client(url: str) -> Iterator[TestClient]:
    app: App = build_app(Settings(database_url=url, llm_provider="none", api_tokens=json.dumps(
        {ADMIN: {"role": "admin"}, SCOPED: {"agent_id": "agent-1"}})))
    with TestClient(create_api(app), raise_server_exceptions=False) as client:
        yield client
    app.dispose()


@pytest.fixture
def down() -> Iterator[TestClient]:
    yield from _client(DOWN)


@pytest.mark.parametrize(("method", "path", "body"), CALLS, ids=[c[1] for c in CALLS])
def test_a_database_that_is_down_is_503_not_an_internal_error(
        down: TestClient, method: str, path: str, body: object) -> None:
    """Every route over a database that refuses connections: 503 ``unavailable`` saying to
    retry, with no host, port or setting of the deployment in it; the server log has the
    remedy as a warning, and no ``api.unhandled_error`` (before: 500 ``internal`` and the
    frames of a bug)."""
    kwargs = {"json": body} if body is not None else {}
    with capture_logs() as logs:
        r = getattr(down, method)(path, headers={"Authorization": f"Bearer {SCOPED}"}, **kwargs)
    assert r.status_code == 503, r.text
    assert r.json() == {"error": "unavailable",
                        "detail": "the database is unavailable; retry later (the server log "
                                  "says why)"}
    assert "127.0.0.1" not in r.text and "DREAM_" not in r.text
    events = {e["event"]: e for e in logs}
    assert "api.unhandled_error" not in events
    said = events["api.database_failed"]
    assert said["log_level"] == "warning" and "DREAM_DATABASE_URL" in said["error"]


def test_a_database_without_the_schema_is_500_misconfigured(tmp_path: Path) -> None:
    """An SQLite file nobody upgraded: 500 ``misconfigured`` for the caller, "run `dream db
    upgrade`" for the operator in the log."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    (tmp_path / "empty.db").touch()
    for client in _client(url):
        with capture_logs() as logs:
            r = client.get("/api/runs", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 500 and r.json()["error"] == "misconfigured", r.text
    assert "dream db upgrade" in next(e for e in logs
                                      if e["event"] == "api.database_failed")["error"]


def test_a_bug_is_still_a_plain_500() -> None:
    """Not every database error is the database's: one nothing translates (a duplicate key)
    is re-raised for ScrubbedErrors to answer 500 and log as a bug."""
    error = IntegrityError("INSERT", {}, Exception("duplicate key"))
    with pytest.raises(IntegrityError):
        anyio.run(database_failure, cast(Request, None), error)  # the handler reads no request


def test_healthz_is_unhealthy_on_a_database_without_the_schema(tmp_path: Path) -> None:
    """Before: ``{"database": "ok"}`` on a file nobody upgraded, while every other route
    answered ``misconfigured``; a load balancer kept sending traffic to it."""
    (tmp_path / "empty.db").touch()
    for client in _client(f"sqlite:///{tmp_path / 'empty.db'}"):
        r = client.get("/healthz")
    assert r.status_code == 503 and r.json() == {"status": "unavailable", "database": "no schema"}
    for client in _client(DOWN):
        r = client.get("/healthz")
        live = client.get("/livez")
    assert r.status_code == 503 and r.json() == {"status": "unavailable", "database": "down"}
    assert live.status_code == 200 and live.json() == {"status": "ok"}  # the process is fine


def test_a_broker_that_does_not_answer_is_503_without_its_host_and_logged(
    tmp_path: Path,
) -> None:
    """POST /api/runs with DREAM_BROKER_URL naming a broker that does not answer told the caller
    "cannot reach the broker at redis://...@host:port; check DREAM_BROKER_URL" (the operator's
    host and setting, for a tenant to read) and logged nothing. Now: 503 with one line for the
    caller, the broker's address and the remedy in the server log; no run is created."""
    from tests.conftest import make_sqlite_app
    from tests.support.factories import add_notes

    app = make_sqlite_app(tmp_path, broker_url="redis://:s3cret@127.0.0.1:1/0",
                          api_tokens=json.dumps({SCOPED: {"agent_id": "agent-1"}}))
    add_notes(app, {"id": "n1", "agent_id": "agent-1", "content": "Likes tea."})
    with (TestClient(create_api(app), raise_server_exceptions=False) as client,
          capture_logs() as logs):
        r = client.post("/api/runs", json={"force": True},
                        headers={"Authorization": f"Bearer {SCOPED}"})
    with app.uow() as uow:
        runs = uow.runs.list(None, limit=5)
    app.dispose()
    assert r.status_code == 503 and r.json()["error"] == "unavailable", r.text
    assert "127.0.0.1" not in r.text and "DREAM_" not in r.text and "retry later" in r.text
    said = next(e for e in logs if e["event"] == "api.service_failed")
    assert said["log_level"] == "warning" and "DREAM_BROKER_URL" in said["error"]
    assert runs == []

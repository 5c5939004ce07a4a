"""The MCP server's ``/healthz`` is a readiness probe, as the API's is: it answered
``{"status": "ok"}`` with the database down or never upgraded, so an orchestrator routed agents
to a replica whose every tool call then failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

from starlette.testclient import TestClient  # noqa: E402

from tests.conftest import make_sqlite_app  # noqa: E402
from worker.app import App, build_app  # noqa: E402
from worker.config import Settings  # noqa: E402
from worker.mcp.server import http_app  # noqa: E402

TOKENS = json.dumps({"mcp-health-token-0123456789ab": {"agent_id": "agent-a"}})
DOWN = "postgresql://nobody@127.0.0.1:1/x"  # nothing listens: every connection is refused


def _probe(app: App, path: str = "/healthz") -> tuple[int, object]:
    try:
        with TestClient(http_app(app, "127.0.0.1", 8090)) as client:
            r = client.get(path)
        return r.status_code, r.json()
    finally:
        app.dispose()


def _bare(url: str) -> App:
    return build_app(Settings(database_url=url, llm_provider="none", api_tokens=TOKENS))


def test_healthz_reads_the_database_as_the_api_does(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()
    assert _probe(make_sqlite_app(tmp_path, api_tokens=TOKENS)) == (
        200, {"status": "ok", "database": "ok"})
    assert _probe(_bare(f"sqlite:///{tmp_path / 'empty.db'}")) == (
        503, {"status": "unavailable", "database": "no schema"})
    assert _probe(_bare(DOWN)) == (503, {"status": "unavailable", "database": "down"})


def test_livez_answers_while_the_database_is_down() -> None:
    """Liveness is the process: a database outage takes the replica out of service
    (``/healthz``) without an orchestrator restarting it for nothing it could fix."""
    assert _probe(_bare(DOWN), "/livez") == (200, {"status": "ok"})


def test_healthz_of_a_schema_older_than_the_code_is_unavailable(tmp_path: Path) -> None:
    """A database at an older migration answered ``ok`` (it has an alembic_version), and every
    tool call then failed on a missing column: it is "no schema" until `dream db upgrade`."""
    from worker.store.migrate import upgrade

    old = _bare(f"sqlite:///{tmp_path / 'old.db'}")
    upgrade(old.engine, "0005")
    assert _probe(old) == (503, {"status": "unavailable", "database": "no schema"})

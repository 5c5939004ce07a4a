"""A query parameter an API endpoint does not take is a 422 naming it, never dropped unread:
a misspelt filter listed every run as if it had matched, and a cancel given a ``reason`` in the
query (the CLI's ``--reason``) cancelled the run without it. The HTML pages still ignore what
they do not read (a bookmark's leftovers)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, AGENT_1, auth
from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.runs import service


@pytest.mark.parametrize(("path", "params", "named"), [
    ("/api/runs", {"statuss": "blocked"}, "statuss"),
    ("/api/runs", {"agent": "agent-1", "limit": 5}, "agent"),
    ("/api/review/items", {"agent_id": "agent-1", "user": "u1"}, "user"),
    ("/healthz", {"verbose": "1"}, "verbose"),
])
def test_an_unknown_query_parameter_is_422_naming_it(
        sqlite_api_app: App, path: str, params: dict[str, str | int], named: str) -> None:
    """Before: 200, the parameter ignored (every run of every scope listed for a typo)."""
    from worker.api import create_api

    add_notes(sqlite_api_app, {"content": "a note"})
    with TestClient(create_api(sqlite_api_app)) as client:
        r = client.get(path, params=params, headers=auth(ADMIN))
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail.startswith(f"unknown query parameter {named!r}; this endpoint takes ")
        assert "\n" not in detail
        if path != "/healthz":  # no or a wrong token is still the 401 first
            assert client.get(path, params=params).status_code == 401
        page = client.get("/dashboard", params={"utm_source": "mail"}, headers=auth(ADMIN))
        assert page.status_code == 200


def test_a_refused_query_parameter_changes_nothing(sqlite_api_app: App) -> None:
    """``POST /api/runs/R/cancel?reason=typo`` cancelled R with the reason dropped (200); now a
    422 and the run stays as it was."""
    from worker.api import create_api

    add_notes(sqlite_api_app, {"content": "a note"})
    run_id = service.create_run(sqlite_api_app, Scope("agent-1"))
    assert run_id is not None
    with TestClient(create_api(sqlite_api_app)) as client:
        before = client.get(f"/api/runs/{run_id}", headers=auth(AGENT_1)).json()
        r = client.post(f"/api/runs/{run_id}/cancel", params={"reason": "typo"},
                        headers=auth(AGENT_1))
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == ("unknown query parameter 'reason'; this endpoint takes "
                                      "none")
        assert client.get(f"/api/runs/{run_id}", headers=auth(AGENT_1)).json() == before


@pytest.mark.parametrize("query", ["agent_id=agent-1&agent_id=agent-2", "limit=1&limit=2",
                                   "status=blocked&status=succeeded"])
def test_a_query_parameter_given_twice_is_422_naming_it(sqlite_api_app: App, query: str) -> None:
    """Before: the last value was taken silently (`agent_id=a&agent_id=b` listed b's runs), as a
    body's key given twice and a CLI option given twice were."""
    from worker.api import create_api

    add_notes(sqlite_api_app, {"content": "a note"})
    name = query.partition("=")[0]
    with TestClient(create_api(sqlite_api_app)) as client:
        r = client.get(f"/api/runs?{query}", headers=auth(ADMIN))
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == (f"query parameter {name!r} is given twice; give it once "
                                      "(the last value would be taken alone)"), r.json()
        assert client.get(f"/api/runs?{query}").status_code == 401

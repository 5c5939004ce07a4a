"""Schema-driven fuzzing (schemathesis strategies from the app's own OpenAPI document) of every
operation: no generated input yields a 5xx, for an admin or a scoped token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok

from tests.api.conftest import ADMIN, AGENT_1, TOKENS, auth
from tests.conftest import drop_postgres_app, make_postgres_app, make_sqlite_app
from tests.support.factories import add_notes
from worker.api import create_api


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("token", [ADMIN, AGENT_1], ids=["admin", "scoped"])
def test_no_generated_input_causes_a_server_error(tmp_path: Path, token: str,
                                                  backend: str) -> None:
    """Every documented operation, fed schema-generated bodies, paths and queries (bounded to a
    few dozen examples each), answers below 500 on SQLite and on PostgreSQL (stricter types)."""
    if backend == "sqlite":
        app = make_sqlite_app(tmp_path, api_tokens=TOKENS)
    else:
        app = make_postgres_app(api_tokens=TOKENS)
    add_notes(app, {"id": "n1", "content": "The user writes Python 3.12."},
              {"id": "n2", "content": "The user writes Python 3.12 with type hints."})
    api = create_api(app)
    # Starting runs spawns background threads; POST /api/runs is tested directly elsewhere.
    schema = schemathesis.openapi.from_asgi("/openapi.json", api).exclude(
        method="POST", path="/api/runs")
    seen: list[str] = []
    statuses: list[int] = []
    try:
        for result in schema.get_all_operations():
            assert isinstance(result, Ok), result
            operation = result.ok()
            seen.append(f"{operation.method.upper()} {operation.path}")

            @given(case=operation.as_strategy())
            @settings(max_examples=20, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            def check(case: Any) -> None:
                response = case.call(headers=auth(token))
                statuses.append(response.status_code)
                assert response.status_code < 500, (case.method, case.path, response.text[:300])

            check()
    finally:
        if backend == "sqlite":
            app.dispose()
        else:
            drop_postgres_app(app)
    assert "POST /api/notes" in seen and "POST /api/forgetting/fuse" in seen and len(seen) >= 8
    assert len(statuses) >= 5 * len(seen) and {200, 422} <= set(statuses)

"""What the framework refuses before a route runs (a body that is not readable JSON, the wrong
content type, an unknown path or method) is answered like every other refusal: a status, an
``error`` code and one ``detail`` line saying what to send, never a bare ``{"detail": "Not
Found"}``; nothing changes."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import AGENT_1, auth
from tests.support.safety import all_rows_text
from worker.api import create_api
from worker.app import App

JSON = {"content-type": "application/json"}
DEEP = b"[" * 100_000 + b"]" * 100_000
# (method, path, body, content type, status, error code, words the detail must hold)
CASES = [
    ("POST", "/api/notes", '{"content": "caf\u00e9"}'.encode("latin-1"), JSON, 400,
     "bad_request", "send one JSON object in UTF-8"),
    ("POST", "/api/notes", DEEP, JSON, 400, "bad_request", "send one JSON object"),
    ("POST", "/api/notes", b'{"content": "x", "importance": 1' + b"0" * 5000 + b"}", JSON, 400,
     "bad_request", "number too long"),
    ("POST", "/api/notes", b'{"content": "x",', JSON, 422, "invalid", "body: not valid JSON ("),
    ("POST", "/api/notes", b"content=x", {"content-type": "text/plain"}, 422, "invalid",
     "Content-Type: application/json"),
    ("POST", "/api/notes", b"", JSON, 422, "invalid", "Content-Type: application/json"),
    ("GET", "/api/nothing-here", None, {}, 404, "not_found", "/openapi.json"),
    ("DELETE", "/api/notes", None, {}, 405, "method_not_allowed", "/openapi.json"),
    ("GET", "/api/review/approve", None, {}, 405, "method_not_allowed", "/openapi.json"),
]


@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "code", "words"), CASES,
                         ids=[f"{c[0]} {c[1]} {c[4]}#{i}" for i, c in enumerate(CASES)])
def test_framework_refusals_name_the_problem_and_what_to_send(
    sqlite_api_app: App, method: str, path: str, body: bytes | None, headers: dict[str, str],
    status: int, code: str, words: str,
) -> None:
    before = all_rows_text(sqlite_api_app)
    with TestClient(create_api(sqlite_api_app), raise_server_exceptions=False) as client:
        r = client.request(method, path, content=body, headers={**auth(AGENT_1), **headers})
    assert r.status_code == status, r.text[:300]
    answer = r.json()
    assert answer["error"] == code, answer
    assert words in answer["detail"], answer
    assert "\n" not in answer["detail"] and "caf" not in answer["detail"]
    assert all_rows_text(sqlite_api_app) == before

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


# A value of the wrong JSON type was converted: "true" forced a run, "7" approved item 7.
WRONG_TYPES = [
    ("/api/runs", {"force": "true"}, "body.force"),
    ("/api/runs", {"dry_run": 1}, "body.dry_run"),
    ("/api/runs", {"allow_retire": "5"}, "body.allow_retire"),
    ("/api/review/approve", {"item_id": "1"}, "body.item_id"),
    ("/api/review/decline", {"item_id": 1.0}, "body.item_id"),
    ("/api/review/approve", {"all": "yes"}, "body.all"),
    ("/api/notes", {"content": "Prefers tea.", "importance": "0.5"}, "body.importance"),
    ("/api/forgetting/fusion-candidates", {"limit": True}, "body.limit"),
    ("/api/forgetting/fuse", {"source_ids": ["n1", "n2"], "fused_content": "x", "strict": "no"},
     "body.strict"),
    ("/api/runs/some-run/undo", {"force_cascade": "false"}, "body.force_cascade"),
]


@pytest.mark.parametrize(("path", "body", "field"), WRONG_TYPES,
                         ids=[f"{p} {f}" for p, _, f in WRONG_TYPES])
def test_a_value_of_the_wrong_type_is_422_never_converted(
    sqlite_api_app: App, path: str, body: dict[str, object], field: str,
) -> None:
    from tests.support.factories import add_notes

    add_notes(sqlite_api_app, {"id": "n1", "content": "Prefers tea."},
              {"id": "n2", "content": "Prefers green tea."})
    before = all_rows_text(sqlite_api_app)
    with TestClient(create_api(sqlite_api_app), raise_server_exceptions=False) as client:
        r = client.post(path, json=body, headers=auth(AGENT_1))
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"].startswith(f"{field}: Input should be a valid"), r.json()
    assert all_rows_text(sqlite_api_app) == before


# A key given twice in one object: Python's json (and so FastAPI) kept the last value silently,
# so an admin's `{"scope": {"user_id": "u-1", ..., "user_id": "u-2"}}` acted on the second
# scope and `{"content": A, "content": B}` stored B, where every importer refuses such a line.
DUPLICATE_KEYS = [
    ("/api/notes", '{"scope": {"agent_id": "agent-1", "agent_id": "agent-2"}, "content": "Prefers tea."}',
     "agent_id"),
    ("/api/notes", '{"scope": {"agent_id": "agent-1"}, "content": "Prefers tea.", '
     '"content": "Prefers coffee."}', "content"),
    ("/api/runs", '{"scope": {"agent_id": "agent-1"}, "force": false, "force": true}', "force"),
    ("/api/forgetting/keep-apart", '{"source_ids": ["n1", "n2"], "source_ids": ["n1", "n3"]}',
     "source_ids"),
]


@pytest.mark.parametrize(("path", "body", "key"), DUPLICATE_KEYS,
                         ids=[f"{p} {k}" for p, _, k in DUPLICATE_KEYS])
def test_a_key_given_twice_in_a_body_is_422_naming_it(
    sqlite_api_app: App, path: str, body: str, key: str,
) -> None:
    from tests.api.conftest import ADMIN
    from tests.support.factories import add_notes

    add_notes(sqlite_api_app, {"id": "n1", "content": "Prefers tea."},
              {"id": "n2", "content": "Prefers green tea."},
              {"id": "n3", "content": "Prefers black tea."})
    before = all_rows_text(sqlite_api_app)
    with TestClient(create_api(sqlite_api_app), raise_server_exceptions=False) as client:
        r = client.post(path, content=body.encode(), headers={**auth(ADMIN), **JSON})
        wrong = client.post(path, content=body.encode(), headers=JSON)  # no token: 401 first
    assert r.status_code == 422, r.text[:300]
    assert r.json()["error"] == "invalid"
    assert r.json()["detail"] == (f"body: key {key!r} appears twice in one object; keep one "
                                  "(JSON readers keep either value)"), r.json()
    assert wrong.status_code == 401
    assert all_rows_text(sqlite_api_app) == before


@pytest.mark.parametrize("body", [{}, {"item_id": 1, "all": True}, {"run_id": "r", "all": True}])
@pytest.mark.parametrize("path", ["/api/review/approve", "/api/review/decline"])
def test_a_review_decision_naming_no_or_two_selections_names_the_fields_to_send(
    sqlite_api_app: App, path: str, body: dict[str, object],
) -> None:
    """It named the CLI's options (`--run RUN_ID`, `--all`), which an API or MCP caller has not."""
    with TestClient(create_api(sqlite_api_app), raise_server_exceptions=False) as client:
        r = client.post(path, json=body, headers=auth(AGENT_1))
    assert r.status_code == 422, r.text[:300]
    detail = r.json()["detail"]
    assert "item_id" in detail and "run_id" in detail and "all" in detail, detail
    assert "--" not in detail, detail

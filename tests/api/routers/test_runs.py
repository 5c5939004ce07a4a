"""Runs, ops endpoints, dashboard HTML and access control (R24) through HTTP."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, AGENT_1, AGENT_2, auth
from tests.support.factories import add_notes
from worker.app import App

ENDPOINTS = [
    ("post", "/api/forgetting/fusion-candidates", {"scope": {"agent_id": "agent-1"}}),
    ("post", "/api/forgetting/fuse", {"source_ids": ["a", "b"], "fused_content": "x"}),
    ("post", "/api/forgetting/keep-apart", {"source_ids": ["a", "b"]}),
    ("post", "/api/notes", {"scope": {"agent_id": "agent-1"}, "content": "hello there"}),
    ("get", "/api/runs", None),
    ("get", "/api/runs/some-run", None),
    ("post", "/api/runs", {"scope": {"agent_id": "agent-1"}, "force": True}),
    ("post", "/api/runs/some-run/undo", None),
    ("post", "/api/runs/some-run/cancel", None),
    ("get", "/metrics", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
@pytest.mark.parametrize("header", [None, "Bearer wrong-token-0123456789abcdef", "Basic abc",
                                    f"Bearer {ADMIN}x", "Bearer "])
def test_no_or_wrong_token_is_401(sqlite_api_app: App, method: str, path: str,
                                  body: dict[str, object] | None, header: str | None) -> None:
    """Every endpoint except /healthz refuses a missing, wrong or malformed token with 401 and
    writes nothing."""
    from worker.api import create_api

    with TestClient(create_api(sqlite_api_app)) as client:
        headers = {"Authorization": header} if header is not None else {}
        r = client.request(method, path, headers=headers, json=body)
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == "Bearer"
        with sqlite_api_app.uow() as uow:
            assert uow.notes.count_by_status() == {} and uow.runs.list() == []


def test_healthz_needs_no_token(client: TestClient) -> None:
    """Liveness with a database round-trip, open to probes."""
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "database": "ok"}


def _run(client: TestClient, api_app: App, token: str = AGENT_1) -> str:
    r = client.post("/api/runs", headers=auth(token), json={"force": True})
    assert r.status_code == 202, r.text
    assert r.json()["mode"] == "in_process"
    for thread in api_app.threads:
        thread.join(timeout=60)
    return str(r.json()["run_id"])


def test_run_lifecycle_through_the_api(api_app: App, client: TestClient) -> None:
    """POST /api/runs runs in-process without a broker; list, show (steps as a tree), metrics
    and undo see it; a second start while one is running is a 409 conflict."""
    add_notes(api_app, {"content": "Prefers tea.", "expires_at": "2000-01-01T00:00:00+00:00"},
              {"content": "Works from Lisbon."})
    run_id = _run(client, api_app)
    runs = client.get("/api/runs", headers=auth(AGENT_1)).json()["runs"]
    assert [r["id"] for r in runs] == [run_id]
    assert runs[0]["status"] in ("succeeded", "partial")
    tree = client.get(f"/api/runs/{run_id}", headers=auth(AGENT_1)).json()
    assert [s["phase"] for s in tree["steps"]] == ["consolidate", "contradictions", "prune",
                                                    "archive"]
    assert all("children" in s and s["duration_ms"] is not None for s in tree["steps"])
    filtered = client.get("/api/runs", headers=auth(ADMIN),
                          params={"agent_id": "agent-1", "status": "failed"}).json()["runs"]
    assert filtered == []
    since = client.get("/api/runs", headers=auth(ADMIN),
                       params={"since": "2999-01-01T00:00:00Z"}).json()["runs"]
    assert since == []
    assert client.get("/api/runs", headers=auth(ADMIN), params={"since": "soon"}).status_code == 422
    text = client.get("/metrics", headers=auth(ADMIN)).text
    assert f'dream_runs{{status="{runs[0]["status"]}"}} 1' in text
    assert 'dream_notes{status="' in text
    assert 'dream_phase_duration_seconds_count{phase="archive"} 1' in text
    assert "# TYPE dream_model_tokens_total counter" in text
    undo = client.post(f"/api/runs/{run_id}/undo", headers=auth(AGENT_1), json={})
    assert undo.status_code == 200, undo.text
    assert undo.json()["run_ids"][-1] == run_id


def test_not_due_and_duplicate_runs_are_conflicts(sqlite_api_app: App) -> None:
    """Without force the gate decides (409 with its reason); an already queued run is a 409."""
    from worker.api import create_api
    from worker.domain.types import Scope
    from worker.runs.service import create_run

    add_notes(sqlite_api_app, {"content": "Works from Lisbon."})
    with TestClient(create_api(sqlite_api_app)) as client:
        r = client.post("/api/runs", headers=auth(AGENT_1), json={})
        assert r.status_code == 409 and "not due" in r.json()["detail"]
        assert create_run(sqlite_api_app, Scope("agent-1"))
        r = client.post("/api/runs", headers=auth(AGENT_1), json={"force": True})
        assert r.status_code == 409 and "is already queued" in r.json()["detail"]
        r = client.post("/api/runs", headers=auth(ADMIN), json={"force": True})
        assert r.status_code == 422  # an admin must name the scope


def test_scoped_token_sees_only_its_scope(api_app: App, client: TestClient) -> None:
    """Another scope's run is 404 (show, undo), listing it by scope is 404, and the list and
    metrics of a scoped token only contain its own scope."""
    add_notes(api_app, {"content": "Works from Lisbon."})
    run_id = _run(client, api_app, AGENT_1)
    assert client.get(f"/api/runs/{run_id}", headers=auth(AGENT_2)).status_code == 404
    assert client.post(f"/api/runs/{run_id}/undo", headers=auth(AGENT_2)).status_code == 404
    assert client.get("/api/runs", headers=auth(AGENT_2)).json()["runs"] == []
    r = client.get("/api/runs", headers=auth(AGENT_2), params={"agent_id": "agent-1"})
    assert r.status_code == 404
    assert "dream_runs{" not in client.get("/metrics", headers=auth(AGENT_2)).text
    assert client.get("/api/runs/nope", headers=auth(ADMIN)).status_code == 404


@pytest.mark.parametrize(("method", "suffix"), [("get", ""), ("post", "/cancel"), ("post", "/undo")])
def test_another_scopes_run_answers_exactly_like_a_missing_one(api_app: App, client: TestClient,
                                                              method: str, suffix: str) -> None:
    """Another scope's run (or fuse) and an id nobody has get the same 404 body, the id aside:
    the answer never tells a scoped token that the run exists elsewhere (before: a missing run
    added "; list runs with `dream runs list`", another scope's did not)."""
    add_notes(api_app, {"id": "n1", "content": "Works from Lisbon."},
              {"id": "n2", "content": "Works from Lisbon in Portugal."})
    run_id = _run(client, api_app, AGENT_1)
    fused = client.post("/api/forgetting/fuse", headers=auth(AGENT_1),
                        json={"source_ids": ["n1", "n2"], "fused_content": "Works from Lisbon."})
    assert fused.status_code == 201, fused.text
    for theirs, absent in ((run_id, "0" * len(run_id)),
                           (fused.json()["undo_id"], "fuse-" + "0" * 36)):
        answers = [client.request(method, f"/api/runs/{i}{suffix}", headers=auth(AGENT_2))
                   for i in (theirs, absent)]
        assert [a.status_code for a in answers] == [404, 404]
        assert answers[0].text.replace(theirs, "ID") == answers[1].text.replace(absent, "ID")


@pytest.mark.parametrize(("method", "suffix"), [("get", ""), ("post", "/cancel"), ("post", "/undo")])
def test_an_over_long_run_id_is_invalid_not_missing(client: TestClient, method: str,
                                                     suffix: str) -> None:
    """A run id past the 64 characters every id may have is a 422 naming the limit, as the CLI's
    usage error and the scope ids are (it was a 404 "no run with id")."""
    r = client.request(method, f"/api/runs/{'r' * 65}{suffix}", headers=auth(ADMIN))
    assert r.status_code == 422 and "at most 64" in r.json()["detail"], r.text


def test_runs_and_candidates_on_an_unknown_scope_are_404(api_app: App,
                                                         client: TestClient) -> None:
    """As the CLI refuses: starting a run or listing fusion candidates for a scope with no
    notes, sessions or runs (a typo) is a 404 naming the scope, and writes nothing."""
    add_notes(api_app, {"content": "Works from Lisbon."})
    typo = {"scope": {"agent_id": "agnet-1"}, "force": True}
    r = client.post("/api/runs", headers=auth(ADMIN), json=typo)
    assert r.status_code == 404 and "unknown scope" in r.json()["detail"], r.text
    r = client.post("/api/forgetting/fusion-candidates", headers=auth(ADMIN),
                    json={"scope": {"agent_id": "agnet-1"}})
    assert r.status_code == 404 and "agnet-1" in r.json()["detail"], r.text
    r = client.post("/api/runs", headers=auth(AGENT_2), json={"force": True})
    assert r.status_code == 404
    with api_app.uow() as uow:
        assert uow.runs.list() == []


def test_allow_retire_is_recorded_and_bounded(api_app: App, client: TestClient) -> None:
    """POST /api/runs takes allow_retire (the guard override naming its count) onto the run;
    a negative or non-integer count is a 422 that creates nothing."""
    add_notes(api_app, {"content": "Works from Lisbon."})
    for bad in (-1, 1.5, 10**12):
        r = client.post("/api/runs", headers=auth(AGENT_1), json={"force": True,
                                                                  "allow_retire": bad})
        assert r.status_code == 422, (bad, r.text)
    with api_app.uow() as uow:
        assert uow.runs.list() == []
    r = client.post("/api/runs", headers=auth(AGENT_1), json={"force": True, "allow_retire": 8})
    assert r.status_code == 202, r.text
    for thread in api_app.threads:
        thread.join(timeout=60)
    shown = client.get(f"/api/runs/{r.json()['run_id']}", headers=auth(AGENT_1)).json()
    assert shown["allow_retire"] == 8 and shown["force"] is True


def test_cancel_through_the_api(api_app: App, client: TestClient) -> None:
    """POST /api/runs/{id}/cancel cancels a queued run (its scope takes a new one at once);
    a finished run is a 409, another scope's run a 404."""
    from worker.domain.types import Scope
    from worker.runs.service import create_run

    add_notes(api_app, {"content": "Works from Lisbon."})
    run_id = create_run(api_app, Scope("agent-1"))
    assert run_id is not None
    assert client.post(f"/api/runs/{run_id}/cancel", headers=auth(AGENT_2)).status_code == 404
    r = client.post(f"/api/runs/{run_id}/cancel", headers=auth(AGENT_1))
    assert r.status_code == 200 and r.json() == {"run_id": run_id, "status": "cancelled",
                                                 "was": "queued", "batches": []}
    assert client.get(f"/api/runs/{run_id}", headers=auth(AGENT_1)).json()["status_reason"] == (
        "cancelled through the API by [\"agent-1\",null,null]")
    second = _run(client, api_app)
    r = client.post(f"/api/runs/{second}/cancel", headers=auth(AGENT_1))
    assert r.status_code == 409 and "only queued" in r.json()["detail"]


def test_dashboard_renders_runs_and_keeps_the_token_in_a_cookie(api_app: App,
                                                                client: TestClient) -> None:
    """The read-only page lists runs with notes before → after and links each run's steps; a
    query token is moved into an HttpOnly cookie by a redirect that drops it from the address;
    no token gets the login page with 401; another tenant's token sees neither list nor run."""
    add_notes(api_app, {"content": "Prefers tea.", "expires_at": "2000-01-01T00:00:00+00:00"})
    run_id = _run(client, api_app)
    assert client.get("/dashboard").status_code == 401
    r = client.get("/dashboard", params={"token": AGENT_1, "page": 1}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/dashboard?page=1"
    assert "httponly" in r.headers["set-cookie"].lower()
    page = client.get("/dashboard")
    assert page.status_code == 200
    assert run_id[:8] in page.text and "notes before" in page.text.lower()
    detail = client.get(f"/dashboard/runs/{run_id}")
    assert detail.status_code == 200 and run_id in detail.text and "archive" in detail.text
    client.cookies.clear()
    assert run_id[:8] not in client.get("/dashboard", params={"token": AGENT_2}).text
    assert client.get(f"/dashboard/runs/{run_id}").status_code == 404


def test_openapi_document_lists_the_endpoints(client: TestClient) -> None:
    """The OpenAPI document is served and names every host endpoint."""
    paths = client.get("/openapi.json").json()["paths"]
    for p in ("/api/forgetting/fusion-candidates", "/api/forgetting/fuse",
              "/api/forgetting/keep-apart", "/api/notes", "/api/runs", "/api/runs/{run_id}",
              "/api/runs/{run_id}/undo", "/healthz", "/metrics"):
        assert p in paths


def test_tokens_and_note_text_never_reach_the_logs(client: TestClient) -> None:
    """Request logs carry method, path and status only: neither a query-string token, a bearer
    token nor the text of a remembered note appears in any log event."""
    from structlog.testing import capture_logs

    canary = "canary-note-text-7f3a"
    with capture_logs() as events:
        client.get("/dashboard", params={"token": AGENT_1})
        client.post("/api/notes", headers=auth(AGENT_1), json={"content": f"{canary} here"})
        client.get("/api/runs", headers=auth("not-a-valid-token-000000"))
    dumped = repr(events)
    assert any(e["event"] == "api.request" for e in events)
    assert AGENT_1 not in dumped and canary not in dumped and "not-a-valid-token" not in dumped


def test_runs_page_on_with_next_and_after(api_app: App, client: TestClient) -> None:
    """Past the newest 500 runs there was no way to list a run: ``limit`` was the only bound.
    Now each page says ``next``, the ``after`` of the following page (null on the last); a
    scoped token's cursor must be a run of its own scope, another's answers as an unknown id."""
    from worker.domain.types import Scope
    from worker.runs import service

    made = service.create_runs(api_app, [Scope("agent-1"), Scope("agent-2"), Scope("agent-3")],
                               trigger="beat")
    first = client.get("/api/runs", headers=auth(ADMIN), params={"limit": 2}).json()
    assert len(first["runs"]) == 2 and first["next"] == first["runs"][-1]["id"]
    rest = client.get("/api/runs", headers=auth(ADMIN),
                      params={"limit": 2, "after": first["next"]}).json()
    assert rest["next"] is None
    assert [r["id"] for r in first["runs"] + rest["runs"]] == [made[Scope(f"agent-{k}")]
                                                               for k in (1, 2, 3)]
    own = client.get("/api/runs", headers=auth(AGENT_1)).json()
    assert [r["id"] for r in own["runs"]] == [made[Scope("agent-1")]] and own["next"] is None
    answers = [client.get("/api/runs", headers=auth(AGENT_1), params={"after": i})
               for i in (made[Scope("agent-2")], "0" * 36)]
    assert [a.status_code for a in answers] == [422, 422]
    assert answers[0].json()["detail"].replace(made[Scope("agent-2")], "ID") == \
        answers[1].json()["detail"].replace("0" * 36, "ID")


@pytest.mark.parametrize("status", ["done", "Blocked", "blocked "])
def test_an_unknown_run_status_filter_is_422_not_an_empty_list(
        api_app: App, client: TestClient, status: str) -> None:
    """GET /api/runs?status=Blocked answered 200 with no runs: an alert polling for blocked
    runs with a typo (or the wrong case) saw none, for good. `dream runs list --status` refuses
    an unknown status; the API now answers 422 naming the field and the statuses it takes."""
    add_notes(api_app, {"content": "a note"})
    run_id = _run(client, api_app)
    r = client.get("/api/runs", params={"status": status}, headers=auth(ADMIN))
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("query.status: Input should be 'queued', 'running'")
    listed = client.get("/api/runs", params={"status": "succeeded"}, headers=auth(ADMIN))
    assert [run["id"] for run in listed.json()["runs"]] == [run_id]

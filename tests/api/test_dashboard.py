"""The dashboard's data over HTTP on SQLite and PostgreSQL, for a store the worker dreamt: scope
filter and pagination, scoped tokens (R24), trend figures that agree with the notes, and a
statement count that does not grow with the number of runs or scopes (no query per run)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from tests.api.conftest import ADMIN, AGENT_2, TOKENS, auth
from tests.conftest import drop_postgres_app, make_postgres_app, make_sqlite_app
from tests.support.dashboard_store import (
    DEMO,
    DEMO_SCRIPT,
    OTHER,
    QUIET,
    SeededStore,
    dream,
    seed_dashboard_store,
)
from tests.support.factories import add_notes, approve_a_merge
from worker.api import create_api, dashboard
from worker.app import App, build_app
from worker.domain.types import Scope
from worker.reporting import runs_page, scope_health, trends
from worker.store.repositories.dashboard import ScopeFilter

RUN_LINK = re.compile(r'href="/dashboard/runs/([0-9a-f-]{36})"')


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def seeded(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[App, SeededStore]]:
    """One seeded store per backend, shared by the module's read-only tests."""
    if request.param == "sqlite":
        rules_only = make_sqlite_app(tmp_path_factory.mktemp("dash"), api_tokens=TOKENS)
    else:
        rules_only = make_postgres_app(api_tokens=TOKENS)
    modelled = build_app(rules_only.settings.model_copy(
        update={"llm_provider": "fake", "fake_llm_script": DEMO_SCRIPT}))
    store = seed_dashboard_store(modelled, rules_only)
    yield modelled, store
    modelled.dispose()
    if request.param == "sqlite":
        rules_only.dispose()
    else:
        drop_postgres_app(rules_only)


@pytest.fixture
def client(seeded: tuple[App, SeededStore]) -> Iterator[TestClient]:
    with TestClient(create_api(seeded[0])) as c:
        yield c


def _listed(html: str) -> list[str]:
    """Run ids in the runs table, in order (the health table links each scope's latest run)."""
    if '<table id="runs"' not in html:
        return []
    runs = html[html.index('<table id="runs"'):html.index("</table>", html.index('id="runs"'))]
    return RUN_LINK.findall(runs)


def test_pages_cover_every_run_once_problems_first(seeded: tuple[App, SeededStore],
                                                   client: TestClient,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Three runs a page: the pages hold each run exactly once, the unresolved blocked run
    first, and link to each other."""
    _, store = seeded
    monkeypatch.setattr(dashboard, "RUNS_PER_PAGE", 3)
    every = [r for runs in store.runs.values() for r in runs]
    seen: list[str] = []
    pages = -(-len(every) // 3)
    for page in range(1, pages + 1):
        html = client.get("/dashboard", params={"page": page}, headers=auth(ADMIN)).text
        seen += _listed(html)
        assert f"page {page} of {pages}" in html
        assert ('rel="next"' in html) == (page < pages) and ('rel="prev"' in html) == (page > 1)
    assert sorted(seen) == sorted(every) and len(seen) == len(set(seen))
    assert seen[0] == store.runs[QUIET.key][-1]


@pytest.mark.parametrize("text, scope", [
    ("quiet-bot", QUIET), (DEMO.key, DEMO), ("demo-assistant", DEMO)])
def test_scope_filter_by_agent_or_key(seeded: tuple[App, SeededStore], client: TestClient,
                                      text: str, scope: Scope) -> None:
    """?scope= takes an agent id or a scope key: runs and health rows of that scope only."""
    _, store = seeded
    html = client.get("/dashboard", params={"scope": text}, headers=auth(ADMIN)).text
    assert sorted(_listed(html)) == sorted(store.runs[scope.key])
    assert html.count('class="scope-health') == 1


def test_a_bad_scope_filter_is_one_line_and_shows_nothing(client: TestClient) -> None:
    """A malformed scope key is the API's class (422), said in one line; no run is listed."""
    r = client.get("/dashboard", params={"scope": '["agent", 1'}, headers=auth(ADMIN))
    assert r.status_code == 422
    assert 'scope filter: give an agent id or a scope key such as ["agent",null,null]' in (
        r.text.replace("&#34;", '"'))
    assert _listed(r.text) == []


def test_scoped_token_never_sees_another_scope(seeded: tuple[App, SeededStore],
                                               client: TestClient) -> None:
    """agent-2's token: its own run only, whatever the filter asks; another scope's run page
    is a 404 that does not say whether the run exists."""
    _, store = seeded
    own = client.get("/dashboard", headers=auth(AGENT_2)).text
    assert _listed(own) == store.runs[OTHER.key]
    assert "quiet-bot" not in own and "demo-assistant" not in own
    for text in ("quiet-bot", DEMO.key):
        html = client.get("/dashboard", params={"scope": text}, headers=auth(AGENT_2)).text
        assert "no such scope" in html and _listed(html) == [] and "quiet-bot" not in html
    other = store.runs[QUIET.key][0]
    r = client.get(f"/dashboard/runs/{other}", headers=auth(AGENT_2))
    assert r.status_code == 404 and "quiet-bot" not in r.text
    missing = client.get("/dashboard/runs/" + quote("no-such-run"), headers=auth(AGENT_2))
    assert missing.status_code == 404 and 'id="missing"' in missing.text
    assert 'id="missing"' in r.text  # the same page whether the run exists or not


def test_trends_agree_with_the_store(seeded: tuple[App, SeededStore]) -> None:
    """Over the demo scope's non-dry runs: the notes retired per phase add up to the notes no
    longer active, and the last point of the notes chart is the store's count by status."""
    app, store = seeded
    trend = trends(app, ScopeFilter(scope=DEMO), 30)
    assert len(trend["run_ids"]) == len(store.runs[DEMO.key]) - 1  # the dry run is left out
    with app.uow() as uow:
        now = uow.notes.count_by_status(DEMO)
    retired = sum(sum(v) for v in trend["retired"].values())
    assert retired == now.get("revoked", 0) + now.get("archived", 0)
    assert {s: v[-1] for s, v in trend["notes"].items()} == now
    assert sum(trend["calls"]) >= 3 and all(t > 0 for t in trend["tokens_in"][:1])


def _statements(app: App, client: TestClient, path: str) -> int:
    seen: list[str] = []

    def count(*args: Any) -> None:
        seen.append(args[2])

    event.listen(app.engine, "before_cursor_execute", count)
    try:
        assert client.get(path, headers=auth(ADMIN)).status_code == 200
    finally:
        event.remove(app.engine, "before_cursor_execute", count)
    return len(seen)


def test_statement_count_does_not_grow_with_runs_or_scopes(tmp_path: Path) -> None:
    """The overview and a run page cost the same number of statements for 2 runs in 2 scopes
    as for 8 runs in 5 scopes: everything is read per page, aggregated in SQL."""
    app = make_sqlite_app(tmp_path, api_tokens=TOKENS)
    store = SeededStore()
    try:
        with TestClient(create_api(app)) as client:
            for k in range(2):
                add_notes(app, {"agent_id": f"a{k}", "content": f"Fact {k}."})
                dream(app, Scope(f"a{k}"), store)
            small = _statements(app, client, "/dashboard")
            run_small = _statements(app, client, f"/dashboard/runs/{store.runs[Scope('a0').key][0]}")
            for k in range(5):
                add_notes(app, {"agent_id": f"a{k}", "content": f"Another fact {k}."})
                dream(app, Scope(f"a{k}"), store)
            assert _statements(app, client, "/dashboard") == small
            assert _statements(app, client,
                               f"/dashboard/runs/{store.runs[Scope('a4').key][0]}") == run_small
    finally:
        app.dispose()


def test_navigation_links_the_review_page_once_it_is_mounted(
        seeded: tuple[App, SeededStore]) -> None:
    """The top navigation links /dashboard/review only in an application that serves it."""
    from fastapi import APIRouter

    app, _ = seeded
    api = create_api(app)
    link = 'href="/dashboard/review"'
    with TestClient(api) as c:
        mounted = c.get("/dashboard/review", headers=auth(ADMIN)).status_code != 404
    if not mounted:
        with TestClient(api) as c:
            assert link not in c.get("/dashboard", headers=auth(ADMIN)).text
        extra = APIRouter()
        extra.add_api_route("/dashboard/review", lambda: {"page": "review"})
        api.include_router(extra)
    with TestClient(api) as c:
        assert link in c.get("/dashboard", headers=auth(ADMIN)).text


def test_baseline_is_each_scopes_last_counted_run_before_the_window(
        seeded: tuple[App, SeededStore]) -> None:
    """Where a multi-scope trend starts: the notes after each scope's last finished non-dry
    run before the window (the dry run between them is skipped)."""
    from worker.reporting import run_tree
    from worker.store.repositories.dashboard import NOTE_STATUSES, DashboardQueries

    app, store = seeded
    blocked, dry, allowed = store.runs[DEMO.key][:3]
    with app.uow() as uow:
        start = uow.runs.get(allowed).created_at  # type: ignore[union-attr]
        base = DashboardQueries(uow.session).baseline_notes([DEMO.key, QUIET.key], start)
    expected = run_tree(app, blocked)["totals"]["notes_after"]
    assert run_tree(app, dry)["dry_run"]
    assert base == {DEMO.key: {s: expected.get(s, 0) for s in NOTE_STATUSES}}


@pytest.mark.parametrize("path", [
    "/dashboard/runs/" + "r" * 65,  # past the 64 characters of an id
    "/dashboard/runs/%00",  # a NUL, which PostgreSQL cannot store
    "/dashboard?run=" + "r" * 65,  # the run box: not cut to 64 characters (another id)
])
def test_a_malformed_run_id_is_422_with_one_line_not_404(tmp_path: Path, path: str) -> None:
    """As the API answers (``/api/runs/{id}``: 422), not a 404 that says the run is missing:
    one line naming the problem and what a run id looks like."""
    app = make_sqlite_app(tmp_path, api_tokens=TOKENS)
    try:
        with TestClient(create_api(app)) as c:
            r = c.get(path, headers=auth(ADMIN), follow_redirects=False)
            api = c.get("/api/runs/" + path.rpartition("/")[2].removeprefix("dashboard?run="),
                        headers=auth(ADMIN))
    finally:
        app.dispose()
    assert (r.status_code, api.status_code) == (422, 422), r.text
    (line,) = re.findall(r'<p id="invalid" class="problem">([^<]*)</p>', r.text)
    assert line.startswith("malformed run id: it ") and "a run id is the UUID" in line, line
    assert 'id="missing"' not in r.text


def test_a_well_formed_unknown_run_id_is_still_404(tmp_path: Path) -> None:
    """Only a malformed id is 422: a well-formed one the caller cannot see stays 404."""
    app = make_sqlite_app(tmp_path, api_tokens=TOKENS)
    try:
        with TestClient(create_api(app)) as c:
            r = c.get("/dashboard/runs/" + "r" * 64, headers=auth(ADMIN))
    finally:
        app.dispose()
    assert r.status_code == 404 and 'id="missing"' in r.text


def test_a_malformed_query_is_a_one_line_page_not_json(tmp_path: Path) -> None:
    """A dashboard page's query FastAPI refuses (a page number that is not one) answers 422 as
    the API does, but as a page a browser shows: one line naming the field and the rule."""
    app = make_sqlite_app(tmp_path, api_tokens=TOKENS)
    try:
        with TestClient(create_api(app)) as c:
            r = c.get("/dashboard", params={"page": "abc"}, headers=auth(ADMIN))
            api = c.get("/api/runs", params={"limit": "abc"}, headers=auth(ADMIN))
    finally:
        app.dispose()
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html")
    (line,) = re.findall(r'<p id="invalid" class="problem">([^<]*)</p>', r.text)
    assert line.startswith("query.page: ") and "go back to the dashboard" in line, line
    assert api.status_code == 422 and api.json()["error"] == "invalid"  # the API keeps JSON


@pytest.mark.parametrize("query", ["scope=a&scope=b", "page=1&page=2", "token=x&token=y"])
def test_a_query_field_given_twice_is_a_one_line_page(tmp_path: Path, query: str) -> None:
    """A field the page reads given twice: the last was taken silently (the API's query says
    so: a 422); now the page's 422 naming it. One it does not read may still repeat."""
    app = make_sqlite_app(tmp_path, api_tokens=TOKENS)
    try:
        with TestClient(create_api(app)) as c:
            r = c.get(f"/dashboard?{query}", headers=auth(ADMIN), follow_redirects=False)
            run = c.get(f"/dashboard/runs/{'0' * 8}-0000-0000-0000-{'0' * 12}?token=x&token=y",
                        headers=auth(ADMIN), follow_redirects=False)
            leftovers = c.get("/dashboard?utm=1&utm=2", headers=auth(ADMIN))
    finally:
        app.dispose()
    name = query.partition("=")[0]
    for page in (r, run) if name == "token" else (r,):
        assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
        (line,) = re.findall(r'<p id="invalid" class="problem">([^<]*)</p>', page.text)
        assert line.startswith(f"query.{name}: given twice; give it once"), line
    assert leftovers.status_code == 200


def test_a_review_approval_is_no_successful_dream_on_the_dashboard(app: App) -> None:
    """A review approval applies one item in a run of its own that succeeds: the dashboard took
    it for the scope's last successful dream (scope health) and for the success that resolves
    the blocked dream before it (which dropped out of "needs attention"). Approving an item
    lifts no guard: the blocked dream still needs attention and the scope never dreamt."""
    from worker.runs import service

    scope = Scope("guarded")
    add_notes(app, *({"agent_id": "guarded", "content": f"Coupon code {i} for the spring sale",
                      "expires_at": "2026-01-01T00:00:00+00:00"} for i in range(12)))
    blocked = service.create_run(app, scope, force=True)
    assert blocked is not None and service.execute_run(app, blocked) == "blocked"
    decided = approve_a_merge(app, scope, blocked)
    everything = ScopeFilter(None, None)
    flags = {r["id"]: r["attention"] for r in runs_page(app, everything, 1, 25)["runs"]}
    assert flags == {blocked: True, decided.run_id: False}
    (health,) = scope_health(app, everything, 1, 20)["scopes"]
    assert health["last_succeeded"] is None

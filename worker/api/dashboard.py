"""The read-only operator dashboard: its own router, templates and token cookie.

Authenticated like the API (a bearer header, or ``?token=`` once, moved into an HttpOnly cookie
by a redirect); a scoped token only ever sees its own scope.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.routing import Match

from worker.api import dashboard_charts
from worker.api.auth import Principal, authenticate, bearer
from worker.api.dashboard_steps import child_view, counter_columns
from worker.app import App
from worker.domain.limits import ident_problem, scope_problem
from worker.domain.types import Scope
from worker.errors import NotFound
from worker.reporting import batch_calls_said
from worker.store.repositories.dashboard import ScopeFilter

TOKEN_COOKIE = "dream_token"
_TEMPLATES = Path(__file__).parent / "templates"
RUNS_PER_PAGE = 25
SCOPES_PER_PAGE = 20
CHILDREN_SHOWN = 200
# (label, path) of the pages in the dashboard's navigation; other page modules (the review
# page) append theirs with add_nav_link() when their router is included.
NAV_LINKS: list[tuple[str, str]] = [("Overview", "/dashboard")]
# Pages other modules serve (the review page): linked once their route is mounted.
KNOWN_PAGES = (("Review", "/dashboard/review"),)

router = APIRouter(include_in_schema=False)


def add_nav_link(label: str, path: str) -> None:
    if (label, path) not in NAV_LINKS:
        NAV_LINKS.append((label, path))


def nav_for(request: Request) -> list[tuple[str, str]]:
    """The navigation: the registered links, plus each known page this application mounts."""
    return [*NAV_LINKS, *(link for link in KNOWN_PAGES
                          if link not in NAV_LINKS and _serves(request, link[1]))]


def _serves(request: Request, path: str) -> bool:
    probe = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": []}
    return any(route.matches(probe)[0] == Match.FULL for route in request.app.routes)


def _counts(by_status: dict[str, int] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((by_status or {}).items())) or "—"


def scope_label(key: str) -> str:
    """``["agent","user",null]`` → ``agent / user`` (the full key stays in the link's title)."""
    try:
        scope = Scope.from_key(key)
    except (ValueError, TypeError):
        return key
    return " / ".join(str(p) for p in (scope.agent_id, scope.user_id, scope.company_id)
                      if p is not None)


def make_templates() -> Environment:
    """The dashboard's Jinja environment (autoescaped); other page modules may reuse it and
    extend ``base.html`` to get the navigation."""
    jinja = Environment(loader=FileSystemLoader(_TEMPLATES), autoescape=select_autoescape())
    jinja.globals.update(counts=_counts, nav_links=NAV_LINKS, counter_columns=counter_columns,
                         scope_label=scope_label, batch_calls_said=batch_calls_said)
    return jinja


_JINJA = make_templates()


def page_principal(request: Request, token: str | None) -> Principal | None:
    """Who opens a page: ``?token=``, the cookie, or a bearer header; None when nobody."""
    given = token or request.cookies.get(TOKEN_COOKIE) or bearer(
        request.headers.get("authorization"))
    return authenticate(request.app.state.tokens, given)


def login_page() -> HTMLResponse:
    return HTMLResponse(_JINJA.get_template("login.html").render(), status_code=401)


def keep_token(request: Request) -> Response:
    """Move a ``?token=`` into the cookie and drop it from the address (and browser history).
    Only a token that authenticates: an unknown value never reaches a header (one that is not
    latin-1 cannot be encoded there at all)."""
    if authenticate(request.app.state.tokens, request.query_params["token"]) is None:
        return login_page()
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(TOKEN_COOKIE, request.query_params["token"], httponly=True,
                        samesite="strict")
    return response


def parse_filter(text: str | None, who: Principal) -> tuple[ScopeFilter, str | None]:
    """The page's scope filter from ``?scope=`` (an agent id or a scope key), clamped to the
    caller's own scope; a problem is one line for the page (the filter then matches nothing)."""
    text = (text or "").strip()
    wanted = ScopeFilter()
    if text:
        if "\x00" in text or len(text) > 400:
            return _nothing(), "scope filter: too long or contains a NUL character"
        if text.startswith("["):
            try:
                scope = Scope.from_key(text)
                if not isinstance(scope.agent_id, str) or scope_problem(scope):
                    raise ValueError
            except (ValueError, TypeError, RecursionError):
                return _nothing(), ('scope filter: give an agent id or a scope key such as '
                                    '["agent",null,null]')
            wanted = ScopeFilter(scope=scope)
        else:
            wanted = ScopeFilter(agent_id=text)
    if who.scope is None:
        return wanted, None
    if (wanted.scope not in (None, who.scope)
            or wanted.agent_id not in (None, who.scope.agent_id)):
        return _nothing(), "no such scope"
    return ScopeFilter(scope=who.scope), None


def _nothing() -> ScopeFilter:
    # A key no stored scope can have (scope keys are JSON arrays).
    return ScopeFilter(scope=Scope("\x00"))


def _link(request: Request, **changes: Any) -> str:
    params = dict(request.query_params) | {k: str(v) for k, v in changes.items()}
    params.pop("token", None)
    return request.url.path + "?" + urlencode(params)


def _render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_JINJA.get_template(name).render(**context), status_code=status)


def invalid_page(what: str, who: str | None = None) -> HTMLResponse:
    """422 with one line: what the request got wrong and how it should look, as the API
    answers a malformed request (never 404: a malformed id names no run that might exist)."""
    return _render("invalid.html", status=422, who=who, what=what)


def run_id_problem(run_id: str) -> str | None:
    """Why ``run_id`` cannot be a run id (the API's 422), said with what one looks like."""
    problem = ident_problem(run_id)
    if problem is None:
        return None
    return (f"malformed run id: it {problem}; a run id is the UUID `dream runs list` shows, "
            "such as 0f3c9a52-8b1e-4d7a-9c2f-5e6d7a8b9c0d")


@router.get("/dashboard", response_class=HTMLResponse)
def overview(request: Request, token: str | None = None, run: str | None = None,
             scope: str | None = Query(None, max_length=400),
             page: int = Query(1, ge=1, le=100_000), spage: int = Query(1, ge=1, le=100_000),
             last: int = Query(30, ge=2, le=200), refresh: int = Query(60, ge=0, le=3600),
             ) -> Response:
    """Runs needing attention first, per-scope health and trends, filtered to one scope or
    agent; the page reloads itself every ``refresh`` seconds (0: never)."""
    from worker.reporting import runs_page, scope_health, trends

    if token:
        return keep_token(request)
    who = page_principal(request, None)
    if who is None:
        return login_page()
    if run:
        if problem := run_id_problem(run):  # not cut to 64 characters: that may name another run
            return invalid_page(problem, who.label)
        return RedirectResponse(f"/dashboard/runs/{quote(run, safe='')}", status_code=303)
    app: App = request.app.state.app
    f, problem = parse_filter(scope, who)
    runs = runs_page(app, f, page, RUNS_PER_PAGE)
    health = scope_health(app, f, spage, SCOPES_PER_PAGE)
    trend = trends(app, f, last)
    return _render(
        "dashboard.html", status=422 if problem and problem != "no such scope" else 200,
        nav_links=nav_for(request),
        who=who.label, admin=who.admin, problem=problem,
        scope_text=scope or "" if who.scope is None else who.scope.key,
        runs=runs, health=health, trend=trend, last=last, refresh=refresh,
        charts=dashboard_charts.trend_charts(trend),
        sparkline=dashboard_charts.sparkline,
        prev_runs=_link(request, page=page - 1), next_runs=_link(request, page=page + 1),
        prev_scopes=_link(request, spage=spage - 1), next_scopes=_link(request, spage=spage + 1),
        scope_link=lambda key: "/dashboard?" + urlencode({"scope": key}),
    )


def visible_tree(app: App, run_id: str, who: Principal) -> dict[str, Any] | None:
    """The run's step tree, or None when it does not exist or lies outside the caller's scope
    (``run_id`` well-formed: ``run_id_problem``)."""
    from worker.reporting import run_tree

    try:
        tree = run_tree(app, run_id)
    except NotFound:
        return None
    if who.scope is not None and tree["scope"] != who.scope.key:
        return None
    return tree


@router.get("/dashboard/runs/{run_id}", response_class=HTMLResponse)
def run_detail(request: Request, run_id: str, token: str | None = None) -> Response:
    """One run: its reason, each phase's counters as columns, each child step by what it judged."""
    if token:
        return keep_token(request)
    who = page_principal(request, None)
    if who is None:
        return login_page()
    if problem := run_id_problem(run_id):
        return invalid_page(problem, who.label)
    tree = visible_tree(request.app.state.app, run_id, who)
    if tree is None:
        return _render("missing.html", status=404, who=who.label,
                       what=f"no run with id {json.dumps(run_id[:64])} in your scopes")
    for step in tree["steps"]:
        children = step["children"]
        step["hidden_children"] = max(0, len(children) - CHILDREN_SHOWN)
        step["child_views"] = [child_view(c, tree) for c in children[:CHILDREN_SHOWN]]
    return _render("run.html", who=who.label, tree=tree, nav_links=nav_for(request),
                   scope_link="/dashboard?" + urlencode({"scope": tree["scope"]}),
                   undo_shown=CHILDREN_SHOWN)

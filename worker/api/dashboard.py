"""The read-only operator dashboard: its own router, templates and token cookie.

Authenticated like the API (a bearer header, or ``?token=`` once, kept in an HttpOnly cookie);
a scoped token only ever sees its own scope.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from worker.api.auth import Principal, authenticate, bearer
from worker.app import App
from worker.runs.service import RunError

TOKEN_COOKIE = "dream_token"
_TEMPLATES = Path(__file__).parent / "templates"

router = APIRouter(include_in_schema=False)


def _counts(by_status: dict[str, int] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((by_status or {}).items())) or "—"


def _numbers(output: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (output or {}).items()
                     if isinstance(v, int | float) and not isinstance(v, bool))


def make_templates() -> Environment:
    """The dashboard's Jinja environment (autoescaped); other page modules may reuse it."""
    jinja = Environment(loader=FileSystemLoader(_TEMPLATES), autoescape=select_autoescape())
    jinja.globals.update(counts=_counts, numbers=_numbers)
    return jinja


_JINJA = make_templates()


def page_principal(request: Request, token: str | None) -> Principal | None:
    """Who opens a page: ``?token=``, the cookie, or a bearer header; None when nobody."""
    given = token or request.cookies.get(TOKEN_COOKIE) or bearer(
        request.headers.get("authorization"))
    return authenticate(request.app.state.tokens, given)


def login_page() -> HTMLResponse:
    return HTMLResponse(_JINJA.get_template("login.html").render(), status_code=401)


def visible_tree(app: App, run_id: str, who: Principal) -> dict[str, Any] | None:
    """The run's step tree, or None when it does not exist or lies outside the caller's scope."""
    from worker.reporting import run_tree

    if "\x00" in run_id or len(run_id) > 64:
        return None
    try:
        tree = run_tree(app, run_id)
    except RunError:
        return None
    if who.scope is not None and tree["scope"] != who.scope.key:
        return None
    return tree


@router.get("/dashboard", response_class=HTMLResponse)
def dashboard(request: Request, token: str | None = None, run: str | None = None) -> Response:
    from worker.reporting import list_runs

    who = page_principal(request, token)
    if who is None:
        return login_page()
    app: App = request.app.state.app
    runs = list_runs(app, scope=who.scope, limit=20)
    selected = run or (runs[0]["id"] if runs else None)
    tree = visible_tree(app, selected, who) if selected else None
    html = _JINJA.get_template("dashboard.html").render(runs=runs, tree=tree, who=who.label)
    response = HTMLResponse(html)
    if token:
        response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
    return response

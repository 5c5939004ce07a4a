"""The dashboard's review page: open review items with approve / decline buttons.

Signed in like the dashboard (``?token=`` once, then the HttpOnly SameSite=Strict cookie, or a
bearer header). The buttons POST forms, so they are guarded against cross-site requests three
ways: the cookie is SameSite=Strict (a browser never sends it from another site), a request a
browser marks cross-site (``Sec-Fetch-Site``) or from another origin (``Origin``) is refused,
and every form carries a CSRF token — an HMAC of the caller's own API token, which another
site can neither read nor compute. A token in the query string never authorizes a POST.
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from worker.api.auth import Principal, authenticate, bearer
from worker.api.dashboard import TOKEN_COOKIE, keep_token, login_page, make_templates, nav_for
from worker.app import App
from worker.domain.limits import INT_MAX, scope_problem
from worker.domain.types import Scope
from worker.errors import DreamError

router = APIRouter(include_in_schema=False)
PAGE = "/dashboard/review"  # linked in the dashboard's navigation once mounted (nav_for)
_JINJA = make_templates()
_CSRF_CONTEXT = b"dream-worker review form v1"
_LINE_CONTEXT = b"dream-worker review outcome v1\n"


def csrf_token(token: str) -> str:
    """The form token of one API token: stable, unguessable without the API token."""
    return hmac.new(token.encode(), _CSRF_CONTEXT, hashlib.sha256).hexdigest()


def _line_seal(token: str, line: str) -> str:
    """The seal of an outcome line for one API token: the page shows a ``msg`` only with the
    seal its own redirect made, so a link someone else made ("approved item 9" when nothing
    was) shows nothing."""
    return hmac.new(token.encode(), _LINE_CONTEXT + line.encode(), hashlib.sha256).hexdigest()


def _given(request: Request) -> str | None:
    return request.cookies.get(TOKEN_COOKIE) or bearer(
        request.headers.get("authorization"))


def _scope_param(who: Principal, raw: str | None) -> Scope | None:
    """The scope the page shows: a scoped token's own; an admin's choice (a scope key)."""
    if who.scope is not None:
        return who.scope
    if not raw or len(raw) > 400 or "\x00" in raw:
        return None
    try:
        scope = Scope.from_key(raw)
    except (ValueError, TypeError, RecursionError):
        return None
    parts = (scope.agent_id, scope.user_id, scope.company_id)
    if not isinstance(scope.agent_id, str) or not all(p is None or isinstance(p, str)
                                                      for p in parts):
        return None
    return None if scope_problem(scope) else scope


def _page_data(app: App, who: Principal, scope: Scope | None) -> dict[str, Any]:
    from worker.review.service import recent_decisions, show_items

    with app.uow() as uow:
        scopes = [who.scope] if who.scope is not None else uow.review.scopes_with_open()
    items = show_items(app, scope, limit=50) if scope is not None else []
    decided = recent_decisions(app, scope, limit=20) if scope is not None else []
    return {"scopes": scopes, "scope": scope, "items": items, "decided": decided}


@router.get(PAGE, response_class=HTMLResponse)
def review_page(request: Request, token: str | None = None, scope: str | None = None,
                msg: str | None = None, seal: str | None = None) -> Response:
    if token:  # into the cookie, out of the address bar and the history (as the dashboard)
        return keep_token(request)
    given = _given(request)
    who = authenticate(request.app.state.tokens, given)
    if who is None or given is None:
        return login_page()
    app: App = request.app.state.app
    shown = _scope_param(who, scope)
    # An admin's malformed scope key is said, as the dashboard's filter says it (not an empty page).
    malformed = bool(scope) and who.scope is None and shown is None
    sealed = bool(msg) and hmac.compare_digest((seal or "").encode(),
                                               _line_seal(given, msg or "").encode())
    message = ('scope: give a scope key such as ["agent",null,null], or pick one below'
               if malformed else (msg or "")[:300] if sealed else "")
    html = _JINJA.get_template("review.html").render(
        who=who.label, current=PAGE, nav_links=nav_for(request), csrf=csrf_token(given),
        message=message, scope_key=shown.key if shown else "", **_page_data(app, who, shown))
    return HTMLResponse(html, status_code=422 if malformed else 200)


def _cross_site(request: Request) -> bool:
    """Whether the browser says the form was posted from another site. The Origin's host and
    port are compared with the Host header, not its scheme: behind a proxy that ends TLS the
    page is served as https:// while this server sees http://, and every same-page click was
    refused."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site in ("cross-site", "same-site"):
        return True
    origin = request.headers.get("origin")
    if origin is None or fetch_site == "same-origin":
        return False
    if origin == "null":
        return True
    return urllib.parse.urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower()


@router.post(PAGE + "/{item_id}/{action}")
def decide_from_page(
    request: Request, item_id: Annotated[int, Path(ge=1, le=INT_MAX)],
    action: Annotated[str, Path(pattern=r"^(approve|decline)$")],
    csrf: Annotated[str, Form(max_length=128)] = "",
    scope: Annotated[str, Form(max_length=400)] = "",
) -> Response:
    """One button: approve or decline ITEM_ID, then back to the page with the outcome line."""
    from worker.review.service import Selector, approve, decline

    given = _given(request)
    who = authenticate(request.app.state.tokens, given)
    if who is None or given is None:
        return login_page()
    if _cross_site(request):
        return HTMLResponse("<p>Refused: the browser says this form was posted from another "
                            "site. Open the review page itself and retry.</p>", status_code=403)
    if not hmac.compare_digest(csrf.encode(), csrf_token(given).encode()):
        return HTMLResponse("<p>Refused: this form did not come from the review page "
                            "(missing or wrong CSRF token). Reload the page and retry.</p>",
                            status_code=403)
    acting = _scope_param(who, scope)
    if acting is None:
        return HTMLResponse("<p>Choose a scope on the review page first.</p>", status_code=422)
    app: App = request.app.state.app
    by = f"dashboard:{who.label}"
    try:
        if action == "approve":
            line = approve(app, acting, Selector(item_id=item_id), by)[0].line
        else:
            line = decline(app, acting, Selector(item_id=item_id), by)[0].line
    except DreamError as exc:
        line = f"refused: {exc}"
    query = urllib.parse.urlencode({"msg": line, "seal": _line_seal(given, line),
                                    **({"scope": acting.key} if who.scope is None else {})})
    return RedirectResponse(f"{PAGE}?{query}", status_code=303)

"""The review API: list, show, approve and decline review items (worker.review.service).

A self-contained router (``create_api`` includes it). Bearer tokens as everywhere: a scoped
token acts on its own scope only (another scope's item is "not found"); an admin names the
scope. Refusals are worker.errors classes (404 unknown, 409 stale or already decided, 422
invalid), mapped by the API's one handler.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import Field

from worker.api.auth import Principal, authenticate, bearer
from worker.api.schemas import Body, Ident, ScopeIn
from worker.app import App
from worker.domain.limits import INT_MAX, scope_problem
from worker.domain.types import Scope
from worker.errors import InvalidInput as Invalid
from worker.errors import NotFound, Unauthorized

router = APIRouter(prefix="/api/review", tags=["review"])

ItemId = Annotated[int, Path(ge=1, le=INT_MAX, description="A review item id")]


def caller(request: Request) -> Principal:
    """The bearer token's principal, or the API's 401."""
    found = authenticate(request.app.state.tokens, bearer(request.headers.get("authorization")))
    if found is None:
        raise Unauthorized("missing or unknown bearer token")
    return found


Caller = Annotated[Principal, Depends(caller)]


class DecisionIn(Body):
    """Which items: exactly one of item_id, run_id (that run's open items) or all."""

    scope: ScopeIn | None = None
    item_id: int | None = Field(None, ge=1, le=INT_MAX)
    run_id: Ident | None = None
    all: bool = False
    by: str | None = Field(None, max_length=100, description="Who decides (recorded).")


class DeclineIn(DecisionIn):
    reason: str | None = Field(None, max_length=500)


def acting_scope(who: Principal, requested: Scope | None) -> Scope:
    """A scoped token's own scope (naming another is "not found"), or the admin's choice."""
    if who.scope is not None:
        if requested is not None and requested != who.scope:
            raise NotFound("no such scope")
        return who.scope
    if requested is None:
        raise Invalid("scope is required with an admin token")
    return requested


def query_scope(agent_id: str | None, user_id: str | None,
                company_id: str | None) -> Scope | None:
    if agent_id is None:
        if user_id is not None or company_id is not None:
            raise Invalid("user_id and company_id need agent_id")
        return None
    scope = Scope(agent_id, user_id, company_id)
    if problem := scope_problem(scope):
        raise Invalid(f"scope: {problem}")
    return scope


def _selector(body: DecisionIn) -> Any:
    from worker.review.service import Selector

    selector = Selector(body.item_id, body.run_id, body.all)
    selector.check()
    return selector


def _app(request: Request) -> App:
    app: App = request.app.state.app
    return app


def _approver(channel: str, who: Principal, by: str | None) -> str:
    named = " ".join((by or "").split())[:100]
    return f"{channel}:{who.label}" + (f" ({named})" if named else "")


ScopeQuery = Annotated[str | None, Query(max_length=64, pattern=r"^[^\x00]+$")]


@router.get("/items")
def list_review_items(
    request: Request, who: Caller, agent_id: ScopeQuery = None, user_id: ScopeQuery = None,
    company_id: ScopeQuery = None, run_id: ScopeQuery = None,
    status: Annotated[str, Query(pattern=r"^(open|approved|declined|stale|any)$")] = "open",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT_MAX)] = 0,
) -> dict[str, Any]:
    """The scope's review items, oldest first (open ones unless status says otherwise)."""
    from worker.review.service import list_items

    scope = acting_scope(who, query_scope(agent_id, user_id, company_id))
    items = list_items(_app(request), scope, status=None if status == "any" else status,
                       run_id=run_id, limit=limit, offset=offset)
    return {"scope": scope.as_dict(), "items": items}


@router.get("/items/{item_id}")
def show_review_item(request: Request, item_id: ItemId, who: Caller,
                     agent_id: ScopeQuery = None, user_id: ScopeQuery = None,
                     company_id: ScopeQuery = None) -> dict[str, Any]:
    """One item, with the current text and version of each note it names."""
    from worker.review.service import show_item

    scope = acting_scope(who, query_scope(agent_id, user_id, company_id))
    return show_item(_app(request), scope, item_id)


@router.post("/approve")
def approve_review_items(request: Request, body: DecisionIn, who: Caller) -> dict[str, Any]:
    """Apply the items in their own runs (undo each with POST /api/runs/{run_id}/undo); a
    stale single item is 409 and writes nothing."""
    from worker.review.service import approve

    scope = acting_scope(who, body.scope.to_scope() if body.scope else None)
    done = approve(_app(request), scope, _selector(body), _approver("api", who, body.by))
    return {"items": [d.as_dict() for d in done]}


@router.post("/decline")
def decline_review_items(request: Request, body: DeclineIn, who: Caller) -> dict[str, Any]:
    """Decline the items; each is not proposed again until one of its notes changes."""
    from worker.review.service import decline

    scope = acting_scope(who, body.scope.to_scope() if body.scope else None)
    done = decline(_app(request), scope, _selector(body), _approver("api", who, body.by),
                   body.reason)
    return {"items": [d.as_dict() for d in done]}

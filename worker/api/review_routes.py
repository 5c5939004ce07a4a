"""The review API: list, show, approve and decline review items (worker.review.service).

A self-contained router (``create_api`` includes it). Bearer tokens as everywhere: a scoped
token acts on its own scope only (another scope's item is "not found"); an admin names the
scope. Refusals are worker.errors classes (404 unknown, 409 stale or already decided, 422
invalid), mapped by the API's one handler.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import Field

from worker.api.auth import Principal
from worker.api.deps import Caller, DreamApp, query_scope, scope_for
from worker.api.schemas import Body, Ident, ScopeIn, VisibleText
from worker.app import App
from worker.domain.limits import INT_MAX, REASON_MAX, ident_problem
from worker.domain.types import Scope
from worker.errors import InvalidInput

router = APIRouter(prefix="/api/review", tags=["review"])

ItemId = Annotated[int, Path(ge=1, le=INT_MAX, description="A review item id")]


class DecisionIn(Body):
    """Which items: exactly one of item_id, run_id (that run's open items) or all."""

    scope: ScopeIn | None = None
    item_id: int | None = Field(None, ge=1, le=INT_MAX)
    run_id: Ident | None = None
    all: bool = False
    by: VisibleText | None = Field(None, description="Who decides (recorded; at most 100 "
                                   "characters).")


class DeclineIn(DecisionIn):
    reason: str | None = Field(None, max_length=REASON_MAX)


def _run_id(run_id: str | None) -> str | None:
    """A run id as every other surface takes it (`dream review --run`, MCP's ``run_id``): a
    control character, an invisible one or a look-alike is a 422 naming the rule, never a 404
    that echoes the id back (a terminal escape in a log or a reviewer's screen)."""
    if run_id is not None and (problem := ident_problem(run_id)):
        raise InvalidInput(f"run_id {problem}")
    return run_id


def _selector(body: DecisionIn) -> Any:
    from worker.review.service import Selector

    selector = Selector(body.item_id, _run_id(body.run_id), body.all)
    selector.check()
    return selector


def _approver(channel: str, who: Principal, by: str | None) -> str:
    named = " ".join((by or "").split())[:100]
    return f"{channel}:{who.label}" + (f" ({named})" if named else "")


def _known(app: App, who: Principal, scope: Scope) -> None:
    """An empty answer for a scope an admin named that has no notes, sessions or runs (a
    misspelt agent, a user where null was meant) is the typo's 404 (UnknownScope, as `dream
    review list` and fusion-candidates say it), never "no items" or an approval of nothing
    that reads "done". A scoped token's own scope names no typo: nothing is nothing there."""
    from worker.runs.service import ensure_scope_known

    if who.scope is None:
        ensure_scope_known(app, scope)


ScopeQuery = Annotated[str | None, Query(max_length=64, pattern=r"^[^\x00]+$")]


@router.get("/items")
def list_review_items(
    app: DreamApp, who: Caller, agent_id: ScopeQuery = None, user_id: ScopeQuery = None,
    company_id: ScopeQuery = None, run_id: ScopeQuery = None,
    status: Annotated[str, Query(pattern=r"^(open|approved|declined|stale|undone|any)$")] = "open",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT_MAX)] = 0,
) -> dict[str, Any]:
    """The scope's review items, oldest first (open ones unless status says otherwise)."""
    from worker.review.service import check_run_of, list_items

    scope = scope_for(who, query_scope(None, agent_id, user_id, company_id))
    items = list_items(app, scope, status=None if status == "any" else status,
                       run_id=_run_id(run_id), limit=limit, offset=offset)
    if not items:  # why there is nothing: a mistaken run or scope is a 404, not []
        _known(app, who, scope)
        if run_id is not None:
            check_run_of(app, scope, run_id)
    return {"scope": scope.as_dict(), "items": items}


@router.get("/items/{item_id}")
def show_review_item(app: DreamApp, item_id: ItemId, who: Caller,
                     agent_id: ScopeQuery = None, user_id: ScopeQuery = None,
                     company_id: ScopeQuery = None) -> dict[str, Any]:
    """One item, with the current text and version of each note it names."""
    from worker.review.service import show_item

    scope = scope_for(who, query_scope(None, agent_id, user_id, company_id))
    return show_item(app, scope, item_id)


@router.post("/approve")
def approve_review_items(app: DreamApp, body: DecisionIn, who: Caller) -> dict[str, Any]:
    """Apply the items in their own runs (undo each with POST /api/runs/{run_id}/undo); a
    stale single item is 409 and writes nothing. A batch answers 200 with each item's status
    and ``outcome``: done, blocked (the guard left an item open) or stale (an item changed or
    was decided meanwhile), as the CLI's exit code says."""
    from worker.review.items import decided_body
    from worker.review.service import approve

    scope = scope_for(who, body.scope)
    done = approve(app, scope, _selector(body), _approver("api", who, body.by))
    if not done:
        _known(app, who, scope)
    return decided_body(done)


@router.post("/decline")
def decline_review_items(app: DreamApp, body: DeclineIn, who: Caller) -> dict[str, Any]:
    """Decline the items; each is not proposed again until one of its notes changes."""
    from worker.review.items import decided_body
    from worker.review.service import decline

    scope = scope_for(who, body.scope)
    done = decline(app, scope, _selector(body), _approver("api", who, body.by),
                   body.reason)
    if not done:
        _known(app, who, scope)
    return decided_body(done)

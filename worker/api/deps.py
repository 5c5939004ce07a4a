"""What every router asks FastAPI for: the process's App, the caller behind the bearer token,
and the scope a request may act on (a scoped token's own; another scope is "not found")."""

from __future__ import annotations

import json
from collections import Counter
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from starlette.formparsers import MultiPartException

from worker.api.auth import Principal, authenticate, bearer
from worker.api.schemas import ScopeIn
from worker.app import App
from worker.domain.limits import DuplicateKey, ident_problem, scope_problem, unique_keys
from worker.domain.types import Scope
from worker.errors import InvalidInput, NotFound, RunNotFound, Unauthorized


def dream_app(request: Request) -> App:
    """The App ``create_api`` was built over (one engine, one embedder per process)."""
    app: App = request.app.state.app
    return app


def principal(request: Request) -> Principal:
    """The caller behind the bearer token, or 401."""
    found = authenticate(request.app.state.tokens, bearer(request.headers.get("authorization")))
    if found is None:
        raise Unauthorized("missing or unknown bearer token")
    return found


def known_query(request: Request) -> None:
    """A query parameter the endpoint does not take is a 422 naming it and the ones it takes:
    FastAPI drops it unread, so a misspelt filter (``statuss=blocked``, ``agent=bot``) listed
    every run of every scope as if it had matched, where a body's unknown field is refused."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    if _needs(dependant, principal):
        principal(request)  # no or a wrong token is the 401 before anything else is said
    taken = sorted(_query_names(dependant))
    if unknown := sorted(set(request.query_params) - set(taken)):
        raise InvalidInput(f"unknown query parameter {unknown[0]!r}; this endpoint takes "
                           f"{', '.join(taken) or 'none'}")
    counts = Counter(key for key, _ in request.query_params.multi_items())
    if twice := sorted(key for key, count in counts.items() if count > 1):  # the last was taken
        raise InvalidInput(f"query parameter {twice[0][:64]!r} is given twice; give it once "
                           "(the last value would be taken alone)")


async def unique_body_keys(request: Request) -> None:
    """A JSON body naming one key twice in an object is a 422 naming the key: FastAPI reads it
    with Python's json, which keeps the last value silently (an admin's scope with two
    ``user_id`` acted on the second, two ``content`` stored the second), where every importer
    refuses such a line. The body FastAPI read as JSON only; after ``known_query``, so no or a
    wrong token is still the 401 before anything is said of the body."""
    body = await request.body()
    kind = request.headers.get("content-type")
    if not body or (kind is not None and "json" not in kind.split(";")[0].lower()):
        return
    try:
        json.loads(body, object_pairs_hook=unique_keys)
    except DuplicateKey as exc:
        raise InvalidInput(f"body: key {str(exc)[:64]!r} appears twice in one object; keep one "
                           "(JSON readers keep either value)") from None
    except (ValueError, RecursionError):  # FastAPI has answered what it could not read
        return


async def page_fields_once(request: Request) -> None:
    """A dashboard page's query field, or a review form's field, given twice is the pages' 422
    (one line, ``handlers.invalid_request``): the last value was taken silently, as the API's
    query was. Only fields the page reads: a bookmark's leftovers change nothing shown."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    given = [("query", key) for key, _ in request.query_params.multi_items()
             if key in _query_names(dependant)]
    form_fields = {p.alias for p in dependant.body_params}
    kind = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if form_fields and kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        try:
            form = await request.form()
        except MultiPartException:  # FastAPI says what it could not read
            return
        given += [("body", key) for key, _ in form.multi_items() if key in form_fields]
    if twice := sorted(where for where, count in Counter(given).items() if count > 1):
        where, name = twice[0]
        raise RequestValidationError([{
            "type": "value_error", "loc": (where, name[:64]),
            "msg": "given twice; give it once (the last value would be taken alone)"}])


def _needs(dependant: Any, call: Any) -> bool:
    """Whether a route or a dependency under it depends on ``call``."""
    return any(sub.call is call or _needs(sub, call) for sub in dependant.dependencies)


def _query_names(dependant: Any) -> set[str]:
    """The query parameters a route and every dependency under it read."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


DreamApp = Annotated[App, Depends(dream_app)]
Caller = Annotated[Principal, Depends(principal)]


def scope_for(who: Principal, requested: ScopeIn | Scope | None) -> Scope:
    """The scope a request acts on (from its body or, through ``query_scope``, its query): a
    scoped token's own, or the admin's explicit choice."""
    wanted = requested.to_scope() if isinstance(requested, ScopeIn) else requested
    if who.scope is not None:
        if wanted is not None and wanted != who.scope:
            raise NotFound("no such scope")
        return who.scope
    if wanted is None:
        raise InvalidInput("scope is required with an admin token")
    return wanted


def query_scope(key: str | None, agent_id: str | None, user_id: str | None,
                company_id: str | None) -> Scope | None:
    """A scope named in the query string (a key, or its parts), checked like a body's."""
    if any(v is not None and ("\x00" in v or len(v) > 400)
           for v in (key, agent_id, user_id, company_id)):
        raise InvalidInput("scope parameters must be short and contain no NUL character")
    if key:
        scope = _scope_from_key(key)
    elif agent_id:
        scope = Scope(agent_id, user_id, company_id)
    elif user_id or company_id:
        raise InvalidInput("user_id and company_id need agent_id")
    else:
        return None
    if problem := scope_problem(scope):
        raise InvalidInput(f"scope: {problem}")
    return scope


def runs_filter(who: Principal, key: str | None, agent_id: str | None, user_id: str | None,
                company_id: str | None) -> tuple[Scope | None, dict[str, str]]:
    """What a runs list shows, as ``RunRepository.list`` takes it: one exact scope (``key``),
    or every scope whose parts equal the ones given (``agent_id`` and/or ``user_id`` /
    ``company_id``: `dream runs list --agent A --user U`), or everything. A scoped token sees
    its own scope only: a filter its scope does not match is "not found", one it matches
    lists its own scope, never the agent's other scopes."""
    named = {k: v for k, v in (("agent_id", agent_id), ("user_id", user_id),
                               ("company_id", company_id)) if v is not None}
    if key and named:
        raise InvalidInput("give scope (one scope) or agent_id/user_id/company_id (every scope "
                           "with those parts), not both")
    for name, value in named.items():  # any id, the erased users' placeholder too: a filter
        if problem := ident_problem(value):
            raise InvalidInput(f"{name} {problem}")
    exact = query_scope(key, None, None, None)
    if who.scope is None:
        return exact, named
    if exact not in (None, who.scope) or any(getattr(who.scope, k) != v for k, v in named.items()):
        raise NotFound("no such scope")
    return who.scope, {}


def _scope_from_key(key: str) -> Scope:
    try:
        scope = Scope.from_key(key)
    except (ValueError, TypeError, RecursionError):
        raise InvalidInput('scope must be a scope key such as ["agent",null,null]') from None
    parts = (scope.agent_id, scope.user_id, scope.company_id)
    if not isinstance(scope.agent_id, str) or not all(p is None or isinstance(p, str) for p in parts):
        raise InvalidInput('scope parts are strings or null, e.g. ["agent",null,null]')
    return scope


def visible_run(app: App, run_id: str, who: Principal) -> dict[str, Any]:
    """The run's step tree; NotFound when it does not exist or lies outside the caller's scope."""
    from worker.reporting import run_tree

    if problem := ident_problem(run_id):
        raise InvalidInput(f"run_id {problem}")
    tree = run_tree(app, run_id)
    if who.scope is not None and tree["scope"] != who.scope.key:
        raise RunNotFound(run_id)  # word for word what a missing run answers
    return tree


def check_undoable_by(app: App, run_id: str, who: Principal) -> None:
    """NotFound unless the caller may undo ``run_id``: a run it sees, or a write logged without
    a run (a host fuse, an erasure) that touched only the caller's scope (any, for an admin)."""
    from worker.safety.undo import logged_scopes

    scopes = logged_scopes(app, run_id)
    if not scopes:
        visible_run(app, run_id, who)
    elif who.scope is not None and scopes != {who.scope.key}:
        raise RunNotFound(run_id)

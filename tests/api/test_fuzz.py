"""R31 on the HTTP API: every route, found by walking the FastAPI app (so routes added later are
fuzzed too), fed hypothesis-generated bodies, path and query values and tokens: never a 5xx,
and a 4xx changes no row. Bodies start from a plausible instance of the route's own pydantic
model and get one hostile change (a value, a raw NaN/1e400/surrogate literal, an unknown field,
a body that is not an object or not UTF-8)."""

from __future__ import annotations

import types
import typing
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from tests.api.conftest import ADMIN, AGENT_1, TOKENS, auth
from tests.conftest import drop_postgres_app, make_postgres_app, make_sqlite_app
from tests.support.factories import add_notes, add_sessions
from tests.support.hostile import (
    RAW_VALUES,
    dumps,
    hostile_json,
    number_texts,
    store_digest,
    text_values,
    timestamp_texts,
)
from worker.api import create_api
from worker.app import App, build_app
from worker.config import Settings

CANARY = "Pumpernickel-canary-5521"
PLAUSIBLE_TEXT = {"agent_id": "agent-1", "user_id": "u", "content": "The user writes Python 3.12.",
                  "fused_content": "The user writes Python 3.12 with type hints.", "type": "Context"}


def routes(api: FastAPI) -> list[tuple[str, str, APIRoute]]:
    """Every (method, full path, route), through the routers ``create_api`` includes."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before 0.137.2 copies included routes into api.routes
        flat = [(route, getattr(route, "path", "")) for route in api.routes]
    else:  # since 0.137 an included router is one lazy node of api.routes
        flat = [(c.original_route, c.path or "") for c in iter_route_contexts(api.routes)]
    found = []
    for route, path in flat:
        if isinstance(route, APIRoute):
            for method in sorted(route.methods or ()):
                found.append((method, path, route))
    assert found, "no routes found: the walk no longer matches how FastAPI stores them"
    return found


def body_model(route: APIRoute) -> type[BaseModel] | None:
    if route.body_field is None:
        return None
    annotation = route.body_field.field_info.annotation
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def plausible(name: str, annotation: Any) -> st.SearchStrategy[Any]:
    """A value the field would accept, mostly; by field name where the name says more."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return st.one_of(st.none(), *(plausible(name, a) for a in args))
    if typing.get_origin(annotation) is typing.Annotated:
        return plausible(name, args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_instances(annotation)
    if typing.get_origin(annotation) is list:
        return st.lists(st.sampled_from(["n1", "n2", "n3"]), min_size=2, max_size=3, unique=True)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(0, 60)
    if annotation is float:
        return st.floats(0, 1)
    return st.just(PLAUSIBLE_TEXT.get(name, "agent-1"))


def model_instances(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    fields = {name: plausible(name, f.annotation) for name, f in model.model_fields.items()}
    return st.fixed_dictionaries({}, optional=fields)


def hostile_bodies(model: type[BaseModel]) -> st.SearchStrategy[bytes]:
    names = list(model.model_fields)
    valid = model_instances(model)
    one_value = st.builds(lambda body, k, v: dumps({**body, k: v}), valid,
                          st.sampled_from(names) | text_values(), hostile_json())
    nested = st.builds(lambda body, k, v: dumps({**body, "scope": {"agent_id": "agent-1", k: v}}),
                       valid, st.sampled_from(["agent_id", "user_id", "company_id", "extra"]),
                       hostile_json())
    raw = st.builds(lambda body, k, literal: dumps({**body, k: None}).replace(
        f"{dumps(k)}: null", f"{dumps(k)}: {literal}", 1), valid, st.sampled_from(names),
        st.sampled_from(RAW_VALUES))
    return st.one_of(
        valid.map(dumps), one_value, one_value, nested, raw, raw,
        hostile_json().map(dumps),
        st.sampled_from(["[" * 100_000, "{", "", "null", "\ufeff{}"]),
    ).map(lambda text: text.encode("utf-8", "surrogatepass")) | st.sampled_from(
        [b"\xff\xfe{}", b'{"content": "\xc3"}'])


def query_value(name: str) -> st.SearchStrategy[str]:
    if name == "since":
        return timestamp_texts()
    if name == "limit":
        return number_texts()
    return text_values()


def requests_for(method: str, path: str, route: APIRoute) -> st.SearchStrategy[dict[str, Any]]:
    path_values = {p.name: st.one_of(st.just("no-such-run"), text_values())
                   for p in route.dependant.path_params}
    query = {p.name: query_value(p.name) for p in route.dependant.query_params}
    model = body_model(route)
    return st.fixed_dictionaries({
        "path": st.fixed_dictionaries(path_values),
        "query": st.fixed_dictionaries({}, optional=query),
        "body": hostile_bodies(model) if model else st.sampled_from([None, b"{}", b"junk"]),
        "token": st.sampled_from([ADMIN, AGENT_1, None, "wrong-token-0123456789"]),
    })


def seed(app: App) -> None:
    add_notes(app, *({"id": f"n{i}", "agent_id": "agent-1", "content": f"{CANARY} writes Python 3.12, {i}"}
                     for i in range(1, 4)))
    add_sessions(app, 5, agent_id="agent-1")


def check_request(app: App, client: TestClient, method: str, path: str, call: dict[str, Any],
                  before: str) -> str:
    url = path
    for name, value in call["path"].items():
        url = url.replace("{" + name + "}", urllib.parse.quote(value.encode("utf-8", "surrogatepass"), safe=""))
    query = urllib.parse.urlencode({k: v.encode("utf-8", "surrogatepass") for k, v in call["query"].items()})
    headers = {"content-type": "application/json", **(auth(call["token"]) if call["token"] else {})}
    response = client.request(method, url + (f"?{query}" if query else ""), content=call["body"],
                              headers=headers)
    for thread in app.threads:  # a started run finishes before we compare
        thread.join(timeout=60)
    shown = f"{method} {url}?{query} body={(call['body'] or b'')[:200]!r} -> {response.status_code} {response.text[:300]}"
    assert response.status_code < 500, shown
    if response.status_code < 400:
        return store_digest(app)
    assert CANARY not in response.text, shown
    assert store_digest(app) == before, shown
    return before


@pytest.fixture
def fuzz_app(tmp_path: Path) -> Iterator[App]:
    app = make_sqlite_app(tmp_path, api_tokens=TOKENS)
    yield app
    app.dispose()


def _listed_routes() -> list[tuple[str, str, APIRoute]]:
    """The routes of an API over an in-memory store (listing them touches no database)."""
    app = build_app(Settings(database_url="sqlite:///:memory:", api_tokens=TOKENS,
                             llm_provider="none"))
    try:
        return routes(create_api(app))
    finally:
        app.dispose()


ROUTES = _listed_routes()


@pytest.mark.parametrize(("method", "path", "route"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_every_route_answers_hostile_requests_below_500(
    fuzz_app: App, method: str, path: str, route: APIRoute,
) -> None:
    """R31 on SQLite, one hypothesis run per route (200 examples in CI): admin, scoped, wrong
    and missing tokens; hostile bodies, path and query values; never a 5xx; a 4xx writes nothing."""
    seed(fuzz_app)
    state = {"before": store_digest(fuzz_app)}
    with TestClient(create_api(fuzz_app), raise_server_exceptions=False) as client:
        @given(call=requests_for(method, path, route))
        def fuzz(call: dict[str, Any]) -> None:
            state["before"] = check_request(fuzz_app, client, method, path, call, state["before"])

        fuzz()


@pytest.mark.postgres
def test_all_routes_on_postgres_answer_hostile_requests_below_500() -> None:
    """R31 on PostgreSQL (stricter about NUL, widths and integer ranges): one hypothesis run
    over every route."""
    app = make_postgres_app(api_tokens=TOKENS)
    try:
        seed(app)
        state = {"before": store_digest(app)}
        any_route = st.sampled_from(ROUTES).flatmap(
            lambda r: st.tuples(st.just(r), requests_for(*r)))
        with TestClient(create_api(app), raise_server_exceptions=False) as client:
            @given(pick=any_route)
            def fuzz(pick: tuple[tuple[str, str, APIRoute], dict[str, Any]]) -> None:
                (method, path, _), call = pick
                state["before"] = check_request(app, client, method, path, call, state["before"])

            fuzz()
    finally:
        drop_postgres_app(app)


def test_the_fuzzed_routes_are_every_route() -> None:
    """The walk finds every body-taking route (the list cannot silently shrink)."""
    listed = {(m, p) for m, p, _ in ROUTES}
    assert {("POST", "/api/notes"), ("POST", "/api/forgetting/fuse"), ("POST", "/api/runs"),
            ("GET", "/api/runs"), ("POST", "/api/runs/{run_id}/undo")} <= listed
    assert sum(body_model(r) is not None for _, _, r in ROUTES) >= 5

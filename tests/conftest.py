"""Shared fixtures: an App on a fresh SQLite file or a fresh PostgreSQL schema, per test."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from sqlalchemy import text

from tests.support.services import postgres_url
from worker.app import App, build_app
from worker.config import Settings
from worker.store.db import make_engine
from worker.store.migrate import upgrade

# CI (.ci/run exports HYPOTHESIS_PROFILE=ci) runs every property suite with >= 200 examples.
hypothesis_settings.register_profile(
    "ci", max_examples=200, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
hypothesis_settings.register_profile(
    "dev", max_examples=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# What a test needs beyond Python: any of these fixtures, a service marker or tests/integration/
# (tests/README.md). A test that needs none of them is marked `unit` (`make test-fast`).
_STORE_FIXTURES = frozenset({"app", "sqlite_app", "pg_app", "api_app", "sqlite_api_app", "client",
                             "tmp_path", "tmp_path_factory"})
_SERVICE_MARKS = ("postgres", "redis", "celery", "browser", "slow")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit: needs nothing but Python (set by tests/conftest.py)")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if (item.nodeid.startswith(("tests/integration/", "tests/bench/"))
                or _STORE_FIXTURES & set(getattr(item, "fixturenames", ()))
                or any(item.get_closest_marker(name) for name in _SERVICE_MARKS)):
            continue
        item.add_marker(pytest.mark.unit)


def _settings(url: str, **overrides: object) -> Settings:
    return Settings(database_url=url, llm_provider="none", **overrides)  # type: ignore[arg-type]


def make_sqlite_app(tmp_path: Path, **overrides: object) -> App:
    app = build_app(_settings(f"sqlite:///{tmp_path / 'dream.db'}", **overrides))
    upgrade(app.engine)
    return app


def make_postgres_app(**overrides: object) -> App:
    base = postgres_url()
    schema = "t_" + uuid.uuid4().hex[:12]
    admin = make_engine(base)
    with admin.begin() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    admin.dispose()
    sep = "&" if "?" in base else "?"
    url = f"{base}{sep}options=-csearch_path%3D{schema},public"
    app = build_app(_settings(url, **overrides))
    upgrade(app.engine)
    return app


def drop_postgres_app(app: App) -> None:
    found = re.search(r"search_path%3D(t_[0-9a-f]{12}),", app.settings.database_url)
    schema = found.group(1) if found else None  # the schema make_postgres_app made
    app.dispose()
    if schema:
        admin = make_engine(postgres_url())
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


@contextmanager
def app_on(backend: str, tmp_path: Path, **overrides: object) -> Iterator[App]:
    """An App on a fresh SQLite file (``backend`` "sqlite") or a fresh PostgreSQL schema,
    disposed (the schema dropped) when the block ends: the body of every two-backend fixture."""
    a = make_sqlite_app(tmp_path, **overrides) if backend == "sqlite" else \
        make_postgres_app(**overrides)
    try:
        yield a
    finally:
        if backend == "sqlite":
            a.dispose()
        else:
            drop_postgres_app(a)


@pytest.fixture
def sqlite_app(tmp_path: Path) -> Iterator[App]:
    app = make_sqlite_app(tmp_path)
    yield app
    app.dispose()


@pytest.fixture
def pg_app() -> Iterator[App]:
    app = make_postgres_app()
    yield app
    drop_postgres_app(app)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    """The same test on SQLite and on PostgreSQL+pgvector."""
    with app_on(request.param, tmp_path) as a:
        yield a


@pytest.fixture
def llm_stub() -> Iterator[object]:
    """A local OpenAI-compatible HTTP server (tests/support/llm_stub.py): .url, .set_handler, .requests."""
    from tests.support.llm_stub import LLMStub

    stub = LLMStub().start()
    yield stub
    stub.stop()

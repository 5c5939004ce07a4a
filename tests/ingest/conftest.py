"""Fixtures the ingest tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_sqlite_app
from worker.app import App


@pytest.fixture
def other(tmp_path: Path) -> Iterator[App]:
    """A second, empty SQLite store: where an export is imported."""
    target = tmp_path / "target"
    target.mkdir()
    app = make_sqlite_app(target)
    yield app
    app.dispose()

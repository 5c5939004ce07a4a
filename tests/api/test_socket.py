"""The API over a real uvicorn socket: concurrent identical writes make one row (the dashboard
in a real browser: test_dashboard_browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import func, select

from tests.api.conftest import AGENT_1, auth
from tests.support.serve import serve
from worker.app import App
from worker.store.models import NoteRow


@pytest.fixture
def base_url(api_app: App) -> Iterator[str]:
    yield from serve(api_app)


def test_concurrent_identical_writes_make_one_row(api_app: App, base_url: str) -> None:
    """Sixteen clients POST the same note at once: one ADD, the rest NOOP with the same id, one
    row in the database (the derived id collides on the primary key)."""
    body = {"content": "The user's staging database is reset every Monday at 06:00 UTC."}

    def post(_: int) -> httpx.Response:
        with httpx.Client(base_url=base_url, timeout=30) as c:
            return c.post("/api/notes", headers=auth(AGENT_1), json=body)

    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(post, range(16)))
    assert all(r.status_code in (200, 201) for r in replies), [r.text for r in replies]
    actions = [r.json()["action"] for r in replies]
    assert actions.count("ADD") == 1 and actions.count("NOOP") == 15
    assert len({r.json()["id"] for r in replies}) == 1
    with api_app.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(NoteRow)) == 1
        assert uow.session.scalar(select(NoteRow.access_count)) == 0  # a statement is no read

"""The API over a real uvicorn socket: concurrent identical writes, and the dashboard in a real
headless Chromium."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import uvicorn
from sqlalchemy import func, select

from tests.integration.api.conftest import AGENT_1, auth
from tests.support.factories import add_notes
from tests.support.services import unavailable
from worker.api import create_api
from worker.app import App
from worker.store.models import NoteRow


def serve(app: App) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_api(app), log_config=None, access_log=False,
                                           limit_concurrency=64))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


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
        assert uow.session.scalar(select(NoteRow.access_count)) == 15


@pytest.mark.browser
def test_dashboard_renders_a_seeded_run_in_headless_chromium(sqlite_api_app: App) -> None:
    """A real browser loads /dashboard with a token and the DOM shows the run, its phases and
    notes before → after."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        unavailable("chromium is not installed (apt-get install -y chromium)")
    from worker.domain.types import Scope
    from worker.runs.service import create_run, execute_run

    add_notes(sqlite_api_app, {"content": "Prefers tea.",
                               "expires_at": "2000-01-01T00:00:00+00:00"})
    run_id = create_run(sqlite_api_app, Scope("agent-1"), force=True)
    assert run_id
    execute_run(sqlite_api_app, run_id)
    for url in serve(sqlite_api_app):
        out = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-dev-shm-usage",
             "--user-data-dir=" + str(sqlite_api_app.settings.database_url.split("///")[-1])
             + ".chromium", "--dump-dom", f"{url}/dashboard?token={AGENT_1}"],
            capture_output=True, text=True, timeout=120,
        )
    dom = out.stdout
    assert '<table id="runs">' in dom, out.stderr[-2000:]
    assert run_id in dom and run_id[:8] in dom
    for phase in ("consolidate", "contradictions", "prune", "archive"):
        assert f"<strong>{phase}</strong>" in dom
    assert "→" in dom and "active 1" in dom

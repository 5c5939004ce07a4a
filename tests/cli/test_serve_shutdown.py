"""`dream api` and `dream mcp --transport http` stopped by SIGTERM (a deploy's rollout): new
connections are refused at once, the requests in flight are answered (for at most
DREAM_API_SHUTDOWN_SECONDS), the dreams the server started finish, and the process exits 0
(worker.cli.serve). Real processes on SQLite; a request is kept in flight by a client sending
half of it, or by the test holding SQLite's write lock."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.test_commands import dream
from tests.cli.test_serve import SERVERS, TOKENS
from tests.conftest import make_sqlite_app
from tests.runs.test_stopped import PYTHON

SCOPED = "scoped-token-0123456789"
ROOT = Path(__file__).parents[2]


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    app = make_sqlite_app(tmp_path)
    yield app.settings.database_url
    app.dispose()


@contextmanager
def _serving(database: str, command: list[str], **env: str) -> Iterator[tuple[Any, str]]:
    """`dream COMMAND --port 0` running, and the base URL it said it listens on."""
    environ = {**{k: v for k, v in os.environ.items() if not k.startswith("DREAM_")},
               "DREAM_DATABASE_URL": database, "DREAM_API_TOKENS": TOKENS, "DREAM_LOG_FORMAT": "console",
               "DREAM_LLM_PROVIDER": "none", "PYTHONPATH": str(ROOT), **env}
    proc = subprocess.Popen([sys.executable, "-m", "worker.cli", *command, "--port", "0"],
                            env=environ, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "Uvicorn running on http://127.0.0.1:" in line:
                break
        else:
            pytest.fail("the server never said where it listens")
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # never a full pipe
        yield proc, line.split("running on ", 1)[1].split()[0]
    finally:
        proc.kill()
        proc.wait(timeout=30)


@contextmanager
def _write_lock(database: str) -> Iterator[None]:
    """SQLite's write lock, held by the test: a request that writes waits for it."""
    holder = sqlite3.connect(database.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


def _in_background(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.setdefault("answer", call()), daemon=True)
    thread.start()
    return thread, out


def _refused(base: str) -> bool:
    """Whether a new connection to the server is refused, waiting up to 5 s for it."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/livez", timeout=1)
        except httpx.ConnectError:
            return True
        time.sleep(0.05)
    return False


# (command, path, body, status): a request each server answers
REQUESTS = [
    (["api"], "/api/notes", json.dumps({"content": "User likes oolong tea"}), 201),
    (["mcp", "--transport", "http"], "/mcp", json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}), 200),
]


def _head(netloc: str, path: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {netloc}\r\nAuthorization: Bearer {SCOPED}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


@pytest.mark.parametrize(("command", "path", "body", "status"), REQUESTS, ids=["api", "mcp"])
def test_sigterm_answers_the_request_in_flight_refuses_new_ones_and_exits_0(
        url: str, command: list[str], path: str, body: str, status: int) -> None:
    """A client has sent half its request when SIGTERM arrives: new connections are refused
    while the server waits, the rest of the request sent then is answered in full, and the
    server exits 0 (before: the SIGTERM uvicorn raised again after its shutdown killed the
    process, exit -15; with no wait for it the request would be cut)."""
    with _serving(url, command) as (proc, base):
        host, port = base.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as client:
            data = body.encode()
            client.sendall(_head(f"{host}:{port}", path, len(data)) + data[:10])
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            assert _refused(base)
            assert proc.poll() is None  # still waiting for the request in flight
            client.sendall(data[10:])
            answer = client.makefile("rb").readline()
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer
        assert proc.wait(timeout=30) == 0


def test_sigterm_lets_a_dream_the_api_started_finish(url: str) -> None:
    """No broker: a dream the API started runs in a thread of the server. SIGTERM while the
    request starting it waits: the answer comes, the dream finishes before the process exits 0
    (before: the re-raised SIGTERM killed the process, the run left holding its scope)."""
    with _serving(url, ["api"]) as (proc, base):
        known = httpx.post(f"{base}/api/notes", json={"content": "User likes oolong tea"},
                           headers={"Authorization": f"Bearer {SCOPED}"}, timeout=30)
        assert known.status_code == 201, known.text  # the scope exists: a run may start
        with _write_lock(url):
            thread, out = _in_background(lambda: httpx.post(
                f"{base}/api/runs", json={"force": True},
                headers={"Authorization": f"Bearer {SCOPED}"}, timeout=60))
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            assert _refused(base)
        thread.join(timeout=30)
        assert out["answer"].status_code == 202, out["answer"].text
        run_id = out["answer"].json()["run_id"]
        assert proc.wait(timeout=60) == 0
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        (status,) = db.execute("SELECT status FROM dream_runs WHERE id = ?", (run_id,)).fetchone()
    assert status in ("succeeded", "partial"), status


@pytest.mark.parametrize("command", SERVERS, ids=["api", "mcp"])
def test_a_request_that_never_ends_holds_sigterm_only_for_the_grace_time(
        url: str, command: list[str]) -> None:
    """A client that sent half a body and nothing more: SIGTERM waits for it at most
    DREAM_API_SHUTDOWN_SECONDS, then the server exits 0 (before: it waited forever, until the
    deploy's SIGKILL)."""
    path = "/api/notes" if command == ["api"] else "/mcp"
    with _serving(url, command, DREAM_API_SHUTDOWN_SECONDS="2") as (proc, base):
        host, port = base.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port))) as stuck:
            stuck.sendall(_head(f"{host}:{port}", path, 100) + b"{")
            time.sleep(1.0)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            assert time.monotonic() - started < 15


def test_a_second_sigterm_while_the_api_waits_for_its_dream_gives_the_run_back(
        url: str, tmp_path: Path) -> None:
    """A dream the API started waits on a slow model: the first SIGTERM stops the serving and
    the server waits for the dream; the second ends the process now, exit 13, the run given
    back as interrupted (`dream run --due` resumes it) and named on stderr. Before, the second
    SIGTERM killed the process there (exit -15) and the run stayed `running` for an hour."""
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps({"rules": [{"prompt": "consolidate", "latency": 120, "reply": {
        "should_consolidate": False, "content": "", "type": "Context", "source_ids": [],
        "reason": "different things"}}]}))
    notes = tmp_path / "notes.jsonl"  # one cluster the model is asked about (tests/runs)
    notes.write_text("".join(json.dumps({**n, "agent_id": "agent-1"}) + "\n" for n in PYTHON))
    assert dream(url, "notes", "import", str(notes)).exit_code == 0
    with _serving(url, ["api"], DREAM_LLM_PROVIDER="fake",
                  DREAM_FAKE_LLM_SCRIPT=str(slow)) as (proc, base):
        started = httpx.post(f"{base}/api/runs", json={"force": True},
                             headers={"Authorization": f"Bearer {SCOPED}"}, timeout=30)
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        time.sleep(1.5)  # the dream is in its model call
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.5)
        assert proc.poll() is None, _status(url, run_id)  # served no more, waiting for the dream
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 13
    assert _status(url, run_id) == "interrupted"


def _status(url: str, run_id: str) -> str:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        (status,) = db.execute("SELECT status FROM dream_runs WHERE id = ?", (run_id,)).fetchone()
    return str(status)

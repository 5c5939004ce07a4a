"""R31 on the HTTP API: NaN/Infinity/1e400, lone surrogates, out-of-range timestamps are 4xx
with no note text in logs; request bodies are size-limited before authentication and parsing."""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, AGENT_1, TOKENS, auth
from tests.conftest import make_sqlite_app
from tests.support.factories import add_notes
from tests.support.safety import all_rows_text
from tests.support.serve import serve
from worker.api import create_api
from worker.app import App
from worker.domain.types import Scope
from worker.logging import configure_logging

CANARY = "Quokka-canary-9052"
JSON = {"content-type": "application/json"}

# Raw bodies: Python's json (and so FastAPI) reads NaN, Infinity and 1e400 (as inf), and turns
# "\ud800" escapes into lone surrogates; each used to be a 500.
HOSTILE = [
    ("POST", "/api/forgetting/fusion-candidates", '{"scope":{"agent_id":"a"},"threshold":NaN}'),
    ("POST", "/api/forgetting/fusion-candidates", '{"scope":{"agent_id":"a"},"threshold":Infinity}'),
    ("POST", "/api/forgetting/fusion-candidates", '{"scope":{"agent_id":"a"},"threshold":1e400}'),
    ("POST", "/api/forgetting/fusion-candidates", '{"scope":{"agent_id":"a"},"limit":1e400}'),
    ("POST", "/api/forgetting/fusion-candidates", '{"scope":{"agent_id":"\\ud800"}}'),
    ("POST", "/api/notes", '{"scope":{"agent_id":"a"},"content":"' + CANARY + ' \\ud800"}'),
    ("POST", "/api/notes", '{"scope":{"agent_id":"a"},"content":"' + CANARY + '","importance":NaN}'),
    ("POST", "/api/notes", '{"scope":{"agent_id":"a"},"content":"' + CANARY + '","importance":-Infinity}'),
    ("POST", "/api/notes", '{"scope":{"agent_id":"a"},"content":"' + CANARY + '","type":"\\udfff"}'),
    ("POST", "/api/notes", '{"scope":{"agent_id":"' + "\\u00e9" * 64 + '","user_id":"' + "\\u00e9" * 64
     + '"},"content":"' + CANARY + '"}'),
    ("POST", "/api/notes", '{"scope":{"agent_id":"a"},"content":"' + CANARY + '","\\ud800":1}'),
    ("POST", "/api/forgetting/fuse", '{"source_ids":["n1","n2"],"fused_content":"' + CANARY + ' \\ud800"}'),
    ("POST", "/api/forgetting/fuse", '{"source_ids":["n1","n2"],"fused_content":"x","fused_importance":NaN}'),
    ("POST", "/api/forgetting/fuse", '{"source_ids":["n1","\\udc00"],"fused_content":"x"}'),
    ("POST", "/api/forgetting/keep-apart", '{"source_ids":["n1","\\ud800"]}'),
    ("POST", "/api/runs", '{"scope":{"agent_id":"\\ud800"}}'),
    ("POST", "/api/runs", '{"scope":{"agent_id":"a"},"force":NaN}'),
    ("POST", "/api/runs/x/undo", '{"force_cascade":Infinity}'),
    ("POST", "/api/notes", "[" * 100_000),
    ("GET", "/api/runs?since=0001-01-01T00:00:00%2B01:00", None),
    ("GET", "/api/runs?since=9999-12-31T23:59:59-01:00", None),
    ("GET", "/api/runs?limit=1e400", None),
    # scope keys in the query: parts that are not strings, surrogates, NUL, over-long parts
    ("GET", '/api/runs?scope=["a",1,null]', None),
    ("GET", '/api/runs?scope=["\\ud800",null,null]', None),
    ("GET", '/api/runs?scope=["a","\\u0000",null]', None),
    ("GET", "/api/runs?agent_id=" + "a" * 65, None),
    # scope parts that print like another tenant's (before: 201, a second "a" or a reversed id)
    ("POST", "/api/notes", '{"scope":{"agent_id":"a\\u200b"},"content":"' + CANARY + '"}'),
    ("POST", "/api/notes", '{"scope":{"agent_id":"a","user_id":"u\\u202e"},"content":"' + CANARY + '"}'),
    ("POST", "/api/runs", '{"scope":{"agent_id":"a "},"force":true}'),
    ("POST", "/api/forgetting/keep-apart", '{"source_ids":["n1","n2\\u2060"]}'),
]


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The production structlog pipeline (JSON renderer) into a buffer."""
    old = structlog.get_config()
    buffer = io.StringIO()
    configure_logging("json", "DEBUG")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=buffer))
    try:
        yield buffer
    finally:
        structlog.configure(**old)


@pytest.mark.parametrize(("method", "path", "body"), HOSTILE,
                         ids=[f"{m} {p.split('?')[0]}#{i}" for i, (m, p, _) in enumerate(HOSTILE)])
def test_hostile_bodies_are_4xx_change_nothing_and_log_no_text(
    api_app: App, json_logs: io.StringIO, caplog: pytest.LogCaptureFixture,
    method: str, path: str, body: str | None,
) -> None:
    """Item 8 and siblings: every hostile number, string or timestamp answers 4xx with a JSON
    `detail`, on SQLite and PostgreSQL; no row changes; no log line holds the note text."""
    caplog.set_level(logging.DEBUG)
    add_notes(api_app, {"id": "n1", "agent_id": "a", "content": "The user writes Python 3.12."},
              {"id": "n2", "agent_id": "a", "content": "The user writes Python 3.12 with hints."})
    before = all_rows_text(api_app)
    with TestClient(create_api(api_app), raise_server_exceptions=False) as client:
        r = client.request(method, path, content=body.encode() if body else None,
                           headers={**auth(ADMIN), **JSON})
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert r.json()["detail"]
    assert CANARY not in r.text
    assert all_rows_text(api_app) == before
    assert CANARY not in json_logs.getvalue() + caplog.text


def test_an_unexpected_error_is_a_plain_500_logged_as_frames_only(
    sqlite_api_app: App, json_logs: io.StringIO, caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug that raises with note text in its message still answers 500, but neither the
    response nor any log line carries the message; the log names the error type and frames."""
    caplog.set_level(logging.DEBUG)
    api = create_api(sqlite_api_app)

    @api.get("/boom")
    def boom() -> None:
        raise RuntimeError(f"could not merge {CANARY}")

    with TestClient(api, raise_server_exceptions=False) as client:
        r = client.get("/boom")
    assert r.status_code == 500 and CANARY not in r.text
    logs = json_logs.getvalue()
    assert "api.unhandled_error" in logs and "RuntimeError" in logs and "in boom" in logs
    assert CANARY not in logs + caplog.text


@pytest.fixture
def small_limit_app(tmp_path: Path) -> Iterator[App]:
    app = make_sqlite_app(tmp_path, api_tokens=TOKENS, api_max_body_bytes=4096)
    yield app
    app.dispose()


def test_bodies_over_the_limit_are_413_before_authentication(small_limit_app: App) -> None:
    """Item 9: with DREAM_API_MAX_BODY_BYTES=4096, a larger body is 413 whether it declares its
    length or streams it chunked, with or without a token (authentication never runs); a body
    under the limit is served as before."""
    note = {"scope": {"agent_id": "agent-1"}, "content": "x" * 5000}
    big = json.dumps(note).encode()
    before = all_rows_text(small_limit_app)
    with TestClient(create_api(small_limit_app)) as client:
        for headers in ({}, auth("wrong-token-0123456789"), auth(ADMIN)):
            declared = client.post("/api/notes", content=big, headers={**headers, **JSON})
            assert declared.status_code == 413, declared.text
            assert declared.json()["error"] == "too_large"
            assert "DREAM_API_MAX_BODY_BYTES" in declared.json()["detail"]
            chunked = client.post("/api/notes", content=iter([big[:3000], big[3000:]]),
                                  headers={**headers, **JSON})
            assert chunked.status_code == 413, chunked.text
        assert all_rows_text(small_limit_app) == before
        fine = client.post("/api/notes", json={"content": "The user likes tea."},
                           headers=auth(AGENT_1))
        assert fine.status_code == 201
        assert client.post("/api/notes", json={"content": "x"},
                           headers={"content-length": "12abc", **auth(AGENT_1)}).status_code == 400


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


@pytest.fixture
def sqlite_base_url(sqlite_api_app: App) -> Iterator[str]:
    yield from serve(sqlite_api_app)


class PeakRss:
    """Samples this process's resident memory every 5 ms while active."""

    def __init__(self) -> None:
        self.baseline = self.peak = _rss_bytes()
        self._running = True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while self._running:
            self.peak = max(self.peak, _rss_bytes())
            time.sleep(0.005)

    def stop(self) -> int:
        self._running = False
        self._thread.join()
        return self.peak - self.baseline


def test_a_huge_unauthenticated_upload_costs_no_memory(sqlite_base_url: str) -> None:
    """Item 9 over a real uvicorn socket: a declared 300 MB body is refused unread, and a chunked
    upload with no length is cut off after the limit; the process's resident memory stays flat
    (the adversarial pass saw +590 MB for 300 MB)."""
    host, port = sqlite_base_url.removeprefix("http://").split(":")
    rss = PeakRss()
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(b"POST /api/notes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 300000000\r\n\r\n")
        assert conn.recv(65536).startswith(b"HTTP/1.1 413")
    sent = 0
    chunk = b"a" * (1 << 20)
    answer = b""
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(b"POST /api/notes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.setblocking(False)
        while sent < 300 << 20 and not answer:
            try:
                conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                pass
            try:
                answer = conn.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                break
    growth = rss.stop()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    assert sent < 64 << 20  # the server answered long before 300 MB went out
    assert growth < 64 << 20, growth


def test_host_functions_refuse_unstorable_text_for_every_caller(api_app: App) -> None:
    """The MCP tools and Python callers reach worker.host without the API's schemas: a lone
    surrogate or a NUL in remembered or fused text is a HostError (422), not a database error,
    and nothing is written (SQLite and PostgreSQL)."""
    from worker.domain.types import Scope
    from worker.host import HostError, fuse, remember

    add_notes(api_app, {"id": "n1", "agent_id": "a", "content": "The user writes Python 3.12."},
              {"id": "n2", "agent_id": "a", "content": "The user writes Python 3.12 with hints."})
    before = all_rows_text(api_app)
    for text in ("tea \ud800 time", "tea \x00 time"):
        with pytest.raises(HostError) as refused:
            remember(api_app, Scope("a"), text, "Context", 0.5)
        assert refused.value.status == 422
        with pytest.raises(HostError):
            fuse(api_app, ["n1", "n2"], text)
    assert all_rows_text(api_app) == before


@pytest.mark.parametrize(("body", "detail"), [
    ('{"scope":{"agent_id":"a"},"content":"' + CANARY + ' \\ud800"}', "body: content is not valid Unicode"),
    ('{"scope":{"agent_id":"a","user_id":"\\udc00"},"content":"x"}', "body: scope.user_id is not valid"),
    ('{"scope":{"agent_id":"a"},"content":"x","conversation_id":"c\\u0000"}',
     "body: conversation_id contains a NUL character"),
])
def test_unstorable_text_is_refused_naming_its_field(api_app: App, body: str, detail: str) -> None:
    """The 422 names the field that holds the lone surrogate or the NUL, and what to do (before:
    ``body: a string is not valid Unicode``, whichever of the strings it was)."""
    before = all_rows_text(api_app)
    with TestClient(create_api(api_app), raise_server_exceptions=False) as client:
        r = client.post("/api/notes", content=body.encode(), headers={**auth(ADMIN), **JSON})
    assert r.status_code == 422, r.text
    line = r.json()["detail"]
    assert line.startswith(detail) and line.endswith("; send the text without it"), line
    assert CANARY not in line and "\n" not in line
    assert all_rows_text(api_app) == before


@pytest.mark.parametrize("scope", [Scope("a\ud800"), Scope("a", "u\udfff"), Scope("a", None, "c\x00"),
                                   Scope("a" * 65), Scope("a\n"), Scope("a", "[erased]")],
                         ids=["surrogate", "surrogate-user", "nul", "65", "line-break", "erased"])
def test_remember_refuses_a_scope_no_surface_would_take(api_app: App, scope: Scope) -> None:
    """A Python host's ``remember`` checks its scope as the API, MCP and the CLI do: before, a
    lone surrogate was the driver's UnicodeEncodeError (a traceback), and a NUL, 65 characters,
    a line break or the erased users' placeholder were stored as a new tenant."""
    from worker.host import HostError, remember

    before = all_rows_text(api_app)
    with pytest.raises(HostError) as refused:
        remember(api_app, scope, "The user drinks green tea.")
    assert refused.value.status == 422 and str(refused.value).startswith("scope: "), refused.value
    assert all_rows_text(api_app) == before


@pytest.mark.parametrize("call", ["erase-user", "erase-conversation", "erase-note", "undo", "cancel"])
def test_safety_and_run_calls_refuse_a_lone_surrogate_id(api_app: App, call: str) -> None:
    """The same for the Python calls behind `dream erase`, `dream undo` and `dream runs cancel`:
    an id with a lone surrogate is a 422 naming it (before: the driver's UnicodeEncodeError)."""
    from worker.errors import InvalidInput
    from worker.runs.service import cancel_run
    from worker.safety.erase import erase
    from worker.safety.undo import undo_run

    bad = "x\ud800"
    calls: dict[str, Callable[[], object]] = {
        "erase-user": lambda: erase(api_app, user_id=bad),
        "erase-conversation": lambda: erase(api_app, conversation_id=bad),
        "erase-note": lambda: erase(api_app, note_id=bad),
        "undo": lambda: undo_run(api_app, bad), "cancel": lambda: cancel_run(api_app, bad)}
    with pytest.raises(InvalidInput) as refused:
        calls[call]()
    assert "id is not valid Unicode" in str(refused.value)

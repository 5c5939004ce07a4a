"""`dream mcp` over stdio, when stdin closes with requests in flight (worker.mcp.stdio_wire):
each request read is waited for on its own, not by its id, so two requests sharing an id both
get their answer, an error the transport wrote for an unreadable line carrying the same id as a
request still running is no answer to that request, a request the client cancelled (no
answer is due) is not waited for, and SIGTERM ends the input as stdin closing does."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

from tests.mcp.test_server import DREAM, ROOT, _env  # noqa: E402
from tests.mcp.test_stdio_limits import INIT, INITIALIZED, _remember  # noqa: E402
from tests.mcp.test_stdio_lines import _exchange, _lines  # noqa: E402
from worker.app import App  # noqa: E402
from worker.mcp.stdio_wire import DRAIN_SECONDS  # noqa: E402


def _served_held(app: App, requests: list[str]) -> list[dict[str, Any]]:
    """Every answer `dream mcp` wrote after ``initialize`` when the client wrote ``requests``
    and closed stdin while the test held SQLite's write lock (each request that writes waits for
    it, so all are in flight when stdin ends), released a second later; the process exited 0."""
    proc = subprocess.Popen([DREAM, "mcp", "--agent", "agent-a"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(app),
                            cwd=str(ROOT))
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    answers = _lines(proc.stdout)
    try:
        assert "result" in _exchange(proc, answers, INIT)
        holder = sqlite3.connect(app.settings.database_url.removeprefix("sqlite:///"),
                                 isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            proc.stdin.write(("\n".join(requests) + "\n").encode())
            proc.stdin.close()
            time.sleep(1.0)
        finally:
            holder.rollback()
            holder.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()[-2000:]
    finally:
        proc.kill()
    time.sleep(0.1)  # the reader thread hands over what it read before the pipe closed
    return [json.loads(answers.get_nowait()) for _ in range(answers.qsize())]


def test_requests_sharing_an_id_each_get_their_answer_before_exit(sqlite_app: App) -> None:
    """Twenty requests with the same id, in flight when stdin closes: twenty answers, each a
    result (before: the first answer ended the wait for the id, and the SDK cancelled the rest
    with 'Connection closed', or wrote nothing for them)."""
    requests = [INITIALIZED]
    requests += [_remember(7, f"Tea fact number {i} is about oolong") for i in range(20)]
    answers = _served_held(sqlite_app, requests)
    assert Counter(a["id"] for a in answers) == {7: 20}, answers
    assert all("result" in a for a in answers), [a for a in answers if "result" not in a]


def test_an_unreadable_line_with_a_running_requests_id_does_not_end_its_wait(
        sqlite_app: App) -> None:
    """Sibling: the error the server writes for an unreadable line whose id is that of a
    request still running is not the request's answer; the request still gets its own result
    before exit (before: the error ended the wait for the id and the request was cancelled)."""
    requests = [INITIALIZED, _remember(21, "Tea fact number 21 is about oolong"),
                '{"jsonrpc": "2.0", "id": 21, "method": ']
    answers = _served_held(sqlite_app, requests)
    of_21 = sorted(("result" in a, a.get("error", {}).get("code")) for a in answers
                   if a["id"] == 21)
    assert of_21 == [(False, -32700), (True, None)], answers


def test_a_request_the_client_cancelled_is_not_waited_for_at_exit(sqlite_app: App) -> None:
    """The client cancels a request in flight (notifications/cancelled) and closes stdin: the
    SDK writes it no answer (the protocol forbids one), and the server exits once the request
    has settled, not after the whole drain time (DRAIN_SECONDS) waiting for an answer that
    never comes."""
    cancel = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": 5, "reason": "user gave up"}})
    started = time.monotonic()
    answers = _served_held(sqlite_app, [INITIALIZED, _remember(5, "Tea fact is about oolong"),
                                        cancel])
    assert answers == []
    assert time.monotonic() - started < DRAIN_SECONDS / 2


@pytest.mark.parametrize("written_after", [True, False], ids=["line-after", "silent-after"])
def test_sigterm_answers_the_requests_in_flight_and_exits_0(sqlite_app: App,
                                                             written_after: bool) -> None:
    """SIGTERM (how an MCP client, or a container, stops its server) with a request in flight:
    stdin is read no further (a request written after it gets no answer), the one in flight is
    answered once the database frees, and the server exits 0 (before: SIGTERM's default killed
    it at once, exit -15, the request unanswered and a dream it had started cut mid-phase). A
    client that writes nothing more, its stdin open, does not keep the server from exiting
    (the stdin read left blocked is no thread Python waits for at exit)."""
    proc = subprocess.Popen([DREAM, "mcp", "--agent", "agent-a"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(sqlite_app), cwd=str(ROOT))
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    answers = _lines(proc.stdout)
    try:
        assert "result" in _exchange(proc, answers, INIT)
        holder = sqlite3.connect(sqlite_app.settings.database_url.removeprefix("sqlite:///"),
                                 isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            proc.stdin.write(f"{INITIALIZED}\n{_remember(5, 'Tea fact is oolong')}\n".encode())
            proc.stdin.flush()
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            if written_after:
                proc.stdin.write(f"{_remember(6, 'Tea fact is sencha')}\n".encode())
                proc.stdin.flush()
            time.sleep(0.5)
            assert proc.poll() is None  # still waiting for request 5
        finally:
            holder.rollback()
            holder.close()
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()[-2000:]
    finally:
        proc.kill()
    time.sleep(0.1)
    got = [json.loads(answers.get_nowait()) for _ in range(answers.qsize())]
    assert [(a["id"], "result" in a) for a in got] == [(5, True)], got

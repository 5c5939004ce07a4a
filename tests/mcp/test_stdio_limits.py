"""`dream mcp` over stdio, at the edges of its input (worker.mcp.stdio_wire): a line longer than
DREAM_API_MAX_BODY_BYTES is refused with a JSON-RPC error naming the limit, never read whole,
and the server goes on serving from the next line; requests still in flight when stdin closes
are answered before the process exits, and a dream one of them started ends first."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

from tests.mcp.test_server import DREAM, ROOT, _env, _states  # noqa: E402
from tests.mcp.test_stdio_lines import CANARY, _call, _exchange, _lines  # noqa: E402
from tests.support.factories import add_notes  # noqa: E402
from worker.app import App  # noqa: E402

LIMIT = 2048
INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})


def _remember(request_id: int, content: str) -> str:
    return _call(request_id, "remember", json.dumps({"content": content}))


def _padded(line: str, size: int) -> str:
    """The same message, as a line of exactly ``size`` bytes (JSON allows trailing blanks)."""
    return line + " " * (size - len(line.encode()))


def test_a_line_over_the_limit_is_refused_with_its_id_and_the_server_goes_on(
        sqlite_app: App) -> None:
    """A valid request one byte over the limit is refused (-32600, the limit and the setting
    named, its id kept) and stores nothing; 200 KB of junk without a newline is refused as
    well; a request of exactly the limit and the next one are served."""
    app = sqlite_app
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."})
    before = _states(app, "agent-a")
    proc = subprocess.Popen([DREAM, "mcp", "--agent", "agent-a"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(app, DREAM_API_MAX_BODY_BYTES=str(LIMIT),
                                     DREAM_LOG_LEVEL="DEBUG"), cwd=str(ROOT))
    assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
    answers = _lines(proc.stdout)
    try:
        assert "result" in _exchange(proc, answers, INIT)
        over = _padded(_remember(2, CANARY + " likes oolong"), LIMIT + 1)
        junk = '{"jsonrpc":"2.0","id":3,' + CANARY + "x" * 200_000
        for line, request_id in ((over, 2), (junk, 3)):
            refused = _exchange(proc, answers, line)
            assert refused["id"] == request_id and refused["error"]["code"] == -32600, refused
            message = refused["error"]["message"]
            assert f"longer than {LIMIT} bytes" in message and "DREAM_API_MAX_BODY_BYTES" in message
            assert CANARY not in message and "\n" not in message
        assert _states(app, "agent-a") == before  # the over-long remember stored nothing
        exact = _exchange(proc, answers, _padded(_call(4, "dream_status", "{}"), LIMIT))
        assert exact["id"] == 4 and "result" in exact, exact
        still = _exchange(proc, answers, _call(5, "dream_status", "{}"))
        assert still["id"] == 5 and "result" in still, still
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert CANARY not in proc.stderr.read().decode("utf-8", "replace")


def test_requests_in_flight_when_stdin_closes_are_answered_and_their_dream_ends(
        sqlite_app: App) -> None:
    """A client writes its requests and closes stdin at once (as `echo ... | dream mcp` does):
    every request gets its answer before the process exits (the SDK cancelled the ones still
    running), and the dream one of them started is finished, not left `running`."""
    app = sqlite_app
    requests = [INIT, INITIALIZED]
    requests += [_remember(i, f"Tea fact number {i} is about oolong") for i in range(2, 22)]
    requests.append(_call(99, "start_dream", '{"force": true}'))
    done = subprocess.run([DREAM, "mcp", "--agent", "agent-a"],
                          input=("\n".join(requests) + "\n").encode(), capture_output=True,
                          env=_env(app), cwd=str(ROOT), timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    answers = {a["id"]: a for a in map(json.loads, done.stdout.decode().splitlines())}
    assert sorted(answers) == [1, *range(2, 22), 99]
    assert all("result" in a and not a["result"].get("isError") for a in answers.values())
    run_id = json.loads(answers[99]["result"]["content"][0]["text"])["run_id"]
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status in ("succeeded", "partial", "failed")


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_a_line_of_256_mb_never_grows_the_server_by_more_than_64_mb(sqlite_app: App) -> None:
    """256 MB without a newline, at the default limit (1 MiB): the server's peak resident
    memory grows by less than 64 MB (the SDK held the whole line, and then its parse), the
    line is refused with -32600, and the next request is served."""
    proc = subprocess.Popen([DREAM, "mcp", "--agent", "agent-a"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=_env(sqlite_app), cwd=str(ROOT))
    assert proc.stdout is not None and proc.stdin is not None
    answers = _lines(proc.stdout)
    try:
        assert "result" in _exchange(proc, answers, INIT)
        base = _peak_rss_kib(proc.pid)
        chunk = b"x" * (1 << 20)
        for _ in range(256):
            proc.stdin.write(chunk)
        refused = _exchange(proc, answers, "")  # the newline that ends it
        assert _peak_rss_kib(proc.pid) - base < 64 * 1024
        assert refused["id"] is None and refused["error"]["code"] == -32600, refused
        still = _exchange(proc, answers, _call(2, "dream_status", "{}"))
        assert still["id"] == 2 and "result" in still, still
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_cancelled_request_is_not_waited_for() -> None:
    """A request the SDK settles unanswered (the client cancelled it: the protocol forbids an
    answer) is not waited for when stdin closes; an answer settles one request of its id, so a
    second request with that id is still waited for; an id never seen changes nothing."""
    import anyio
    import mcp_types as types
    from mcp.shared.message import ServerMessageMetadata, SessionMessage

    from worker.mcp.stdio_wire import InFlight

    in_flight = InFlight()
    read = [in_flight.received(SessionMessage(types.JSONRPCRequest(
        jsonrpc="2.0", id=request_id, method="tools/call", params={"name": "dream_status"})))
        for request_id in (7, "eight", 9, 9)]
    assert all(isinstance(m.metadata, ServerMessageMetadata) for m in read)
    hook = read[0].metadata.on_request_unanswered  # type: ignore[union-attr]
    assert hook is not None
    anyio.run(hook)  # what the SDK calls for the cancelled request 7
    in_flight.answered(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id="eight",
                                                            result={})))
    in_flight.answered(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=10, result={})))
    assert in_flight.count == 2 and set(in_flight.waiting) == {9}
    in_flight.answered(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=9, result={})))
    assert in_flight.count == 1
    in_flight.answered(SessionMessage(types.JSONRPCError(
        jsonrpc="2.0", id=9, error=types.ErrorData(code=-32603, message="x"))))
    anyio.run(in_flight.drain, 5.0)  # returns at once: nothing left
    assert in_flight.waiting == {}

"""`dream mcp` over stdio answers every line it cannot read (worker.mcp.stdio): invalid JSON, a
lone surrogate escape, a number too long, nesting too deep, an object that is no request each get
a JSON-RPC error with the request's id (the SDK dropped them: the client waited forever), name
the problem without the line's text, change nothing, and the server goes on serving."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

from tests.mcp.test_server import DREAM, ROOT, _env, _states  # noqa: E402
from tests.support.factories import add_notes  # noqa: E402
from worker.app import App  # noqa: E402

CANARY = "Quokka-canary-4471"


def _call(request_id: int, tool: str, arguments: str) -> str:
    head = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call"})[:-1]
    return f'{head}, "params": {{"name": "{tool}", "arguments": {arguments}}}}}'


# (line, the id the answer carries, the JSON-RPC error code)
LINES = [
    (_call(2, "remember", '{"content":"' + CANARY + ' \\ud800 x"}'), 2, -32700),
    (_call(3, "review_decline", '{"item_id":1,"reason":"' + CANARY + ' \\udfff"}'), 3, -32700),
    (_call(4, "review_show", '{"item_id":' + "9" * 5000 + "}"), 4, -32700),
    (_call(5, "remember", "[" * 100_000), 5, -32700),
    (_call(6, "remember", '{"content":"' + CANARY + '","\\ud800":1}'), 6, -32700),
    ('{"jsonrpc":"2.0","id":"seven","method":"tools/call","params":{"name":"remember",'
     '"arguments":{"content":"' + CANARY + ' \\ud800"}}}', "seven", -32700),
    ('{"' + CANARY + " no json", None, -32700),
    ('{"jsonrpc":"2.0","id":8}', 8, -32600),
    ("[1, 2]", None, -32600),
]


def _lines(stream: IO[bytes]) -> queue.Queue[bytes]:
    out: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        for line in stream:
            out.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return out


def _exchange(proc: subprocess.Popen[bytes], answers: queue.Queue[bytes],
              line: str) -> dict[str, Any]:
    assert proc.stdin is not None
    proc.stdin.write(line.encode() + b"\n")
    proc.stdin.flush()
    answer: dict[str, Any] = json.loads(answers.get(timeout=30))  # the SDK: no answer, ever
    return answer


@contextmanager
def stdio_session(app: App, canary: str) -> Iterator[Callable[[str], dict[str, Any]]]:
    """`dream mcp` over stdio for agent-a (one note), initialized; yields a function that sends a
    line and returns the next answer. Afterwards: the note unchanged, ``canary`` not on stderr."""
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."})
    before = _states(app, "agent-a")
    proc = subprocess.Popen([DREAM, "mcp", "--agent", "agent-a"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(app, DREAM_LOG_LEVEL="DEBUG"), cwd=str(ROOT))
    assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
    answers = _lines(proc.stdout)
    try:
        init = _exchange(proc, answers, json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}))
        assert "result" in init
        yield lambda line: _exchange(proc, answers, line)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert canary not in proc.stderr.read().decode("utf-8", "replace")
    assert _states(app, "agent-a") == before


def test_every_unreadable_line_gets_an_error_with_its_id(app: App) -> None:
    with stdio_session(app, CANARY) as send:
        for line, request_id, code in LINES:
            answer = send(line)
            assert answer.get("id") == request_id, answer
            assert answer["error"]["code"] == code, answer
            message = answer["error"]["message"]
            assert "send one JSON-RPC 2.0 message per line" in message and "\n" not in message
            assert CANARY not in message
        still = send(_call(9, "dream_status", "{}"))
        assert still["id"] == 9 and "result" in still, still

"""A request's id, over stdio and HTTP (worker.mcp.stdio, worker.mcp.http_errors).

A request whose id is no id (null, a fraction, an object, an array, a boolean) was read by the
SDK as a notification: over stdio no answer ever came, over HTTP a bare ``202 Accepted``. It is
answered -32600 with id null (400 over HTTP); a real notification (no id member) still gets no
answer. A -32600 for a line showing a valid id carries it: the id was read from the first
validation error's input (the jsonrpc, the params, the method), so most such answers said null.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

from tests.mcp.test_server import TOKEN_A, _states, http_server  # noqa: E402, F401
from tests.mcp.test_stdio_lines import stdio_session  # noqa: E402
from tests.support.factories import add_notes  # noqa: E402
from worker.app import App  # noqa: E402

CANARY = "Quokka-canary-6120"
REMEMBER = '"method":"tools/call","params":{"name":"remember","arguments":{"content":"' + CANARY + '"}}'
# (message, the id its -32600 carries): the id the line shows, when it is a valid one
WRONG_WITH_ID: list[tuple[str, int | str | None]] = [
    ('{"jsonrpc":"1.0","id":8,' + REMEMBER + "}", 8),
    ('{"jsonrpc":"2.0","id":6,"method":"tools/call","params":"' + CANARY + '"}', 6),
    ('{"jsonrpc":"2.0","id":9,"method":5}', 9),
    ('{"jsonrpc":"2.0","id":"nine","method":["' + CANARY + '"]}', "nine"),
    ('{"id":11,"method":"tools/list"}', 11),
    ('{"jsonrpc":"1.0","id":true,"method":"tools/list"}', None),
]
NO_ID = ["null", "7.5", '{"a":1}', "[1]", "true", "false"]
NOT_AN_ID = ['{"jsonrpc":"2.0","id":' + value + "," + REMEMBER + "}" for value in NO_ID]
NOTIFICATION = '{"jsonrpc":"2.0","method":"notifications/initialized"}'


def _ping(request_id: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"})


def _assert_refused(answer: dict[str, Any], request_id: int | str | None) -> None:
    assert "id" in answer and answer["id"] == request_id, answer
    assert answer["error"]["code"] == -32600, answer
    message = answer["error"]["message"]
    assert message.startswith("invalid request: ") and "send one JSON-RPC 2.0 message" in message
    assert CANARY not in message and "\n" not in message


@pytest.fixture
def stdio(app: App) -> Iterator[Callable[[str], dict[str, Any]]]:
    """`dream mcp` over stdio, initialized; yields a function that sends a line and returns the
    next answer. Checks afterwards that no note changed and no note text reached the log."""
    with stdio_session(app, CANARY) as send:
        yield send


def test_stdio_refusal_carries_the_id_the_line_shows(
        stdio: Callable[[str], dict[str, Any]]) -> None:
    for line, request_id in WRONG_WITH_ID:
        _assert_refused(stdio(line), request_id)


def test_stdio_answers_a_request_whose_id_is_no_id(
        stdio: Callable[[str], dict[str, Any]]) -> None:
    for line in NOT_AN_ID:  # before: no answer, ever
        answer = stdio(line)
        _assert_refused(answer, None)
        assert "string nor an integer" in answer["error"]["message"], answer
    # A notification (no id member) is still answered by nothing: the next answer is the ping's.
    pong = stdio(NOTIFICATION + "\n" + _ping(12))
    assert pong == {"jsonrpc": "2.0", "id": 12, "result": {}}, pong


def _post(url: str, body: str, version: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN_A}",
               "Accept": "application/json, text/event-stream"}
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    request = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


# No version header or a handshake one: the SDK's 2025 transport; 2026-07-28: its modern one.
VERSIONS = [None, "2025-06-18", "2026-07-28"]


@pytest.mark.parametrize("version", VERSIONS)
def test_http_refusal_carries_the_id_the_body_shows(
    app: App, http_server: str, version: str | None,  # noqa: F811  (the fixture)
) -> None:
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."})
    before = _states(app, "agent-a")
    for body, request_id in WRONG_WITH_ID:  # before: id null, and 2026's own message
        status, answer = _post(http_server, body, version)
        assert status == 400, (body, status, answer)
        _assert_refused(json.loads(answer), request_id)
    assert _states(app, "agent-a") == before


@pytest.mark.parametrize("version", VERSIONS)
def test_http_answers_a_request_whose_id_is_no_id(
    app: App, http_server: str, version: str | None,  # noqa: F811  (the fixture)
) -> None:
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."})
    before = _states(app, "agent-a")
    for body in NOT_AN_ID:  # before: 202 Accepted, no body
        status, answer = _post(http_server, body, version)
        assert status == 400, (body, status, answer)
        _assert_refused(json.loads(answer), None)
        assert "string nor an integer" in json.loads(answer)["error"]["message"]
    status, answer = _post(http_server, NOTIFICATION, version)
    assert (status, answer) == (202, b""), (status, answer)
    assert _states(app, "agent-a") == before


# A key given twice in one object: pydantic (the SDK's reader) kept the last value silently, so
# `remember` stored the second `content` (and a doubled id answered the second id).
TWICE: list[tuple[str, str, int | None]] = [
    ('{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"remember","arguments":'
     '{"content":"' + CANARY + ' sails","content":"' + CANARY + ' skis"}}}', "content", 21),
    ('{"jsonrpc":"2.0","id":22,"id":23,' + REMEMBER + "}", "id", None),
    ('{"jsonrpc":"2.0","id":24,"method":"tools/call","method":"tools/list","params":{}}', "method", 24),
]


def test_stdio_refuses_a_key_given_twice(stdio: Callable[[str], dict[str, Any]]) -> None:
    for line, key, request_id in TWICE:  # before: run, with one of the two values
        answer = stdio(line)
        _assert_refused(answer, request_id)
        assert f"key {key!r} appears twice" in answer["error"]["message"], answer
    pong = stdio(_ping(25))  # the server goes on with the next line
    assert pong == {"jsonrpc": "2.0", "id": 25, "result": {}}, pong


@pytest.mark.parametrize("version", VERSIONS)
def test_http_refuses_a_key_given_twice(
    app: App, http_server: str, version: str | None,  # noqa: F811  (the fixture)
) -> None:
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."})
    before = _states(app, "agent-a")
    for body, key, request_id in TWICE:
        status, answer = _post(http_server, body, version)
        assert status == 400, (body, status, answer)
        _assert_refused(json.loads(answer), request_id)
        assert f"key {key!r} appears twice" in json.loads(answer)["error"]["message"]
    assert _states(app, "agent-a") == before

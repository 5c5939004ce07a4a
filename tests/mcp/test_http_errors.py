"""`dream mcp --transport http` answers a body it cannot read in one line (worker.mcp.http_errors):
the SDK's own answer to JSON that is no JSON-RPC message was pydantic's multi-line dump with
``input_value={...}``, the request's note text sent back."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

from tests.mcp.test_server import TOKEN_A, _states, http_server  # noqa: E402, F401  (the fixture)
from worker.app import App  # noqa: E402

CANARY = "Quokka-canary-5813"
# (body, code, how the message starts, the id the answer carries: the body's, as over stdio)
BODIES: list[tuple[str, int, str, int | None]] = [
    ('{"jsonrpc": "2.0", "id": 5, "params": {"name": "remember", "arguments": {"content": "'
     + CANARY + '"}}}', -32600, "invalid request: ", 5),
    ('{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": "' + CANARY + '"}', -32600,
     "invalid request: ", 6),
    ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "remember", '
     '"arguments": {"content": "' + CANARY + ' \\ud800"}}}', -32700, "parse error: ", 7),
    ("{" + CANARY, -32700, "parse error: ", None),
]


NAMES = ["no-method", "params-not-object", "surrogate", "not-json"]
# No version header: the SDK's 2025 transport; 2026-07-28: its modern one, whose answers differ.
# The modern one reads a lone surrogate escape as JSON (Python's json does): before
# worker.mcp.http_errors.LoneSurrogates that body went on to its envelope checks (-32602).
CASES = [pytest.param(*body, version, id=f"{name}-{version or 'handshake'}")
         for name, body in zip(NAMES, BODIES, strict=True) for version in (None, "2026-07-28")]


@pytest.mark.parametrize(("body", "code", "start", "request_id", "version"), CASES)
def test_an_unreadable_body_is_one_line_without_its_text(
    http_server: str, body: str, code: int, start: str,  # noqa: F811  (the fixture)
    request_id: int | None, version: str | None,
) -> None:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN_A}",
               "Accept": "application/json, text/event-stream"}
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    request = urllib.request.Request(http_server, data=body.encode(), headers=headers,
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    answer = json.loads(refused.value.read())
    assert answer["error"]["code"] == code, answer
    assert "id" in answer and answer["id"] == request_id, answer  # before: always null
    message = answer["error"]["message"]
    assert message.startswith(start) and "send one JSON-RPC 2.0 message" in message, message
    assert CANARY not in message and "\n" not in message and "()" not in message


MODERN = "2026-07-28"
_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
         "io.modelcontextprotocol/clientCapabilities": {},
         "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"}}


def _modern_call(request_id: str, arguments: str, meta: str = json.dumps(_META)) -> str:
    return ('{"jsonrpc": "2.0", "id": ' + request_id + ', "method": "tools/call", "params": '
            '{"name": "remember", "arguments": ' + arguments + ', "_meta": ' + meta + "}}")


@pytest.mark.parametrize(("body", "request_id"), [
    (_modern_call('"\\ud800"', '{"content": "' + CANARY + '"}'), None),
    (_modern_call("8", '{"content": "' + CANARY + ' \\udc00"}'), 8),
    (_modern_call("9", '{"content": "' + CANARY + '"}', json.dumps(_META).replace(
        '"test"', '"te\\ud800st"')), 9),
], ids=["id", "content", "client-info"])
def test_a_lone_surrogate_is_a_parse_error_on_the_modern_transport_too(
    app: App, http_server: str, body: str, request_id: int | None,  # noqa: F811  (the fixture)
) -> None:
    """A whole 2026-07-28 request (its envelope in ``_meta``) with a lone surrogate escape is
    -32700, nothing run, as over stdio and the 2025 transport: before, its Python json read it,
    the request ran (a remember with a surrogate in its id or client info wrote the note) and
    the answer echoed an id no strict JSON parser reads, the SDK's own client's included."""
    before = _states(app, "agent-a")
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN_A}",
               "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": "tools/call", "Mcp-Name": "remember"}
    request = urllib.request.Request(http_server, data=body.encode(), headers=headers,
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    answer = json.loads(refused.value.read())
    assert answer["id"] == request_id and answer["error"]["code"] == -32700, answer
    message = answer["error"]["message"]
    assert message.startswith("parse error: ") and "no lone \\ud800" in message, message
    assert CANARY not in message
    assert _states(app, "agent-a") == before
    # the same request without the surrogate is served: the check refuses only what it must
    fine = body.replace("\\ud800", "").replace("\\udc00", "").replace('"id": ""', '"id": "ok"')
    with urllib.request.urlopen(urllib.request.Request(
            http_server, data=fine.encode(), headers=headers, method="POST"), timeout=10) as ok:
        assert json.loads(ok.read())["result"]["isError"] is False

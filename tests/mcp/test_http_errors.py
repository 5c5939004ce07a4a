"""`dream mcp --transport http` answers a body it cannot read in one line (worker.mcp.http_errors):
the SDK's own answer to JSON that is no JSON-RPC message was pydantic's multi-line dump with
``input_value={...}``, the request's note text sent back."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

from tests.mcp.test_server import TOKEN_A, http_server  # noqa: E402, F401  (the fixture)

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
# The modern one reads a lone surrogate escape as JSON (Python's json does), so that body goes on
# to its envelope checks (-32602, a line of the SDK's own) and is left out there.
CASES = [pytest.param(*body, version, id=f"{name}-{version or 'handshake'}")
         for name, body in zip(NAMES, BODIES, strict=True) for version in (None, "2026-07-28")
         if not (version and name == "surrogate")]


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

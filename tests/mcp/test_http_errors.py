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
BODIES = [
    ('{"jsonrpc": "2.0", "id": 5, "params": {"name": "remember", "arguments": {"content": "'
     + CANARY + '"}}}', -32600, "invalid request: "),
    ('{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": "' + CANARY + '"}', -32600,
     "invalid request: "),
    ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "remember", '
     '"arguments": {"content": "' + CANARY + ' \\ud800"}}}', -32700, "parse error: "),
    ("{" + CANARY, -32700, "parse error: "),
]


@pytest.mark.parametrize(("body", "code", "start"), BODIES,
                         ids=["no-method", "params-not-object", "surrogate", "not-json"])
def test_an_unreadable_body_is_one_line_without_its_text(
    http_server: str, body: str, code: int, start: str,  # noqa: F811  (the fixture)
) -> None:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN_A}",
               "Accept": "application/json, text/event-stream"}
    request = urllib.request.Request(http_server, data=body.encode(), headers=headers,
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    answer = json.loads(refused.value.read())
    assert answer["error"]["code"] == code, answer
    message = answer["error"]["message"]
    assert message.startswith(start) and "send one JSON-RPC 2.0 message" in message, message
    assert CANARY not in message and "\n" not in message

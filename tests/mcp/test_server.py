"""`dream mcp` through the official MCP SDK client: a real `dream mcp` subprocess over stdio and
over streamable HTTP, on SQLite and PostgreSQL. Tools are listed with their annotations, called,
and bound to one scope: another scope's note and run ids are "not found"."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

import httpx2  # noqa: E402  (installed with mcp)
from click.testing import CliRunner  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.types import CallToolResult  # noqa: E402

from tests.conftest import make_sqlite_app  # noqa: E402
from tests.support.factories import DARK_MODE_NOTES, add_notes  # noqa: E402
from worker.app import App  # noqa: E402
from worker.cli import main  # noqa: E402
from worker.domain.types import Scope  # noqa: E402
from worker.errors import ConfigError  # noqa: E402
from worker.runs import service  # noqa: E402
from worker.safety.undo import UndoResult  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DREAM = str(Path(sys.executable).with_name("dream"))
TOKEN_A = "mcp-agent-a-token-0123456789"
TOKEN_B = "mcp-agent-b-token-0123456789"
ADMIN = "mcp-admin-token-0123456789ab"
TOKENS = json.dumps({TOKEN_A: {"agent_id": "agent-a"}, TOKEN_B: {"agent_id": "agent-b"},
                     ADMIN: {"role": "admin"}})
EXPECTED_ANNOTATIONS = {
    # tool: (readOnlyHint, destructiveHint, idempotentHint)
    "remember": (False, False, True),
    # Not read-only: it stores the vectors of notes not embedded yet (changes no note).
    "list_candidates": (False, False, True),
    "fuse": (False, True, False),
    "keep_apart": (False, False, True),
    "start_dream": (False, True, False),
    "dream_status": (True, False, True),
    "undo_run": (False, True, False),
    "review_list": (True, False, True),
    "review_show": (True, False, True),
    "review_approve": (False, True, False),
    "review_decline": (False, False, True),
}
TERMINAL = {"succeeded", "partial", "failed"}


def _env(app: App, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAM_")}
    return {**env, "DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_FORMAT": "json",
            "DREAM_LLM_PROVIDER": "none", "DREAM_LOG_LEVEL": "WARNING", **extra}


def _seed(app: App) -> dict[str, list[str]]:
    """Dark-mode paraphrases in agent-a and agent-b (identical texts, different scopes)."""
    add_notes(app, *({"id": f"a{i}", "agent_id": "agent-a", "content": c}
                     for i, c in enumerate(DARK_MODE_NOTES[:3])))
    add_notes(app, *({"id": f"b{i}", "agent_id": "agent-b", "content": c}
                     for i, c in enumerate(DARK_MODE_NOTES[:3])))
    return {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]}


def _text(result: CallToolResult) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def _call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


async def _refused(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, result
    return _text(result)


async def _wait_finished(client: Client, run_id: str, timeout: float = 60,
                         terminal: set[str] = TERMINAL) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run: dict[str, Any] = (await _call(client, "dream_status", run_id=run_id))["run"]
        if run["status"] in terminal:
            return run
        await anyio.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish in {timeout}s")


async def _exercise_scope_a(client: Client, app: App, ids: dict[str, list[str]]) -> None:
    """The whole tool surface as agent-a, with agent-b's ids refused as unknown."""
    listed = (await client.list_tools()).tools
    annotations = {t.name: (t.annotations.read_only_hint, t.annotations.destructive_hint,
                            t.annotations.idempotent_hint)
                   for t in listed if t.annotations is not None}
    assert annotations == EXPECTED_ANNOTATIONS
    assert all(t.description for t in listed)
    undo = next(t for t in listed if t.name == "undo_run")
    assert undo.description is not None
    missing = [f for f in UndoResult(run_ids=[]).as_dict() if f not in undo.description]
    assert missing == [], f"undo_run's description names no {missing}"

    added = await _call(client, "remember", content="User's dog is called Pixel",
                        type="Preference")
    assert added["action"] == "ADD"
    again = await _call(client, "remember", content="User's dog is called Pixel",
                        type="Preference")
    assert again["action"] == "NOOP" and again["id"] == added["id"]
    said = await _call(client, "remember", content="User's cat is called Miso",
                       conversation_id="conv-9", manual=False)
    assert said["action"] == "ADD"
    with app.uow() as uow:
        [miso] = uow.notes.get_many([said["id"]])
    assert miso.source_conversation_id == "conv-9" and miso.is_auto_generated
    ids["a"].append(said["id"])
    assert "invalid: conversation id" in await _refused(client, "remember", content="x",
                                                        conversation_id="c\n1")
    assert "invalid: content is empty" in await _refused(client, "remember", content="  ")
    # before: stored, a note of zero-width spaces
    assert "invalid: content is empty" in await _refused(client, "remember",
                                                         content="\u200b\u200b")
    assert "invalid: type must be one of" in await _refused(client, "remember", content="x",
                                                            type="Gossip")

    candidates = (await _call(client, "list_candidates", threshold=0.5))["candidates"]
    seen = {i for c in candidates for i in c["note_ids"]}
    assert seen and seen <= set(ids["a"]) | {added["id"]}  # never agent-b's twins

    # Another scope's ids are not found, for every tool that takes ids; nothing changes there.
    assert "not_found" in await _refused(client, "fuse", source_ids=ids["b"][:2],
                                         fused_content="User prefers dark mode")
    assert "not_found" in await _refused(client, "fuse", source_ids=[ids["a"][0], ids["b"][0]],
                                         fused_content="User prefers dark mode")
    assert "not_found" in await _refused(client, "keep_apart", source_ids=ids["b"][:2])
    b_queued = service.create_run(app, Scope("agent-b"), force=True)
    assert b_queued is not None
    assert "not_found" in await _refused(client, "dream_status", run_id=b_queued)
    assert "not_found" in await _refused(client, "undo_run", run_id=b_queued)
    service.execute_run(app, b_queued)
    b_before = _states(app, "agent-b")
    assert "not_found" in await _refused(client, "undo_run", run_id=b_queued)
    assert "not_found" in await _refused(client, "dream_status", run_id="no-such-run")
    # An id no run can have is invalid (as in the CLI and the API), not merely not found.
    assert "invalid: run_id has 65 characters" in await _refused(client, "dream_status",
                                                                 run_id="r" * 65)
    assert "invalid" in await _refused(client, "undo_run", run_id="r" * 65)

    kept = await _call(client, "keep_apart", source_ids=ids["a"][1:3])
    assert kept["note_ids"] == ids["a"][1:3]
    fused = await _call(client, "fuse", source_ids=ids["a"][:2],
                        fused_content="User prefers dark mode in the code editor")
    assert sorted(fused["superseded"]) == ids["a"][:2]
    assert fused["note"]["scope"] == Scope("agent-a").as_dict()

    status = await _call(client, "dream_status")
    assert status["gate"]["rule"] == "too_little_activity" and status["runs"] == []
    refused = await _refused(client, "start_dream")
    assert "conflict" in refused and "0 of 5 sessions" in refused
    started = await _call(client, "start_dream", force=True)
    run = await _wait_finished(client, started["run_id"])
    assert run["scope"] == Scope("agent-a").key and run["trigger"] == "mcp"
    undone = await _call(client, "undo_run", run_id=started["run_id"])
    assert undone["run_ids"] == [started["run_id"]]
    unfused = await _call(client, "undo_run", run_id=fused["undo_id"])  # the fuse, by its id
    assert sorted(unfused["restored"]) == ids["a"][:2]
    assert unfused["retired"] == [fused["note"]["id"]]

    assert _states(app, "agent-b") == b_before  # nothing agent-a did touched agent-b


def _states(app: App, agent: str) -> dict[str, tuple[str, int]]:
    with app.uow() as uow:
        snap = uow.notes.load_scope(Scope(agent), statuses=("active", "pending", "revoked",
                                                            "archived"))
        return {n.id: (n.status, n.version) for n in snap.notes}


def test_stdio_tools_are_listed_annotated_and_bound_to_the_configured_scope(app: App) -> None:
    """`dream mcp --agent agent-a` over stdio, through the SDK's stdio client: every tool works
    for agent-a, and agent-b's notes and runs are not found."""
    ids = _seed(app)
    params = StdioServerParameters(command=DREAM, args=["mcp", "--agent", "agent-a"],
                                   env=_env(app), cwd=str(ROOT))

    async def scenario() -> None:
        async with Client(params) as client:
            await _exercise_scope_a(client, app, ids)

    anyio.run(scenario)


def test_stdio_start_dream_allow_retire_lets_a_blocked_run_retire_what_it_names(
    app: App,
) -> None:
    """`start_dream` takes allow_retire like `dream run --allow-retire N` and POST /api/runs:
    8 of 12 notes point at a deleted conversation, so a forced dream is blocked by the guard and
    retires nothing; allow_retire outside 0..10000000 is refused in one line
    and queues nothing; allow_retire=8 archives the 8 and succeeds."""
    env = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LLM_PROVIDER": "none",
           "DREAM_LOG_LEVEL": "WARNING"}
    entities = [{"kind": "agent", "id": "agent-r"}, {"kind": "user", "id": "u1"},
                {"kind": "conversation", "id": "gone", "status": "deleted"}]
    imported = CliRunner().invoke(main, ["entities", "import", "-"], env=env,
                                  input="".join(json.dumps(e) + "\n" for e in entities))
    assert imported.exit_code == 0, imported.output
    add_notes(app, *({"agent_id": "agent-r", "user_id": "u1", "source_conversation_id": "gone",
                      "content": f"Order {i} came up in a deleted chat"} for i in range(8)),
              *({"agent_id": "agent-r", "user_id": "u1",
                 "content": f"Durable fact number {i} about u1"} for i in range(4)))
    scope = Scope("agent-r", "u1")
    params = StdioServerParameters(command=DREAM,
                                   args=["mcp", "--agent", "agent-r", "--user", "u1"],
                                   env=_env(app), cwd=str(ROOT))

    async def scenario() -> None:
        async with Client(params) as client:
            blocked = await _call(client, "start_dream", force=True)
            run = await _wait_finished(client, blocked["run_id"], terminal=TERMINAL | {"blocked"})
            assert run["status"] == "blocked", run
            for bad in (-1, 10_000_001):
                refused = await _refused(client, "start_dream", force=True, allow_retire=bad)
                assert ("invalid: allow_retire must be a whole number from 0 to 10000000"
                        in refused), refused
                assert "\n" not in refused
            with app.uow() as uow:
                assert len(uow.runs.list(scope=scope)) == 1  # the refusals queued nothing
            allowed = await _call(client, "start_dream", force=True, allow_retire=8)
            run = await _wait_finished(client, allowed["run_id"],
                                       terminal=TERMINAL | {"blocked"})
            assert run["status"] == "succeeded", run

    anyio.run(scenario)
    with app.uow() as uow:
        assert uow.notes.count_by_status(scope) == {"active": 4, "archived": 8}
        assert len(uow.runs.list(scope=scope)) == 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server(app: App, tmp_path: Path) -> Iterator[str]:
    """`dream mcp --transport http` as a real subprocess; yields its /mcp URL."""
    port = _free_port()
    log = tmp_path / "mcp-http.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            [DREAM, "mcp", "--transport", "http", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env=_env(app, DREAM_API_TOKENS=TOKENS), stdout=fh,
            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield f"{base}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    assert "Pixel" not in log.read_text()  # no note text in the server's logs (R21)


@asynccontextmanager
async def _http_client(url: str, token: str) -> AsyncIterator[Client]:
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
                Client(streamable_http_client(url, http_client=http)) as client):
        yield client


def test_http_tools_are_bound_to_the_tokens_scope(app: App, http_server: str) -> None:
    """Over streamable HTTP the bearer token names the scope: agent-a's token gets the full tool
    surface for agent-a only; agent-b's token sees agent-b's runs, not agent-a's notes."""
    ids = _seed(app)

    async def scenario() -> None:
        async with _http_client(http_server, TOKEN_A) as client:
            await _exercise_scope_a(client, app, ids)
        async with _http_client(http_server, TOKEN_B) as client:
            status = await _call(client, "dream_status")
            assert status["scope"] == Scope("agent-b").as_dict()
            assert [r["scope"] for r in status["runs"]] == [Scope("agent-b").key]
            assert "not_found" in await _refused(client, "fuse", source_ids=ids["a"][1:3],
                                                 fused_content="User prefers dark mode")

    anyio.run(scenario)


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789abcdef", ADMIN])
def test_http_refuses_missing_wrong_and_admin_tokens(http_server: str, token: str | None) -> None:
    """R24 for MCP: no token, an unknown token and an admin token (not bound to one scope) are
    all 401 before any tool runs."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    request = urllib.request.Request(http_server, data=body, headers=headers, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401


def test_http_tells_an_admin_token_it_needs_a_scoped_one(http_server: str) -> None:
    """An admin token got the 401 of no token at all ("Authentication required"): only the
    server's log said why. Its 401 says it was an admin token and to send a scoped one, in the
    body and in WWW-Authenticate; it never echoes the token. Another token's 401 is the SDK's."""
    def refusal(token: str) -> tuple[dict[str, Any], str]:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}",
                   "Accept": "application/json, text/event-stream"}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
        request = urllib.request.Request(http_server, data=body, headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
        return json.loads(refused.value.read()), refused.value.headers["WWW-Authenticate"]

    answer, challenge = refusal(ADMIN)
    assert answer == {"error": "invalid_token", "error_description": (
        "the bearer token is an admin token, which MCP does not take: each tool acts on its "
        "token's one scope; send a scoped token (one with an agent_id in DREAM_API_TOKENS)")}
    assert challenge.startswith("Bearer ") and "is an admin token" in challenge
    assert ADMIN not in challenge and ADMIN not in json.dumps(answer)
    answer, _ = refusal("wrong-token-0123456789abcdef")
    assert answer["error_description"] == "Authentication required"


def test_http_refuses_an_oversized_body_before_the_token(http_server: str) -> None:
    """R31 for MCP: a body over DREAM_API_MAX_BODY_BYTES is 413 unread, even without a token."""
    host, port = http_server.removeprefix("http://").split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # Only the headers: the server must answer from Content-Length without reading a byte.
        sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {1_048_576 + 1}\r\n\r\n".encode())
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
    assert status_line.split()[1] == b"413", status_line


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["mcp"], {}, "--transport stdio needs --agent"),
        (["mcp", "--user", "u"], {}, "--user and --company need --agent"),
        (["mcp", "--transport", "http", "--agent", "a"], {"DREAM_API_TOKENS": TOKENS},
         "--agent binds stdio only"),
        (["mcp", "--transport", "http"], {"DREAM_API_TOKENS": json.dumps({ADMIN: {"role": "admin"}})},
         "DREAM_API_TOKENS has no scoped token"),
    ],
)
def test_mcp_usage_errors_are_one_line(tmp_path: Path, args: list[str], env: dict[str, str],
                                       message: str) -> None:
    """Each misuse of `dream mcp` is one `error:` line naming the fix, exit 2 (8 for a
    setting that cannot serve), no server."""
    make_sqlite_app(tmp_path).dispose()
    result = CliRunner().invoke(main, args, env={
        "DREAM_DATABASE_URL": f"sqlite:///{tmp_path / 'dream.db'}", "DREAM_API_TOKENS": None,
        **env})
    code = ConfigError.exit_code if message.startswith("DREAM_API_TOKENS") else 2
    assert result.exit_code == code, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line

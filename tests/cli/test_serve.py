"""`dream api` and `dream mcp --transport http` bind their address before serving: an address
they cannot use is one ``error:`` line naming the option (worker.cli.serve)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.test_commands import dream, one_error_line
from tests.conftest import make_sqlite_app
from worker.app import App
from worker.cli.errors import UserError
from worker.errors import Conflict

TOKENS = json.dumps({"scoped-token-0123456789": {"agent_id": "agent-1"},
                     "admin-token-0123456789": {"role": "admin"}})
SERVERS = (["api"], ["mcp", "--transport", "http"])


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    app: App = make_sqlite_app(tmp_path)
    yield app.settings.database_url
    app.dispose()


@pytest.mark.parametrize("command", SERVERS, ids=["api", "mcp"])
def test_a_port_in_use_is_one_error_line(url: str, command: list[str]) -> None:
    """Another process listens on the port: one line saying so and naming --port, exit 4
    (busy), instead of uvicorn's six log lines and its own exit code 3 (ours: not found)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        line = one_error_line(dream(url, *command, "--port", port, DREAM_API_TOKENS=TOKENS),
                              Conflict.exit_code)
    assert f"127.0.0.1:{port}" in line and "already in use" in line and "--port" in line


@pytest.mark.parametrize("command", SERVERS, ids=["api", "mcp"])
@pytest.mark.parametrize("host", ["256.1.1.1", "no-such-host.invalid"])
def test_a_host_that_is_no_address_is_one_error_line(url: str, command: list[str],
                                                      host: str) -> None:
    """An address that does not parse or resolve: one line naming --host and what to pass
    (`dream mcp` built its OAuth issuer URL first and died in a pydantic traceback)."""
    line = one_error_line(dream(url, *command, "--host", host, "--port", "0",
                                DREAM_API_TOKENS=TOKENS), UserError.exit_code)
    assert f"--host {host!r}" in line and "127.0.0.1" in line


def test_an_address_of_another_machine_is_one_error_line(url: str) -> None:
    """A well-formed address this machine does not have (TEST-NET-1): named as such."""
    line = one_error_line(dream(url, "api", "--host", "192.0.2.1", "--port", "0",
                                DREAM_API_TOKENS=TOKENS), UserError.exit_code)
    assert "192.0.2.1 is not an address of this machine" in line


def test_the_api_serves_on_the_port_it_bound(url: str) -> None:
    """--port 0: the server says the port it got, and answers there (the sockets are bound
    before uvicorn starts, which then says nothing of where it listens by itself)."""
    env = {**os.environ, "DREAM_DATABASE_URL": url, "DREAM_API_TOKENS": TOKENS,
           "DREAM_LOG_FORMAT": "console", "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "worker.cli", "api", "--port", "0"], env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "Uvicorn running on http://127.0.0.1:" in line:
                break
        else:
            pytest.fail("the server never said where it listens")
        base = line.split("running on ", 1)[1].split()[0]
        assert not base.endswith(":0")
        assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok",
                                                                   "database": "ok"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)

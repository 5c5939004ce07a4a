"""configure_logging leaves nothing behind that hides later logs in the same process."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.logging import configure_logging


@pytest.fixture(autouse=True)
def _restore_structlog():  # type: ignore[no-untyped-def]
    old = structlog.get_config()
    yield
    structlog.configure(**old)


def test_a_warning_level_cli_call_does_not_hide_info_from_capture_logs() -> None:
    """After a CLI call configured WARNING, a later capture_logs still sees INFO events (the
    level is a processor, replaced by capture_logs, not a process-wide wrapper class)."""
    configure_logging("json", "WARNING")
    with capture_logs() as events:
        structlog.get_logger().info("later.event")
    assert [e["event"] for e in events] == ["later.event"]


def test_the_configured_level_still_filters_and_writes_to_the_current_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At WARNING an INFO event is dropped and a WARNING one is written, to whatever
    sys.stderr is at the time of the call (not the stream configure_logging ran under)."""
    configure_logging("json", "WARNING")
    now = io.StringIO()
    monkeypatch.setattr(sys, "stderr", now)
    log = structlog.get_logger()
    log.info("quiet.event")
    log.warning("loud.event")
    assert "loud.event" in now.getvalue() and "quiet.event" not in now.getvalue()


def test_a_closed_stderr_loses_the_log_lines_not_the_run(sqlite_app: App) -> None:
    """`dream --log-level info run … 2>&1 | head -1`: the first event written after the pipe
    closed raised BrokenPipeError inside the run, the process exited 1 and its run stayed
    `running`, holding the scope until its lease lapsed an hour later. The lines are lost;
    the run finishes."""
    add_notes(sqlite_app, *({"agent_id": "pipe-bot", "content": f"Fact {k} about the build."}
                            for k in range(3)))
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before the first event: every write to stderr fails
    env = {**os.environ, "DREAM_DATABASE_URL": sqlite_app.settings.database_url,
           "DREAM_LOG_FORMAT": "json"}
    dream = str(Path(sys.executable).with_name("dream"))
    try:
        done = subprocess.run([dream, "--log-level", "info", "run", "--agent", "pipe-bot",
                               "--force"], stdout=subprocess.PIPE, stderr=write_end, env=env,
                              timeout=120, text=True)
    finally:
        os.close(write_end)
    assert done.returncode == 0 and done.stdout.startswith("run "), done.stdout
    with sqlite_app.uow() as uow:
        assert [r.status for r in uow.runs.list(Scope("pipe-bot"), limit=5)] == ["succeeded"]


def test_library_records_are_json_lines_when_the_events_are() -> None:
    """With DREAM_LOG_FORMAT=json (or auto off a terminal) uvicorn's own lines ("Started server
    process [7]", "Application startup complete.") went out as bare text among the JSON
    events, and a log shipper reading JSON lines choked on them. Each stdlib record is one
    JSON object now, with its logger and level; on a console it stays the message alone."""
    script = ("import logging; from worker.logging import configure_logging; "
              "configure_logging({fmt!r}, 'INFO'); "
              "logging.getLogger('uvicorn.error').info('Started server process [%d]', 7)")
    as_json = subprocess.run([sys.executable, "-c", script.format(fmt="json")],
                             capture_output=True, text=True, timeout=60, check=True)
    [line] = as_json.stderr.splitlines()
    record = json.loads(line)
    assert (record["event"], record["logger"], record["level"]) == (
        "Started server process [7]", "uvicorn.error", "info")
    assert record["timestamp"].endswith("Z")
    on_console = subprocess.run([sys.executable, "-c", script.format(fmt="console")],
                                capture_output=True, text=True, timeout=60, check=True)
    assert on_console.stderr == "Started server process [7]\n"

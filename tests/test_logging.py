"""configure_logging leaves nothing behind that hides later logs in the same process."""

from __future__ import annotations

import io
import sys

import pytest
import structlog
from structlog.testing import capture_logs

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

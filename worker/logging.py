"""structlog setup: readable console output in a terminal, JSON lines otherwise."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

import structlog

# structlog's method names to stdlib levels (``exception`` logs at error).
_METHOD_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "msg": logging.INFO,
                  "warning": logging.WARNING, "warn": logging.WARNING, "error": logging.ERROR,
                  "exception": logging.ERROR, "critical": logging.CRITICAL,
                  "fatal": logging.CRITICAL}


class _DropBelow:
    """The level filter as a processor, not a filtering wrapper class: structlog's config is
    process-global, and a wrapper class fixed at WARNING by one CLI call kept dropping INFO
    events in everything that ran in the process later, even under ``capture_logs`` (which
    swaps the processors, not the wrapper). A processor is replaced with the rest."""

    def __init__(self, level: int) -> None:
        self.level = level

    def __call__(self, _logger: Any, method: str, event: Any) -> Any:
        if _METHOD_LEVELS.get(method, logging.INFO) < self.level:
            raise structlog.DropEvent
        return event


class _CurrentStderr:
    """A file that is whatever ``sys.stderr`` is now: the setup outlives the stream it was
    called under (click's CliRunner swaps stderr for one invocation and closes it after).
    A reader that went away (`2>&1 | head`) loses the lines, never the run logging them: the
    error raised mid-phase and left the run `running` until its lease lapsed."""

    def write(self, text: str) -> int:
        try:
            return sys.stderr.write(text)
        except BrokenPipeError:
            return 0

    def flush(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            sys.stderr.flush()


class _LibraryRecords(logging.Formatter):
    """Records of the libraries that log through the stdlib (uvicorn, Celery, the MCP SDK):
    one JSON object each while the events are JSON, since a log shipper reads every line as
    one; the message alone on a console. One instance for the process: the root handler is
    installed once, and each setup switches what it writes."""

    json_lines = False

    def format(self, record: logging.LogRecord) -> str:
        if not self.json_lines:
            return super().format(record)
        when = datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z")
        out: dict[str, Any] = {"event": record.getMessage(), "logger": record.name,
                               "level": record.levelname.lower(), "timestamp": when}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


_LIBRARY_RECORDS = _LibraryRecords("%(message)s")


def configure_logging(fmt: str = "auto", level: str = "INFO") -> None:
    """Set up structlog (and the stdlib root, once) for this process; each call replaces the
    previous structlog setup entirely, so it is safe to call once per CLI invocation."""
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        # No colour codes into a file or a pipe (a cron mail, `2> log`).
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()) if use_console
        else structlog.processors.JSONRenderer()
    )
    _LIBRARY_RECORDS.json_lines = not use_console
    handler = logging.StreamHandler(_CurrentStderr())
    handler.setFormatter(_LIBRARY_RECORDS)
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # faiss announces every CPU-feature probe at INFO; that is noise on a user's terminal.
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    structlog.configure(
        processors=[
            _DropBelow(logging.getLevelName(level.upper())),
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.BoundLogger,
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )

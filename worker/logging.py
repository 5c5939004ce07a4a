"""structlog setup: readable console output in a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(fmt: str = "auto", level: str = "INFO") -> None:
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format="%(message)s")
    # faiss announces every CPU-feature probe at INFO; that is noise on a user's terminal.
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )

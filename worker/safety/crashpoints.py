"""Named crash points in the apply path, armed only by tests (R3, R9).

Arm with the environment variable ``DREAM_CRASH_AT=<name>`` (the process SIGKILLs itself there,
as a real crash would) or from Python with ``arm(name, action)``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

_armed: dict[str, Callable[[], None]] = {}

KNOWN = (
    "consolidate.after_insert",
    "consolidate.after_half_revocations",
    "consolidate.before_step",
    "contradictions.after_revoke",
    "prune.after_archive",
    "archive.after_archive",
    "run.before_finalize",
)


def crashpoint(name: str) -> None:
    """No-op unless a test armed ``name``."""
    action = _armed.get(name)
    if action is not None:
        action()
        return
    if os.environ.get("DREAM_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def arm(name: str, action: Callable[[], None]) -> None:
    _armed[name] = action


def disarm_all() -> None:
    _armed.clear()

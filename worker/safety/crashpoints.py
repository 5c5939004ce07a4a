"""Named crash points in the apply path, armed only by tests (R3, R9).

Arm with the environment variable ``DREAM_CRASH_AT=<name>`` (the process SIGKILLs itself there,
as a real crash would), ``<name>@<n>`` to die the n-th time this process reaches it (the middle
of a phase's merges, not its first), or from Python with ``arm(name, action)``. With
``DREAM_CRASH_MARKER=<path>`` as well, the crash happens once across every process that shares
the environment (a Celery worker's children, the redelivered task, the recovery): the first
to crash creates the file, and nobody crashes while it exists.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

_armed: dict[str, Callable[[], None]] = {}
_reached: dict[str, int] = {}
_lock = threading.Lock()

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
    target = os.environ.get("DREAM_CRASH_AT")
    if not target:
        return
    point, _, nth = target.partition("@")
    if point != name:
        return
    with _lock:
        _reached[name] = _reached.get(name, 0) + 1
        if _reached[name] < int(nth or 1):
            return
    marker = os.environ.get("DREAM_CRASH_MARKER")
    if marker:
        try:
            Path(marker).touch(exist_ok=False)
        except FileExistsError:
            return  # crashed once already; this process runs on as a healthy one would
    os.kill(os.getpid(), signal.SIGKILL)


def arm(name: str, action: Callable[[], None]) -> None:
    _armed[name] = action


def disarm_all() -> None:
    _armed.clear()
    _reached.clear()

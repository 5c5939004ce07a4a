"""Stop signals in a `dream` command: SIGINT (Ctrl-C) and SIGTERM (a service manager,
`timeout`, a container stopping) raise ``Stopped`` in the main thread, and a stop that lands
while a run is claimed but not yet under the engine's give-back is held until it is.

A run created or claimed for this process holds its scope under its lease: stopped between
that commit and the engine's ``try``, it would stay ``running`` until the lease lapsed (an
hour by default), and nothing could resume it or run in its scope meanwhile. So the claim and
the hand-over run inside ``stops_held()``, and the engine calls ``deliver_held_stops()`` as
the first thing it does under its give-back: the stop is raised there, and the run given back.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """A stop signal (SIGINT or SIGTERM) raised in the main thread of a `dream` command, so
    that SIGTERM stops it as Ctrl-C does."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def signal_of(stop: KeyboardInterrupt) -> str:
    """The signal that stopped the process: the one a ``Stopped`` (or a stop raised from one:
    ``RunStopped``, ``ApprovalStopped``) names, else Ctrl-C's SIGINT (Python's own handler)."""
    name = getattr(stop, "signal_name", None)
    return name if isinstance(name, str) else "SIGINT"


class _Held:
    """Whether stops are held now (main thread only), and the one that came meanwhile."""

    held = False
    pending: str | None = None


def _stop(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _Held.held:
        _Held.pending = _Held.pending or name
        return
    _ignore_further_stops()
    raise Stopped(name)


def _ignore_further_stops() -> None:
    # The stop is being handled (a write rolling back, a run given back, its line printed):
    # a second signal meanwhile would cut that short and leave the run `running`.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Stopped`` in this (main) thread while the block runs; a second
    one is ignored once the first is raised. Elsewhere (a server's thread, a test's) nothing
    changes: signals reach the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.signal(sig, _stop) for sig in STOP_SIGNALS}
    _Held.held, _Held.pending = False, None
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        _Held.held, _Held.pending = False, None


@contextmanager
def stops_held() -> Iterator[None]:
    """A stop arriving in the block waits for ``deliver_held_stops`` (the engine's give-back
    calls it), or is raised as the block ends. Only under ``stop_signals`` and in the main
    thread; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread() or _Held.held:
        yield
        return
    _Held.held = True
    try:
        yield
    finally:
        deliver_held_stops()


def deliver_held_stops() -> None:
    """End the hold: a stop that came during it is raised now (once)."""
    if threading.current_thread() is not threading.main_thread():
        return
    _Held.held = False
    pending, _Held.pending = _Held.pending, None
    if pending is not None:
        _ignore_further_stops()
        raise Stopped(pending)

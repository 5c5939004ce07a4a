"""The lease heartbeat's one thread per process: it beats for every open block, never after a
block ended, and gives up on a block open too long."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import make_sqlite_app
from worker.app import App
from worker.runs.lease import _BEATS, LeaseHeartbeat


class Counting(LeaseHeartbeat):
    """Renewals counted instead of written; each may be held up by ``hold``."""

    def __init__(self, app: App, name: str, interval: float = 0.05) -> None:
        super().__init__(app, name, epoch=1)
        self.interval = interval
        self.renewals: list[float] = []
        self.hold: threading.Event | None = None
        self.in_flight = threading.Event()

    def renew(self) -> bool:
        self.in_flight.set()
        if self.hold is not None:
            self.hold.wait(5)
        self.renewals.append(time.monotonic())
        return True


def _beat_threads() -> int:
    return sum(t.name == "dream-lease-heartbeat" for t in threading.enumerate())


def test_one_thread_beats_for_every_open_block(tmp_path: Path) -> None:
    app = make_sqlite_app(tmp_path)
    a, b = Counting(app, "run-a"), Counting(app, "run-b", interval=0.08)
    with a:
        with b:
            time.sleep(0.5)
        for _ in range(20):  # many short blocks: no thread of their own
            with Counting(app, "short"):
                pass
    assert len(a.renewals) >= 4 and len(b.renewals) >= 3
    assert _beat_threads() == 1
    app.dispose()


def test_a_block_ends_after_its_beat_in_flight_and_is_never_beaten_again(tmp_path: Path) -> None:
    app = make_sqlite_app(tmp_path)
    hb = Counting(app, "run-a")
    hb.hold = threading.Event()
    with hb:
        assert hb.in_flight.wait(2)
        threading.Timer(0.3, hb.hold.set).start()
        started = time.monotonic()
    assert time.monotonic() - started >= 0.25  # the exit waited for the renewal to finish
    assert len(hb.renewals) == 1
    time.sleep(0.3)
    assert len(hb.renewals) == 1  # ended: no later beat
    app.dispose()


def test_a_block_open_past_the_task_time_limit_is_left_to_lapse(tmp_path: Path) -> None:
    app = make_sqlite_app(tmp_path)
    hb = Counting(app, "wedged")
    hb.give_up_after = 0.2
    with hb:
        time.sleep(0.6)
        given_up = len(hb.renewals)
        time.sleep(0.3)
        assert len(hb.renewals) == given_up <= 5  # no beat after giving up
    app.dispose()


class Failing(Counting):
    def renew(self) -> bool:
        self.in_flight.set()
        raise RuntimeError("not a database error")


def test_a_beat_that_raises_stops_its_block_only(tmp_path: Path) -> None:
    """The shared thread survives a beat failing unexpectedly: that block's exit does not hang
    and the other open blocks are still beaten."""
    app = make_sqlite_app(tmp_path)
    other = Counting(app, "run-b")
    with other:
        broken = Failing(app, "run-a")
        with broken:
            assert broken.in_flight.wait(2)
        time.sleep(0.3)
    assert len(other.renewals) >= 3
    app.dispose()


def test_a_block_opened_while_the_thread_idles_is_beaten_on_time_without_waking_it(
        tmp_path: Path, monkeypatch: Any) -> None:
    """With nothing to beat for the thread still looks again after the last interval, so a
    new block (due a whole interval after it opens) needs no wake-up: no notify before its
    first beat, which still comes one interval after the block opened."""
    app = make_sqlite_app(tmp_path)
    with Counting(app, "earlier", interval=0.2):
        pass
    time.sleep(0.05)  # the thread now waits, idle, for up to 0.2 s
    notified: list[float] = []
    cond = _BEATS._cond
    original = cond.notify_all

    def notify_all() -> None:
        notified.append(time.monotonic())
        original()

    monkeypatch.setattr(cond, "notify_all", notify_all)
    hb = Counting(app, "next", interval=0.2)
    opened = time.monotonic()
    with hb:
        time.sleep(0.45)
    assert hb.renewals, "never beaten"
    first = hb.renewals[0] - opened
    assert 0.19 <= first <= 0.35, first
    assert [t for t in notified if t < hb.renewals[0]] == []
    app.dispose()

"""Two threads doing the same work at once, each held before its first statement until the
other has reached its own: both have read the store before either writes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import event

from worker.app import App


def both_at_once(app: App, work: Callable[[], Any]) -> list[Any]:
    """``work`` in two threads that meet before their first statement on ``app``'s engine: what
    each returned, or the exception it raised."""
    barrier = threading.Barrier(2, timeout=20)
    started: set[int] = set()

    def first_statement(*_: Any) -> None:
        me = threading.get_ident()
        if me not in started:
            started.add(me)
            barrier.wait()

    outcomes: list[Any] = []

    def one() -> None:
        try:
            outcomes.append(work())
        except Exception as exc:  # noqa: BLE001 - the test reports what the work raised
            outcomes.append(exc)

    event.listen(app.engine, "before_cursor_execute", first_statement)
    try:
        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        event.remove(app.engine, "before_cursor_execute", first_statement)
    return outcomes

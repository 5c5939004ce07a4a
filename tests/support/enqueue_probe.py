"""``python -m tests.support.enqueue_probe RUN_ID...``: ``worker.tasks.enqueue_runs`` in a fresh
process, whose Celery app is built from the DREAM_* environment at import (a test's broker and
queue), then one JSON line: the producers taken from the pool and the error line, if any."""

from __future__ import annotations

import json
import sys
from typing import Any


def main(run_ids: list[str]) -> None:
    from worker.celery_app import app, resources
    from worker.errors import BrokerUnavailable
    from worker.tasks import enqueue_runs

    pool = app.producer_pool
    acquire = pool.acquire
    taken = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal taken
        taken += 1
        return acquire(*args, **kwargs)

    pool.acquire = counted  # type: ignore[method-assign]  # a counting pass-through
    error = None
    try:
        enqueue_runs(run_ids, resources())
    except BrokerUnavailable as exc:
        error = str(exc)
    print(json.dumps({"producers": taken, "error": error}))


if __name__ == "__main__":
    main(sys.argv[1:])

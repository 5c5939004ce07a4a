"""``python -m tests.support.dream_probe ARGS...``: the `dream` command in a fresh process, whose
Celery app is built from the DREAM_* environment at import (a test's broker and queue), counting
the producers it takes from the pool. With PROBE_BROKER_DIES_AFTER=K the broker is shut
down (SHUTDOWN NOSAVE) once K messages are published: a broker lost mid-way. Prints the
command's own output, then one JSON line on stdout: the producers taken and the exit code."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _count_producers() -> dict[str, int]:
    from worker.celery_app import app

    pool = app.producer_pool
    acquire = pool.acquire
    taken = {"producers": 0}

    def counted(*args: Any, **kwargs: Any) -> Any:
        taken["producers"] += 1
        return acquire(*args, **kwargs)

    pool.acquire = counted  # type: ignore[method-assign]  # a counting pass-through
    return taken


def _kill_broker_after(published: int) -> None:
    """After ``published`` messages, the broker itself goes away (a real failure, not a fake)."""
    import redis
    from kombu import Producer

    publish = Producer.publish
    done = {"n": 0}

    def publish_then_maybe_die(self: Producer, *args: Any, **kwargs: Any) -> Any:
        result = publish(self, *args, **kwargs)
        done["n"] += 1
        if done["n"] == published:
            redis.Redis.from_url(os.environ["DREAM_BROKER_URL"]).shutdown(nosave=True)
        return result

    Producer.publish = publish_then_maybe_die  # type: ignore[method-assign]


def main(args: list[str]) -> None:
    from worker.cli import main as dream

    taken = _count_producers()
    if dies_after := os.environ.get("PROBE_BROKER_DIES_AFTER"):
        _kill_broker_after(int(dies_after))
    try:
        dream.main(args, prog_name="dream", standalone_mode=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    sys.stdout.flush()
    print(json.dumps({**taken, "exit": code}))


if __name__ == "__main__":
    main(sys.argv[1:])

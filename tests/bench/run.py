"""Performance benchmark (``make bench``): all four phases over every scope of a planted corpus.

Modes: in-process (one process, scopes in turn) and Celery (a real ``celery worker -c 2`` on
Redis); a zero-latency model stand-in and one answering after 200 ms with concurrency 8; the
peer baseline (one pgvector query per note) on the same data. Prints tables; see README.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event, make_url, select, text

from tests.bench import corpus
from tests.bench.bench_llm import BenchLLM
from worker.app import App, build_app
from worker.config import Settings
from worker.domain.types import PHASES, RunStatus
from worker.logging import configure_logging
from worker.store.db import make_engine
from worker.store.migrate import upgrade

WORKDIR = Path(tempfile.gettempdir()) / f"dream-bench-{os.getuid()}"
BENCH_BROKER = "redis://127.0.0.1:6379/14"
SEED = 7


# ---------------------------------------------------------------------------------------------
# Databases: one template per (backend, corpus), copied for every measured run.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CorpusSpec:
    scopes: int
    notes_per_scope: int
    seed: int = SEED

    @property
    def notes(self) -> int:
        return self.scopes * self.notes_per_scope

    @property
    def tag(self) -> str:
        # The schema head is part of the name: a template built before a migration would
        # otherwise be reused and every run would fail on a missing column.
        return f"s{self.scopes}_n{self.notes_per_scope}_r{self.seed}_{_schema_head()}"


def _schema_head() -> str:
    from alembic.script import ScriptDirectory

    from worker.store.migrate import MIGRATIONS_DIR

    return str(ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head())

# The benchmark measures the phases, not the blast-radius guard (R20): no scope trips it.
ALLOW_EVERY_NOTE = 10**9


def _settings(url: str, **overrides: Any) -> Settings:
    return Settings(database_url=url, llm_provider="none", **overrides)


def _pg_base() -> str:
    from tests.support.services import postgres_url

    try:
        return postgres_url()
    except BaseException as exc:  # pytest.skip raises a BaseException outside pytest
        raise SystemExit(f"PostgreSQL unavailable for the bench: {exc}") from None


def _pg_url(db: str) -> str:
    url = make_url(_pg_base())
    return url.set(database=db).render_as_string(hide_password=False)


def _pg_admin(sql: str) -> None:
    engine = make_engine(_pg_base(), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(sql))
    engine.dispose()


def _pg_exists(db: str) -> bool:
    engine = make_engine(_pg_base())
    with engine.connect() as conn:
        found = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": db}).first()
    engine.dispose()
    return found is not None


def template(backend: str, spec: CorpusSpec) -> tuple[str, float]:
    """Build (once) the loaded corpus for this backend; returns its locator and load seconds."""
    WORKDIR.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if backend == "sqlite":
        path = WORKDIR / f"tpl_{spec.tag}.db"
        if path.exists():
            return str(path), 0.0
        tmp = path.with_suffix(".tmp")
        for p in WORKDIR.glob(tmp.name + "*"):
            p.unlink()
        app = build_app(_settings(f"sqlite:///{tmp}"))
        upgrade(app.engine)
        corpus.load(app, spec.seed, spec.scopes, spec.notes_per_scope)
        corpus.analyze(app)
        with app.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        app.dispose()
        tmp.rename(path)
        return str(path), time.perf_counter() - started
    db = f"bench_tpl_{spec.tag}"
    if _pg_exists(db):
        return db, 0.0
    building = db + "_building"
    _pg_admin(f"DROP DATABASE IF EXISTS {building}")
    _pg_admin(f"CREATE DATABASE {building}")
    app = build_app(_settings(_pg_url(building)))
    upgrade(app.engine)
    corpus.load(app, spec.seed, spec.scopes, spec.notes_per_scope)
    corpus.analyze(app)
    app.dispose()
    _pg_admin(f"ALTER DATABASE {building} RENAME TO {db}")
    return db, time.perf_counter() - started


def fresh_copy(backend: str, tpl: str, name: str) -> str:
    """A writable copy of the template; returns its database URL."""
    if backend == "sqlite":
        dst = WORKDIR / f"run_{name}.db"
        for p in WORKDIR.glob(dst.name + "*"):
            p.unlink()
        shutil.copyfile(tpl, dst)
        return f"sqlite:///{dst}"
    db = f"bench_run_{name}"
    _pg_admin(f"DROP DATABASE IF EXISTS {db}")
    _pg_admin(f"CREATE DATABASE {db} TEMPLATE {tpl}")
    return _pg_url(db)


# ---------------------------------------------------------------------------------------------
# In-process runs (in a fresh child process so peak RSS is the run's own).
# ---------------------------------------------------------------------------------------------
def _count_sql(app: App) -> Counter[str]:
    counter: Counter[str] = Counter()
    current = {"phase": "setup"}

    @event.listens_for(app.engine, "before_cursor_execute")
    def _count(*_: Any, **__: Any) -> None:
        counter[current["phase"]] += 1

    counter_any: Any = counter
    counter_any.current = current
    return counter


def _inprocess_child(url: str, scopes: int, latency: float | None, concurrency: int,
                     extra: dict[str, Any], out: Any, part: tuple[int, int] = (0, 1)) -> None:
    import resource

    from worker.runs import service

    configure_logging("auto", "WARNING")
    llm = BenchLLM(latency) if latency is not None else None
    app = build_app(_settings(url, llm_concurrency=concurrency, **extra), llm=llm)
    sql = _count_sql(app)
    phase_wall: Counter[str] = Counter()
    scope_list = _scopes_in(app)[:scopes] if scopes else _scopes_in(app)
    scope_list = scope_list[part[0]::part[1]]  # this worker's share (--workers)
    before = _status_counts(app)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    start_epoch = time.time()
    t0 = time.perf_counter()
    for scope in scope_list:
        cur: Any = sql
        cur.current["phase"] = "setup"
        run_id = service.create_run(app, scope, trigger="bench", force=True, clock=corpus.NOW,
                                    allow_retire=ALLOW_EVERY_NOTE)
        assert run_id is not None
        service.record_before(app, run_id)
        cache: dict[str, Any] = {}  # what execute_run carries from phase to phase
        for phase in PHASES:
            cur.current["phase"] = phase
            p0 = time.perf_counter()
            service.execute_phase(app, run_id, phase, cache)
            phase_wall[phase] += time.perf_counter() - p0
        cur.current["phase"] = "setup"
        service.finalize_run(app, run_id)
    wall = time.perf_counter() - t0
    after = _status_counts(app)
    steps = _step_summary(app)
    out.put({
        "wall": wall, "phase_wall": dict(phase_wall), "span": (start_epoch, start_epoch + wall), "sql": dict(sql), "scopes": len(scope_list),
        "before": before, "after": after, "steps": steps,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load": os.getloadavg()[0],  # other work on the machine during this run
        # CPU seconds of this process: robust to other load on the machine, unlike wall time.
        "cpu": resource.getrusage(resource.RUSAGE_SELF).ru_utime
        + resource.getrusage(resource.RUSAGE_SELF).ru_stime - cpu0,
        "calls": llm.calls if llm else 0, "tokens": (llm.tokens_in + llm.tokens_out) if llm else 0,
        "calls_by_prompt": dict(llm.by_prompt) if llm else {},
    })
    app.dispose()


def _scopes_in(app: App) -> list[Any]:
    with app.uow() as uow:
        return uow.notes.scopes()


def _status_counts(app: App) -> dict[str, int]:
    with app.uow() as uow:
        return uow.notes.count_by_status()


def _step_summary(app: App) -> dict[str, Any]:
    """Per phase: statuses of the parent steps, summed integer counters, tokens."""
    from worker.store.models import RunStepRow

    with app.uow() as uow:
        rows = uow.session.execute(
            select(RunStepRow.phase, RunStepRow.status, RunStepRow.output,
                   RunStepRow.tokens_in, RunStepRow.tokens_out)
            .where(RunStepRow.parent_id.is_(None))
        ).all()
    summary: dict[str, Any] = {}
    for phase, status, output, t_in, t_out in rows:
        s = summary.setdefault(phase, {"statuses": Counter(), "counters": Counter(), "tokens": 0})
        s["statuses"][status] += 1
        s["tokens"] += (t_in or 0) + (t_out or 0)
        for k, v in (output or {}).items():
            if isinstance(v, int) and not isinstance(v, bool):
                s["counters"][k] += v
    return {p: {"statuses": dict(v["statuses"]), "counters": dict(v["counters"]),
                "tokens": v["tokens"]} for p, v in summary.items()}


WORKERS = 1  # in-process worker processes, each taking every N-th scope (--workers)


def _result_of(q: Any, procs: list[Any]) -> dict[str, Any]:
    """The next child's result; a child that died without one ends the bench with its exit code
    instead of leaving the parent waiting on the queue for ever."""
    import queue

    while True:
        try:
            return q.get(timeout=5)  # type: ignore[no-any-return]
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise SystemExit(f"error: a bench worker process exited with code "
                                 f"{dead[0].exitcode} before reporting (its traceback is above)") from None


def run_inprocess(url: str, *, scopes: int = 0, latency: float | None = None,
                  concurrency: int = 4, extra: dict[str, Any] | None = None,
                  workers: int | None = None) -> dict[str, Any]:
    """All phases over the scopes in ``workers`` fresh processes (default ``--workers``).

    With several workers: wall = first start → last finish, CPU and SQL summed, RSS the
    largest single process (each is its own process, as Celery's are)."""
    workers = workers or WORKERS
    before = None
    if workers > 1:  # counted here: the workers start at different moments
        app = build_app(_settings(url))
        before = _status_counts(app)
        app.dispose()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_inprocess_child,
                         args=(url, scopes, latency, concurrency, extra or {}, q, (k, workers)))
             for k in range(workers)]
    for p in procs:
        p.start()
    results = [_result_of(q, procs) for _ in procs]
    for p in procs:
        p.join()
    if workers == 1:
        return results[0]
    merged = dict(results[0])
    merged["wall"] = max(r["span"][1] for r in results) - min(r["span"][0] for r in results)
    merged["phase_wall"] = {ph: sum(r["phase_wall"].get(ph, 0) for r in results) / workers
                            for ph in PHASES}
    merged["sql"] = dict(sum((Counter(r["sql"]) for r in results), Counter()))
    for key in ("scopes", "cpu", "calls", "tokens"):
        merged[key] = sum(r[key] for r in results)
    merged["rss_mb"] = max(r["rss_mb"] for r in results)
    merged["calls_by_prompt"] = dict(sum((Counter(r["calls_by_prompt"]) for r in results),
                                         Counter()))
    app = build_app(_settings(url))
    merged["before"], merged["after"] = before, _status_counts(app)
    merged["steps"] = _step_summary(app)
    app.dispose()
    return merged


# ---------------------------------------------------------------------------------------------
# Celery: a real worker subprocess with 2 processes on Redis.
# ---------------------------------------------------------------------------------------------
def run_celery(url: str, *, latency: float = 0.0, workers: int = 2) -> dict[str, Any]:
    import psutil
    import redis

    redis.Redis.from_url(BENCH_BROKER).flushdb()
    env = dict(os.environ, DREAM_DATABASE_URL=url, DREAM_BROKER_URL=BENCH_BROKER,
               DREAM_LLM_PROVIDER="none", DREAM_BENCH_LATENCY=str(latency),
               DREAM_LOG_LEVEL="WARNING", DREAM_LOG_FORMAT="json",
               PYTHONPATH=str(Path.cwd()))
    log_file = (WORKDIR / "celery.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.bench.celery_worker", "worker",
         "-c", str(workers), "-P", "prefork", "-Q", "dream", "--loglevel=WARNING",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        env=env, stdout=subprocess.DEVNULL, stderr=log_file,
        start_new_session=True,
    )
    try:
        os.environ["DREAM_DATABASE_URL"] = url
        os.environ["DREAM_BROKER_URL"] = BENCH_BROKER
        os.environ["DREAM_LOG_LEVEL"] = "WARNING"
        from worker import celery_app as capp

        capp.app.conf.broker_url = BENCH_BROKER
        capp._resources.clear()
        from worker.runs import service
        from worker.tasks import enqueue_run

        app = capp.resources()
        before = _status_counts(app)
        scope_list = _scopes_in(app)
        ps = psutil.Process(proc.pid)
        _wait_children(ps, workers)
        t0 = time.perf_counter()
        for scope in scope_list:
            run_id = service.create_run(app, scope, trigger="bench", force=True, clock=corpus.NOW,
                                    allow_retire=ALLOW_EVERY_NOTE)
            assert run_id is not None
            enqueue_run(run_id)
        peak = 0.0
        from worker.store.models import DreamRunRow

        while True:
            with app.uow() as uow:
                open_runs = uow.session.scalar(
                    select(text("count(*)")).select_from(DreamRunRow).where(
                        DreamRunRow.status.in_([RunStatus.QUEUED.value, RunStatus.RUNNING.value]))
                )
            peak = max(peak, _tree_rss(ps))
            if not open_runs:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker exited; see {WORKDIR / 'celery.log'}")
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        after = _status_counts(app)
        steps = _step_summary(app)
        app.dispose()
        capp._resources.clear()
        return {"wall": wall, "before": before, "after": after, "steps": steps,
                "rss_mb": peak, "scopes": len(scope_list)}
    finally:
        # SIGTERM to the main process only: a warm shutdown lets each child finish its task.
        # (killpg(SIGTERM) hit the pool children directly; Celery then logged them as "exited
        # prematurely: signal 15" — the harness's own cleanup, not a crash.)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log_file.close()


def _wait_children(ps: Any, n: int, timeout: float = 60) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if len(ps.children(recursive=True)) >= n:
            time.sleep(1.0)  # let worker_process_init finish building the App
            return
        time.sleep(0.2)
    raise RuntimeError("celery worker processes did not start")


def _tree_rss(ps: Any) -> float:
    """Peak-ish RSS of the busiest worker process (each child is its own process, ≤ 1 GB each)."""
    try:
        return max([c.memory_info().rss for c in ps.children(recursive=True)] + [0]) / 2**20
    except Exception:
        return 0.0


# ---------------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------------
def table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    cells = [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(header)]
    print(f"\n## {title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    sys.stdout.flush()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def retired(r: dict[str, Any]) -> int:
    b, a = r["before"], r["after"]
    return (a.get("revoked", 0) - b.get("revoked", 0)) + (a.get("archived", 0) - b.get("archived", 0))


def report_run(label: str, notes: int, r: dict[str, Any]) -> list[list[Any]]:
    """Rows (one per phase plus total) for the per-phase table."""
    rows = []
    scopes = max(1, r["scopes"])
    phase_wall = r.get("phase_wall", {})
    for phase in PHASES:
        st = r["steps"].get(phase, {})
        wall = phase_wall.get(phase)
        c = st.get("counters", {})
        retired_phase = sum(v for k, v in c.items()
                            if any(w in k for w in ("revoked", "archived", "retired",
                                                    "conflicts_resolved", "equivalents_merged")))
        rows.append([label, phase, wall if wall is not None else "-",
                     notes / wall if wall else "-",
                     r["sql"].get(phase, 0) / scopes if "sql" in r else "-",
                     retired_phase, r.get("calls_by_prompt", {}).get(phase, "-"),
                     st.get("tokens", 0), ",".join(f"{k}:{v}" for k, v in
                                                   sorted(st.get("statuses", {}).items()))])
    ret = retired(r)
    calls = r.get("calls", 0)
    tokens = sum(s.get("tokens", 0) for s in r["steps"].values())
    rows.append([label, "TOTAL", r["wall"], notes / r["wall"],
                 sum(r["sql"].values()) / scopes if "sql" in r else "-", ret,
                 f"{calls} ({calls / ret:.2f}/retired)" if ret and "calls" in r else "-",
                 f"{tokens} ({tokens / ret:.0f}/retired)" if ret else tokens,
                 f"rss {r['rss_mb']:.0f} MB"
                 + (f", cpu {r['cpu']:.1f} s" if "cpu" in r else "")
                 + (f", load {r['load']:.1f}" if "load" in r else "")])
    return rows


PHASE_HEADER = ["run", "phase", "wall s", "notes/s", "SQL/scope", "retired", "model calls",
                "tokens", "steps / notes"]


# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------
def _w() -> str:
    return f" w{WORKERS}" if WORKERS > 1 else ""


def bench_corpus(backend: str, spec: CorpusSpec, modes: set[str]) -> list[list[Any]]:
    tpl, load_s = template(backend, spec)
    print(f"# {backend}: corpus {spec.notes:,} notes in {spec.scopes:,} scopes "
          f"({f'loaded in {load_s:.1f} s' if load_s else 'cached template'})", flush=True)
    rows: list[list[Any]] = []
    if "rule" in modes:
        label = f"{backend} {spec.notes // 1000}k/{spec.scopes} rule{_w()}"
        r = run_inprocess(fresh_copy(backend, tpl, "rule"))
        rows += report_run(label, spec.notes, r)
    if "fake" in modes:
        label = f"{backend} {spec.notes // 1000}k/{spec.scopes} fake0{_w()}"
        r = run_inprocess(fresh_copy(backend, tpl, "fake"), latency=0.0, concurrency=8)
        rows += report_run(label, spec.notes, r)
    if "celery" in modes:
        label = f"{backend} {spec.notes // 1000}k/{spec.scopes} celery-2 fake0"
        r = run_celery(fresh_copy(backend, tpl, "celery"), latency=0.0)
        rows += report_run(label, spec.notes, r)
    return rows


def bench_latency(backend: str, notes: int, latency: float, concurrency: int) -> list[Any]:
    """One scope; model-bound wall vs the ideal calls × latency / concurrency."""
    spec = CorpusSpec(1, notes)
    tpl, _ = template(backend, spec)
    zero = run_inprocess(fresh_copy(backend, tpl, "lat0"), latency=0.0, concurrency=concurrency)
    slow = run_inprocess(fresh_copy(backend, tpl, "lat"), latency=latency, concurrency=concurrency)
    model_phases = ("consolidate", "contradictions")
    wall0 = sum(zero["phase_wall"].get(p, 0) for p in model_phases)
    wall = sum(slow["phase_wall"].get(p, 0) for p in model_phases)
    ideal = slow["calls"] * latency / concurrency
    extra = wall - wall0
    return [backend, notes, slow["calls"], f"{latency * 1000:.0f} ms", concurrency, ideal, wall,
            wall0, f"{extra / ideal:.2f}×" if ideal else "-"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make bench", description=__doc__)
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--scopes", type=int, default=100)
    ap.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per model call (0 = skip)")
    ap.add_argument("--latency-notes", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--modes", default="rule,fake,celery",
                    help="comma list: rule (rule-based judge), fake (zero-latency model), "
                         "celery (2 worker processes on Redis, zero-latency model)")
    ap.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--sweep", action="store_true", help="10k → 100k → 1M (1M on PostgreSQL)")
    ap.add_argument("--sweep-max", type=int, default=1_000_000)
    ap.add_argument("--large-scope", type=int, default=0, metavar="N",
                    help="also one scope of N notes (approximate index path), e.g. 50000")
    ap.add_argument("--quick", action="store_true", help="10k notes in 100 scopes, SQLite only")
    ap.add_argument("--workers", type=int, default=1,
                    help="in-process runs: this many worker processes share the scopes "
                         "(2 = both cores, as `celery worker -c 2` would)")
    args = ap.parse_args(argv)
    global WORKERS
    WORKERS = max(1, args.workers)
    configure_logging("auto", "WARNING")
    if args.quick:
        args.notes, args.scopes, args.backend = 2_000, 20, "sqlite"
        args.latency_notes, args.baseline = 1000, False
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    _machine()
    spec = CorpusSpec(args.scopes, max(1, args.notes // args.scopes))
    rows: list[list[Any]] = []
    for backend in backends:
        rows += bench_corpus(backend, spec, set(args.modes.split(",")))
    table(f"All phases, {spec.notes:,} notes in {spec.scopes:,} scopes", PHASE_HEADER, rows)
    if args.latency:
        lat = [bench_latency(b, args.latency_notes, args.latency, args.concurrency)
               for b in backends]
        table("Model-bound wall time (consolidate + contradictions, one scope)",
              ["backend", "notes", "calls", "latency", "conc.", "ideal s", "wall s",
               "wall@0ms s", "(wall − wall@0) / ideal"], lat)
    if args.baseline:
        from tests.bench import baseline

        pg_tpl, _ = template("postgres", spec)
        baseline.report(_pg_url(pg_tpl), spec, table)
    if args.sweep:
        sweep(args.sweep_max)
    if args.large_scope:
        large_scope(backends[0], args.large_scope)
    return 0


def sweep(max_notes: int) -> None:
    rows: list[list[Any]] = []
    for notes in (10_000, 100_000, 1_000_000):
        if notes > max_notes:
            break
        for backend in (("sqlite", "postgres") if notes < 1_000_000 else ("postgres",)):
            spec = CorpusSpec(notes // 100, 100)
            tpl, load_s = template(backend, spec)
            r = run_inprocess(fresh_copy(backend, tpl, "sweep"))
            rows.append([backend, notes, spec.scopes, load_s or "cached", r["wall"],
                         notes / r["wall"], r["rss_mb"], retired(r),
                         sum(r["sql"].values()) / spec.scopes])
            print(f"# sweep {backend} {notes:,}: {r['wall']:.1f} s", flush=True)
    table("Scale sweep (100 notes per scope, rule-based judge, in-process)",
          ["backend", "notes", "scopes", "load s", "wall s", "notes/s", "peak RSS MB",
           "retired", "SQL/scope"], rows)


def large_scope(backend: str, notes: int) -> None:
    from tests.bench import baseline

    spec = CorpusSpec(1, notes)
    tpl, _ = template(backend, spec)
    url = tpl if backend == "postgres" else f"sqlite:///{tpl}"
    if backend == "postgres":
        url = _pg_url(tpl)
    search = baseline.index_paths(url, notes)
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
          f"Python {platform.python_version()}, {platform.system()} {platform.machine()}")


if __name__ == "__main__":
    sys.exit(main())

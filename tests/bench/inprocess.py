"""In-process runs: every scope's run executed by the real engine in fresh child processes.

Each child builds its App (as a Celery worker process does), creates one forced run per scope of
its share and executes it with ``service.execute_run``. A ``Meter`` charges wall time, CPU time
(all threads of the process: the model fan-out included) and SQL statements to what is running:
each phase function of the registry (load, plan, judge, apply, steps) or the engine around them
(create, claim, finalize; a phase's write committed by the engine with the phase's finish is
charged to the phase). The registry is wrapped where the engine looks it up
(``worker.phases.phase_registry``), so the same harness measures any commit of the worker.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, select

import worker.app as app_module
from tests.bench import corpus
from tests.bench.bench_llm import BenchLLM
from tests.bench.stores import settings
from worker.app import App, build_app
from worker.logging import configure_logging

# The benchmark measures the phases, not the blast-radius guard (R20): no scope trips it.
ALLOW_EVERY_NOTE = 10**9
ENGINE = "engine"  # create_run, claim, phase steps, finalize: everything outside a phase


class Meter:
    """Exclusive wall/CPU seconds and SQL statements per section of this process."""

    def __init__(self, app: App) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.sql: Counter[str] = Counter()
        self.current = "setup"
        self.last_phase: str | None = None  # the phase whose held write the engine commits
        self._mark = (time.perf_counter(), time.process_time())
        event.listen(app.engine, "before_cursor_execute", self._count)

    def _count(self, *_: Any, **__: Any) -> None:
        self.sql[self.current] += 1

    def _switch(self, name: str) -> str:
        wall, cpu = time.perf_counter(), time.process_time()
        self.wall[self.current] += wall - self._mark[0]
        self.cpu[self.current] += cpu - self._mark[1]
        self._mark = (wall, cpu)
        previous, self.current = self.current, name
        return previous

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        previous = self._switch(name)
        try:
            yield
        finally:
            self._switch(previous)


def metered_registry(meter: Meter) -> None:
    """Every registry the engine builds from now on charges each phase to its own section."""
    import worker.phases as phases

    original = phases.phase_registry

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def metered(*args: Any, **kwargs: Any) -> Any:
            meter.last_phase = name
            with meter.section(name):
                return fn(*args, **kwargs)
        return metered

    def registry() -> Any:
        return {name: wrap(name, fn) for name, fn in original().items()}

    phases.phase_registry = registry
    _meter_held_commits(meter)
    _count_raw_loads(meter)


def _meter_held_commits(meter: Meter) -> None:
    """Where the engine commits a phase's held write with the phase's finish (one statement,
    one commit: ``runs.context.HeldWrite``), that commit is the phase's write and is charged to
    the phase, as the phase's own commit was before; older checkouts commit inside the phase."""
    import importlib

    try:  # an older checkout (--before) may have neither module
        context = importlib.import_module("worker.runs.context")
        phase_run = importlib.import_module("worker.runs.phase_run")
    except ImportError:
        return
    finish = getattr(phase_run, "_finish", None)
    if finish is None or not hasattr(context, "HeldWrite"):
        return

    def metered(*args: Any, **kwargs: Any) -> Any:
        with meter.section(meter.last_phase or ENGINE):
            return finish(*args, **kwargs)

    setattr(phase_run, "_finish", metered)  # noqa: B010 (a module found at run time)


def _count_raw_loads(meter: Meter) -> None:
    """The scope load on PostgreSQL runs on a raw psycopg cursor (binary vectors), which
    SQLAlchemy's events do not see: each is counted here as the statement it is."""
    import importlib

    try:  # an older checkout (--before) may load otherwise
        note_load = importlib.import_module("worker.store.repositories.note_load")
    except ImportError:
        return
    fetch = getattr(note_load, "_fetch_binary", None)
    if fetch is None:
        return

    def counted(*args: Any, **kwargs: Any) -> Any:
        meter.sql[meter.current] += 1
        return fetch(*args, **kwargs)

    setattr(note_load, "_fetch_binary", counted)  # noqa: B010 (a module found at run time)


def _child(url: str, latency: float | None, concurrency: int, extra: dict[str, Any],
           out: Any, part: tuple[int, int]) -> None:
    from worker.runs import service

    configure_logging("auto", "WARNING")
    llm = BenchLLM(latency) if latency is not None else None
    app = build_app(settings(url, llm_concurrency=concurrency, **extra), llm=llm)
    meter = Meter(app)
    metered_registry(meter)
    # As a Celery worker process does once its App is built (celery_app); an older checkout
    # (--before) only froze what it had built.
    getattr(app_module, "settle_process", gc.freeze)()
    scope_list = scopes_in(app)[part[0]::part[1]]
    statuses: Counter[str] = Counter()
    start_epoch, t0, cpu0 = time.time(), time.perf_counter(), time.process_time()
    # The path `dream run` takes on this checkout: a run created already claimed where the
    # worker has that (--before runs this harness on older commits, which create, then claim).
    create = getattr(service, "create_claimed_run", service.create_run)
    with meter.section(ENGINE):
        for scope in scope_list:
            run = create(app, scope, trigger="bench", force=True, clock=corpus.NOW,
                         allow_retire=ALLOW_EVERY_NOTE)
            assert run is not None, f"a run is already open for {scope.key}"
            statuses[str(service.execute_run(app, run))] += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    out.put({
        "wall": wall, "cpu": cpu, "span": (start_epoch, start_epoch + wall),
        "phase_wall": dict(meter.wall), "phase_cpu": dict(meter.cpu), "sql": dict(meter.sql),
        "scopes": len(scope_list), "run_status": dict(statuses),
        "rss_mb": _peak_rss_mb(),
        "load": os.getloadavg()[0],
        "calls": llm.calls if llm else 0, "tokens": (llm.tokens_in + llm.tokens_out) if llm else 0,
        "calls_by_prompt": dict(llm.by_prompt) if llm else {},
        "model_cpu_by_prompt": dict(llm.cpu_by_prompt) if llm else {},
    })
    app.dispose()


def _peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM). Not ``ru_maxrss``: Linux carries that across the
    exec of a spawned child, so a child of a parent that just built a large corpus reported
    the parent's peak as its own."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def scopes_in(app: App) -> list[Any]:
    with app.uow() as uow:
        return list(uow.notes.scopes())


def status_counts(app: App) -> dict[str, int]:
    with app.uow() as uow:
        return dict(uow.notes.count_by_status())


def step_summary(app: App) -> dict[str, Any]:
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
        s["statuses"][str(status)] += 1
        s["tokens"] += (t_in or 0) + (t_out or 0)
        for k, v in (output or {}).items():
            if isinstance(v, int) and not isinstance(v, bool):
                s["counters"][k] += v
    return {p: {"statuses": dict(v["statuses"]), "counters": dict(v["counters"]),
                "tokens": v["tokens"]} for p, v in summary.items()}


def _result_of(q: Any, procs: list[Any], loads: list[float]) -> dict[str, Any]:
    """The next child's result; a child that died without one ends the bench with its exit code
    instead of leaving the parent waiting for ever. Samples the 1-minute load meanwhile."""
    while True:
        loads.append(os.getloadavg()[0])
        try:
            result: dict[str, Any] = q.get(timeout=5)
            return result
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise SystemExit(f"error: a bench worker process exited with code "
                                 f"{dead[0].exitcode} before reporting (its traceback is above)"
                                 ) from None


def run_inprocess(url: str, *, latency: float | None = None, concurrency: int = 4,
                  extra: dict[str, Any] | None = None, workers: int = 1) -> dict[str, Any]:
    """All phases over every scope in ``workers`` fresh processes sharing the scopes.

    Wall = first start → last finish; CPU, SQL and per-phase seconds summed over the processes
    (per-phase wall is process-seconds: divide by ``workers`` for elapsed); RSS the largest."""
    app = build_app(settings(url))
    before = status_counts(app)
    app.dispose()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(url, latency, concurrency, extra or {}, q,
                                              (k, workers)))
             for k in range(workers)]
    for p in procs:
        p.start()
    loads: list[float] = []
    results = [_result_of(q, procs, loads) for _ in procs]
    for p in procs:
        p.join()
    merged: dict[str, Any] = {"workers": workers}
    merged["wall"] = max(r["span"][1] for r in results) - min(r["span"][0] for r in results)
    for key in ("phase_wall", "phase_cpu", "sql", "calls_by_prompt", "run_status",
                "model_cpu_by_prompt"):
        merged[key] = dict(sum((Counter(r.get(key, {})) for r in results), Counter()))
    for key in ("scopes", "cpu", "calls", "tokens"):
        merged[key] = sum(r[key] for r in results)
    merged["rss_mb"] = max(r["rss_mb"] for r in results)
    loads += [r["load"] for r in results]
    merged["load"] = sum(loads) / len(loads)  # mean 1-minute load average during the run
    merged["load_max"] = max(loads)
    app = build_app(settings(url))
    merged["before"], merged["after"] = before, status_counts(app)
    merged["steps"] = step_summary(app)
    app.dispose()
    return merged


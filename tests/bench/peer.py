"""The peer, measured in the same run: kore-memory's compressor on the same notes and vectors.

kore-memory (PyPI, ``pip install -e '.[bench]'``) keeps one SQLite table of memories per
installation; its compressor (``kore_memory.compressor``) loads an agent's memories
(``_load_compressible_memories``: one query, plus a recursive query for compression depth) and
clusters them (``_find_clusters``: the full cosine matrix with numpy, greedy, merge above
``KORE_SIMILARITY_THRESHOLD`` = 0.88; no model). Here every scope of our corpus is one kore
agent and every active note with an embedding one memory carrying our vector (kore's own
``serialize``). Timed: that load + clustering for every agent, in a fresh process, as our
phases are; its merge (writes, no model) is not timed, so the comparison favours the peer.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tests.bench.stores import WORKDIR, settings
from worker.app import build_app


def available() -> str | None:
    """None when kore-memory can be imported, else the one-line reason."""
    try:
        import kore_memory.compressor  # noqa: F401
    except ImportError as exc:
        return f"kore-memory is not installed ({exc.name}); `.venv/bin/pip install -e '.[bench]'`"
    return None


def kore_store(our_url: str, tag: str) -> tuple[Path, float]:
    """Build (once per corpus) kore's database from our store; returns its path and seconds."""
    path = WORKDIR / f"kore_{tag}.db"
    if path.exists():
        return path, 0.0
    started = time.perf_counter()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_fill, args=(our_url, str(tmp)))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"error: building kore-memory's store failed (exit {proc.exitcode})")
    tmp.rename(path)
    return path, time.perf_counter() - started


def _rows(our_url: str) -> list[tuple[str, str, float, Any]]:
    from worker.store.models import NoteRow

    app = build_app(settings(our_url))
    with app.uow() as uow:
        rows = uow.session.execute(
            select(NoteRow.scope_key, NoteRow.content, NoteRow.importance, NoteRow.embedding)
            .where(NoteRow.status == "active", NoteRow.embedding.is_not(None))
            .order_by(NoteRow.scope_key, NoteRow.created_at, NoteRow.id)).all()
    app.dispose()
    return [(r[0], r[1], float(r[2]), r[3]) for r in rows]


def _fill(our_url: str, kore_path: str) -> None:
    os.environ["KORE_DB_PATH"] = kore_path
    from kore_memory.database import get_connection, init_db
    from kore_memory.embedder import serialize

    init_db()
    rows = [(scope, text, max(1, min(5, round(importance * 4) + 1)),
             serialize([float(x) for x in vector]))
            for scope, text, importance, vector in _rows(our_url)]
    with get_connection() as conn:
        conn.executemany(
            "INSERT INTO memories (agent_id, content, category, importance, embedding) "
            "VALUES (?, ?, 'general', ?, ?)", rows)
        conn.commit()


def _measure(kore_path: str, out: Any) -> None:
    os.environ["KORE_DB_PATH"] = kore_path
    from kore_memory import compressor
    from kore_memory.database import get_connection

    with get_connection() as conn:
        agents = [r[0] for r in conn.execute("SELECT DISTINCT agent_id FROM memories")]
    clusters = clustered = memories = 0
    t0, c0 = time.perf_counter(), time.process_time()
    for agent in agents:
        loaded = compressor._load_compressible_memories(agent)
        found = compressor._find_clusters(loaded)
        memories += len(loaded)
        clusters += len(found)
        clustered += sum(len(c) for c in found)
    out.put({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
             "agents": len(agents), "memories": memories, "clusters": clusters,
             "clustered": clustered, "threshold": compressor.SIMILARITY_THRESHOLD,
             "load": os.getloadavg()[0]})


# numpy's BLAS runs a 100 × 100 matrix product on every core and its idle threads spin, which
# counts as CPU; the one-thread measure shows kore's own work on the one core our phase uses.
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def measure(kore_path: Path, *, one_thread: bool = False) -> dict[str, Any]:
    """kore's load + clustering over every agent, in a fresh process (as our runs are); with
    ``one_thread``, its BLAS limited to one thread (set before the child imports numpy)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    saved = {k: os.environ.get(k) for k in _BLAS_THREADS}
    if one_thread:
        os.environ.update(dict.fromkeys(_BLAS_THREADS, "1"))
    try:
        proc = ctx.Process(target=_measure, args=(str(kore_path), q))
        proc.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    result: dict[str, Any] = q.get()
    proc.join()
    return result


def compare(ours: dict[str, Any], peer: dict[str, Any],
            single: dict[str, Any] | None = None) -> list[list[Any]]:
    """Rows: our consolidation phase vs kore's load + clustering, and the ratio; with
    ``single``, kore again with one BLAS thread and our ratio to that."""
    workers = ours.get("workers", 1)
    wall = ours["phase_wall"].get("consolidate", 0.0) / workers
    cpu = ours["phase_cpu"].get("consolidate", 0.0)
    counters = ours["steps"].get("consolidate", {}).get("counters", {})
    merged = ", ".join(f"{k} {v:,}" for k, v in sorted(counters.items())
                       if k in ("clusters", "clusters_merged", "merged", "notes_revoked",
                                "notes_retired", "equivalents_merged"))
    # The stand-in model answers in this process; a real model's answers cost it nothing.
    stand_in = sum(v for k, v in ours.get("model_cpu_by_prompt", {}).items()
                   if k.startswith("consolidate"))
    return [
        ["dream-worker consolidate (load, cluster, judge, apply, steps)", wall, cpu,
         merged or "-"],
        *([["  of which the stand-in model answering (a real model runs elsewhere)", "-",
            stand_in, f"{stand_in / cpu:.0%} of the phase's CPU"]] if stand_in and cpu else []),
        [f"kore-memory 3.0.4 load + clustering (> {peer['threshold']:.2f}, no merge)",
         peer["wall"], peer["cpu"],
         f"{peer['clusters']:,} clusters, {peer['clustered']:,} of {peer['memories']:,} "
         f"memories in {peer['agents']:,} agents"],
        ["ratio dream-worker / kore-memory", f"{wall / peer['wall']:.2f}×" if peer["wall"] else "-",
         f"{cpu / peer['cpu']:.2f}×" if peer["cpu"] else "-",
         "< 1 = ours faster" + (f" (ours over {workers} processes)" if workers > 1 else "")],
        *([] if single is None else [
            ["kore-memory, BLAS on one thread (the one core our phase uses)", single["wall"],
             single["cpu"], f"{single['clusters']:,} clusters"],
            ["ratio dream-worker / kore-memory on one thread",
             f"{wall / single['wall']:.2f}×" if single["wall"] else "-",
             f"{cpu / single['cpu']:.2f}×" if single["cpu"] else "-", "< 1 = ours faster"]]),
    ]

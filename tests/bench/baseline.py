"""The peer approach on the same data: one pgvector query per note, greedy seeding.

For each note of a scope: ``ORDER BY embedding <=> :v LIMIT 10``; an unassigned note seeds a
cluster of its unassigned neighbours at the consolidation threshold (one model call per cluster);
every neighbour at the contradiction threshold is a pair (one model call per pair). Calls are
counted, not made. Ours: one bulk fetch per scope and one FAISS range search.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from worker.app import build_app
from worker.config import Settings
from worker.similarity import neighbour_pairs

_NEIGHBOURS = (
    "SELECT id, embedding <=> %(v)s AS d FROM notes "
    "WHERE scope_key = %(s)s AND status = 'active' AND embedding IS NOT NULL AND id <> %(id)s "
    "ORDER BY embedding <=> %(v)s LIMIT 10"
)
_SCOPE = ("SELECT id, embedding FROM notes WHERE scope_key = %(s)s AND status = 'active' "
          "AND embedding IS NOT NULL ORDER BY id")


def peer_baseline(url: str, scope_keys: list[str], cons: float, contra: float,
                  limit_scopes: int | None = None) -> dict[str, Any]:
    """Time the per-note queries and count the calls the peer approach would make."""
    import psycopg
    from pgvector.psycopg import register_vector

    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    clusters = pairs = queries = 0
    keys = scope_keys[:limit_scopes] if limit_scopes else scope_keys
    t0 = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        with conn.cursor() as cur:
            for key in keys:
                cur.execute(_SCOPE, {"s": key}, binary=True)
                notes = cur.fetchall()
                assigned: set[str] = set()
                seen_pairs: set[tuple[str, str]] = set()
                for nid, vec in notes:
                    cur.execute(_NEIGHBOURS, {"v": vec, "s": key, "id": nid})
                    queries += 1
                    hits = [(other, 1.0 - d) for other, d in cur.fetchall()]
                    for other, sim in hits:
                        if sim >= contra:
                            seen_pairs.add((min(nid, other), max(nid, other)))
                    if nid in assigned:
                        continue
                    members = [o for o, sim in hits if sim >= cons and o not in assigned]
                    if members:
                        clusters += 1
                        assigned.add(nid)
                        assigned.update(members)
                pairs += len(seen_pairs)
    elapsed = time.perf_counter() - t0
    scale = len(scope_keys) / len(keys)
    return {"search_s": elapsed * scale, "measured_scopes": len(keys), "queries": queries,
            "calls": int((clusters + pairs) * scale), "clusters": int(clusters * scale),
            "pairs": int(pairs * scale)}


def ours(url: str, cons: float, contra: float) -> dict[str, Any]:
    """Our candidate search: per scope the same ``id, embedding`` fetch the peer makes (one
    query, binary) + one FAISS range search. Also timed: the phases' full ``load_scope`` (every
    column the planners need, as Note objects) + the search, i.e. what a phase really spends."""
    import psycopg
    from pgvector.psycopg import register_vector

    app = build_app(Settings(database_url=url, llm_provider="none"))
    with app.uow() as uow:
        scopes = uow.notes.scopes()
    low = min(cons, contra)
    found = 0
    dsn = app.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    t0 = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        with conn.cursor() as cur:
            for scope in scopes:
                cur.execute(_SCOPE, {"s": scope.key}, binary=True)
                rows = cur.fetchall()
                vectors = (np.vstack([np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v,
                                                 dtype=np.float32) for _, v in rows])
                           if rows else np.zeros((0, 0), dtype=np.float32))
                found += len(neighbour_pairs(vectors, low, app.settings.ann_threshold))
    elapsed = time.perf_counter() - t0
    t1 = time.perf_counter()
    for scope in scopes:
        with app.uow() as uow:
            snap = uow.notes.load_scope(scope)
        neighbour_pairs(snap.vectors, low, app.settings.ann_threshold)
    full = time.perf_counter() - t1
    app.dispose()
    return {"search_s": elapsed, "full_s": full, "pairs": found,
            "scope_keys": [s.key for s in scopes]}


def our_calls(url: str) -> int:
    """Model calls our phases make on this data (zero-latency stand-in, in a child process)."""
    from tests.bench.inprocess import run_inprocess
    from tests.bench.stores import fresh_copy

    db = make_db_name(url)
    r = run_inprocess(fresh_copy("postgres", db, "calls"), latency=0.0, concurrency=8)
    return int(r["calls"])


def make_db_name(url: str) -> str:
    from sqlalchemy import make_url

    return str(make_url(url).database)


def report(url: str, spec: Any, table: Callable[..., None]) -> dict[str, Any]:
    settings = Settings(database_url=url)
    cons, contra = settings.consolidate.threshold, settings.contradictions.threshold
    mine = ours(url, cons, contra)
    # The per-note path is slow by design; above 200 scopes measure a sample and scale.
    sample = None if len(mine["scope_keys"]) <= 200 else 200
    peer = peer_baseline(url, mine["scope_keys"], cons, contra, sample)
    calls = our_calls(url)
    table(
        f"Candidate search and model calls vs the peer approach (PostgreSQL, {spec.notes:,} notes)",
        ["approach", "search s", "queries", "model calls", "notes"],
        [["ours: bulk load + FAISS per scope", mine["search_s"], len(mine["scope_keys"]), calls,
          f"{mine['pairs']:,} candidate pairs"],
         ["peer: pgvector query per note", peer["search_s"], peer["queries"], peer["calls"],
          f"{peer['clusters']:,} clusters + {peer['pairs']:,} pairs"
          + (f"; timed on {peer['measured_scopes']} scopes, scaled" if sample else "")],
         ["ours incl. full load_scope (Note objects)", mine["full_s"], len(mine["scope_keys"]),
          "-", "what a phase spends before planning"],
         ["ratio ours / peer", mine["search_s"] / peer["search_s"], "-",
          f"{calls / peer['calls']:.2f}" if peer["calls"] else "-",
          f"{peer['search_s'] / mine['search_s']:.1f}× faster (full load: "
          f"{peer['search_s'] / mine['full_s']:.1f}×)"]],
    )
    return {"ours": mine, "peer": peer, "our_calls": calls}


def index_paths(url: str, notes: int) -> dict[str, Any]:
    """Exact vs IVF range search on one big scope: time, pairs and recall of the IVF path."""
    app = build_app(Settings(database_url=url, llm_provider="none"))
    with app.uow() as uow:
        scope = uow.notes.scopes()[0]
        snap = uow.notes.load_scope(scope)
    threshold = app.settings.consolidate.threshold
    t0 = time.perf_counter()
    exact = neighbour_pairs(snap.vectors, threshold, ann_threshold=10**9)
    t1 = time.perf_counter()
    approx = neighbour_pairs(snap.vectors, threshold, app.settings.ann_threshold)
    t2 = time.perf_counter()
    app.dispose()
    e = {(i, j) for i, j, _ in exact}
    a = {(i, j) for i, j, _ in approx}
    return {"exact_s": t1 - t0, "ivf_s": t2 - t1, "exact_pairs": len(e), "ivf_pairs": len(a),
            "recall": len(e & a) / len(e) if e else 1.0, "rows": int(np.int64(len(snap.notes)))}

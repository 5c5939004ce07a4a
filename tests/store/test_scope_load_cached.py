"""The scope load, every phase's one read, is compiled once per process and then taken from
SQLAlchemy's statement cache (SQLite and PostgreSQL). A column element without a cache key
(the retired-into probe once had none) makes SQLAlchemy compile the whole statement on every
load: ≈ 10 % of consolidation's time on the bench, and no test noticed."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.engine.interfaces import CacheStats

from worker.app import App
from worker.ingest import import_notes
from worker.store.repositories.note_load import _LOADS


@pytest.mark.parametrize("vectors", [True, False])
def test_the_scope_load_is_compiled_once(app: App, vectors: bool) -> None:
    params = {"scope_key": "nobody", "statuses": ["active"]}
    with app.uow() as uow:
        conn = uow.session.connection()
        conn.execute(_LOADS[vectors], params).all()
        again = conn.execute(_LOADS[vectors], params)
        again.all()
    assert again.context.cache_hit == CacheStats.CACHE_HIT


def test_sqlite_probes_the_pointer_index_whatever_analyze_found(sqlite_app: App) -> None:
    """ANALYZE on a store where no note was retired yet sees ``consolidated_into_id`` NULL in
    every row, one value in SQLite's statistics; left to itself the planner then scans the
    table once per probed note (≈ 100× the load on a 20k-note store). The load names the
    index."""
    import_notes(sqlite_app, (json.dumps({"agent_id": "a", "content": f"fact {i}",
                                          "source_conversation_id": f"c{i}"})
                              for i in range(50)))
    with sqlite_app.uow() as uow:
        conn = uow.session.connection()
        conn.exec_driver_sql("ANALYZE")
        load = _LOADS[True].params(scope_key="a", statuses=["active"])
        sql = str(load.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True}))
        plan = [r[-1] for r in conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + sql, ("a", "active"))]
    probe = [p for p in plan if "retired_into" in p]
    assert probe and all("USING INDEX ix_notes_consolidated_into" in p for p in probe), plan

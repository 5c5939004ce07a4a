"""The gate check's read of incomplete batch releases goes through the partial index of the
batch steps, on both backends: it never reads the whole run_steps table on every beat."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event

from worker.app import App
from worker.store.repositories.batches import incomplete_releases_query


def test_incomplete_releases_read_the_batch_steps_index(app: App) -> None:
    """The planner picks ``ix_run_steps_batch`` for the query (PostgreSQL with sequential
    scans off, so an empty table does not make a scan cheaper)."""
    stmt = incomplete_releases_query(20, datetime(2026, 1, 1, tzinfo=UTC))
    with app.engine.connect() as conn:
        postgres = conn.dialect.name == "postgresql"
        explain = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "

        # The statement exactly as the repository sends it (parameters, the driver's escaping
        # of the pattern's percent sign), asked for its plan instead of its rows.
        def planned(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
                    executemany: bool) -> tuple[str, Any]:
            return explain + statement, params

        if postgres:
            conn.exec_driver_sql("SET enable_seqscan = off")
        event.listen(conn, "before_cursor_execute", planned, retval=True)
        try:
            rows = conn.execute(stmt).all()
        finally:
            event.remove(conn, "before_cursor_execute", planned)
    plan = "\n".join(str(r[-1]) for r in rows)
    assert "ix_run_steps_batch" in plan, plan

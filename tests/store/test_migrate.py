"""Migrations: one head, clean upgrade on SQLite and PostgreSQL+pgvector, models match (alembic check)."""

from __future__ import annotations

import json

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from worker.app import App
from worker.ingest import import_notes
from worker.store.migrate import MIGRATIONS_DIR, alembic_config, check


def test_single_head(sqlite_app: App) -> None:
    """Exactly one Alembic head, so `dream db upgrade` is never ambiguous."""
    script = ScriptDirectory.from_config(alembic_config(sqlite_app.engine))
    assert len(script.get_heads()) == 1
    assert MIGRATIONS_DIR.is_dir()


def test_models_match_migrations(app: App) -> None:
    """`alembic check` passes: a model change without a migration fails this test."""
    check(app.engine)


def test_one_active_run_index_exists(app: App) -> None:
    """The partial unique index behind R1 is created by the migration on both backends."""
    names = {ix["name"] for ix in inspect(app.engine).get_indexes("dream_runs")}
    assert "uq_dream_runs_one_active_per_scope" in names



@pytest.mark.postgres
def test_a_notes_vector_stays_in_its_row_on_postgres(pg_app: App) -> None:
    """Migration 0009: a 512-dimension vector (2,056 bytes, past PostgreSQL's default toast
    threshold of 2,032) is stored in the notes row, not in the TOAST table that every scope
    load would look it up in; without the migration each vector lands there."""
    import_notes(pg_app, [json.dumps({"agent_id": "a1", "id": f"n{i}",
                                      "content": f"fact {i} about tea"}) for i in range(3)])
    with pg_app.engine.connect() as conn:
        options, vectors, toast_bytes = conn.execute(text(
            "SELECT c.reloptions, (SELECT count(embedding) FROM notes),"
            " pg_relation_size(c.reltoastrelid)"
            " FROM pg_class c WHERE c.oid = 'notes'::regclass")).one()
    assert "toast_tuple_target=8160" in options
    assert vectors == 3 and toast_bytes == 0

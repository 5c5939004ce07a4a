"""Migrations: one head, clean upgrade on SQLite and PostgreSQL+pgvector, models match (alembic check)."""

from __future__ import annotations

from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from worker.app import App
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

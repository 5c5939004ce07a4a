"""Alembic environment: the database URL comes from worker settings unless a connection is given."""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import text

from worker.store.models import Base

config = context.config
target_metadata = Base.metadata


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
    if type_ == "type" and obj.__class__.__module__ == "worker.store.types":
        autogen_context.imports.add("import worker.store.types")
        return f"worker.store.types.{obj.__class__.__name__}()"
    return False


def _configure(connection: Any) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        render_item=render_item,
        compare_type=False,
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    from worker.config import load_settings
    from worker.store.db import make_engine

    url = config.get_main_option("sqlalchemy.url") or load_settings().database_url
    engine = make_engine(url)
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            conn.commit()
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()

"""Run Alembic from code (``dream db upgrade``, test fixtures) against the configured database."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Engine

from worker.resources import resource_dir

MIGRATIONS_DIR = resource_dir("migrations")


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def check(engine: Engine) -> None:
    """Raise if the models differ from what the migrations build (``alembic check``)."""
    with engine.connect() as conn:
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.check(cfg)

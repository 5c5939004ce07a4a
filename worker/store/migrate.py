"""Run Alembic from code (``dream db upgrade``, test fixtures) against the configured database."""

from __future__ import annotations

import logging
from argparse import Namespace
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.util.exc import CommandError
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from worker.errors import ConfigError
from worker.resources import resource_dir
from worker.store.errors import database_error, not_ours
from worker.store.schema import tables_without_revision

MIGRATIONS_DIR = resource_dir("migrations")


def alembic_config(engine: Engine) -> Config:
    # quiet: Alembic's own stdout lines ("No new upgrade operations detected."); each command
    # prints one line of its own.
    cfg = Config(cmd_opts=Namespace(quiet=True))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


@contextmanager
def _known_revision() -> Iterator[None]:
    """A database stamped with a revision these migrations do not have (a newer dream-worker
    migrated it, or another application's Alembic) is the user's to sort out, not a bug."""
    try:
        yield
    except CommandError as exc:
        raise ConfigError(f"the database is at a revision these migrations do not have ({exc}): "
                          "another (newer?) dream-worker or another application migrated it; use "
                          "that version, or point DREAM_DATABASE_URL at another database") from None


@contextmanager
def _alembic_logs(verbose: bool) -> Iterator[None]:
    """Alembic logs each step at INFO ("Context impl SQLiteImpl.", "Running upgrade ..."): shown
    only when asked for, so a successful command leaves stderr clean at the default level."""
    logger = logging.getLogger("alembic")
    level = logger.level
    logger.setLevel(logging.INFO if verbose else max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def _revision(conn: Connection) -> str | None:
    with _alembic_logs(verbose=False):  # not a step: it would log "Context impl" again
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head", *,
            verbose: bool = False) -> tuple[str | None, str | None]:
    """Migrate to ``revision``, all or nothing; the revision before and after (None: no
    schema yet)."""
    with engine.connect() as conn, _alembic_logs(verbose), _known_revision(), \
            _sqlite_transaction_ours(conn), conn.begin():
        if conn.dialect.name == "sqlite":
            # Taken at once: a second upgrade waits here (busy timeout), not half-way through.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        if conn.dialect.name == "postgresql":
            # A migration may rewrite a table or build an index over every note: not cut off
            # by DREAM_DB_STATEMENT_TIMEOUT_SECONDS, which bounds a run's statements. Its lock
            # waits stay bounded: waiting behind a long transaction it would queue every
            # other statement on the table behind itself; it gives up (busy, try again).
            conn.execute(text("SET LOCAL statement_timeout = 0"))
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        before = _revision(conn)
        if before is None:
            _refuse_foreign_tables(conn)
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        try:
            command.upgrade(cfg, revision)
        except SQLAlchemyError as exc:
            raise _migration_failed(exc, before) from None
        return before, _revision(conn)


def _migration_failed(exc: SQLAlchemyError, before: str | None) -> Exception:
    """A statement of a migration failed: the mapping every other command gets ("no schema ...;
    run `dream db upgrade`") would send the user round in a circle. A locked or unreachable
    database keeps its own line; anything else not mapped stays a bug, with its traceback."""
    error = database_error(exc)
    if error is None or "dream db upgrade" not in str(error):
        return exc
    reason = str(getattr(exc, "orig", None) or exc).splitlines()[0][:200]
    return ConfigError(f"a migration failed ({reason}) and the upgrade was rolled back: the "
                       f"database is unchanged, at {before or 'an empty schema'}; see which with "
                       "`dream db upgrade --verbose`, and report it with that output")


@contextmanager
def _sqlite_transaction_ours(conn: Connection) -> Iterator[None]:
    """SQLite: the upgrade's BEGIN is ours, so every statement of it is in one transaction.

    pysqlite opens a transaction only before an INSERT, UPDATE or DELETE, and Alembic, which
    knows SQLite's driver as non-transactional, runs no BEGIN of its own: each CREATE, each
    batch table copy and rename committed on its own, and a migration that failed half-way left
    a half-migrated file (its table made, its revision not recorded, the next upgrade failing
    on "already exists"). SQLite's DDL is transactional; with the driver's own transaction
    handling off (SQLAlchemy's pysqlite recipe for transactional DDL), the commit or rollback
    that ends ``conn.begin()`` ends the BEGIN the caller emits. Turned off before anything runs
    (turning it off commits an open transaction) and back on after that end. PostgreSQL is
    unchanged: its DDL runs in the ``conn.begin()`` transaction already."""
    if conn.dialect.name != "sqlite":
        yield
        return
    driver = conn.connection.driver_connection
    saved = driver.isolation_level  # type: ignore[union-attr]
    driver.isolation_level = None  # type: ignore[union-attr]
    try:
        yield
    finally:
        driver.isolation_level = saved  # type: ignore[union-attr]


def _refuse_foreign_tables(conn: Connection) -> None:
    """A database with no recorded revision that already holds a table the migrations create
    (another application's file, or tables made without the migrations) is refused before the
    first statement: on SQLite each CREATE commits on its own, and a migration that stopped at
    the clash left half of the schema in the other application's file."""
    if clash := tables_without_revision(conn):
        raise not_ours(f"table {clash[0]} already exists")


def check(engine: Engine, *, verbose: bool = False) -> None:
    """Raise if the models differ from what the migrations build (``alembic check``)."""
    with engine.connect() as conn, _alembic_logs(verbose), _known_revision():
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.check(cfg)

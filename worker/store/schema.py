"""Whether a database's schema is the one this dream-worker's migrations build: a command on
an older schema would write rows the missing columns cannot hold, or fail half-way through a
run; one on a newer schema (a newer dream-worker migrated it) would write rows it does not
understand. Both are refused before anything is read or written."""

from __future__ import annotations

import functools

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError, ProgrammingError

from worker.errors import ConfigError
from worker.resources import resource_dir
from worker.store.errors import not_ours


@functools.cache
def known_revisions() -> tuple[str, ...]:
    """The revision ids of the migrations, oldest first. Each file's name starts with its
    revision id (``0014_run_steps_batch_index.py``); reading the names spares every command
    Alembic's parse of every migration (a quarter of a second)."""
    versions = resource_dir("migrations") / "versions"
    return tuple(sorted(path.name.split("_", 1)[0] for path in versions.glob("[0-9]*_*.py")))


def require_current_schema(engine: Engine) -> None:
    """Raise ConfigError unless the database is at the newest migration. A database without
    the schema, or one that cannot be reached, raises the driver's error, which the callers
    translate (worker.store.errors)."""
    with engine.connect() as conn:
        try:
            found = [str(rev) for rev in conn.execute(
                text("SELECT version_num FROM alembic_version")).scalars()]
        except (OperationalError, ProgrammingError):
            # No revision table. Tables of ours without it are another application's (or were
            # built without the migrations): `dream db upgrade` refuses that database, so
            # saying to run it sent the user round in a loop.
            conn.rollback()
            if clash := tables_without_revision(conn):
                raise not_ours(f"table {clash[0]} already exists") from None
            raise
    known = known_revisions()
    if not known or found == [known[-1]]:
        return
    if not found:
        raise ConfigError("the database has no dream-worker schema (no revision recorded); run "
                          "`dream db upgrade`")
    if all(rev in known for rev in found):
        raise ConfigError(f"the database schema is at revision {', '.join(found)}, older than "
                          f"this dream-worker's {known[-1]}; run `dream db upgrade` (it keeps "
                          "the data)")
    raise ConfigError(f"the database is at revision {', '.join(found)}, which this "
                      f"dream-worker's migrations (up to {known[-1]}) do not have: a newer "
                      "dream-worker migrated it; use that version, or point DREAM_DATABASE_URL "
                      "at another database")


def tables_without_revision(conn: Connection) -> list[str]:
    """The tables the migrations create that ``conn``'s database already holds, sorted: on a
    database that records no revision, they are not ours to migrate over."""
    from worker.store.models import Base

    return sorted(set(inspect(conn).get_table_names()) & set(Base.metadata.tables))

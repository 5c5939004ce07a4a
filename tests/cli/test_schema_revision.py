"""A database whose schema is not at the newest migration: every command but `dream db
upgrade` refuses it with one line before reading or writing a row (worker.store.schema)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from tests.cli.test_commands import dream, one_error_line
from worker.app import build_app
from worker.config import Settings
from worker.errors import ConfigError
from worker.store.errors import database_error
from worker.store.migrate import alembic_config, upgrade
from worker.store.schema import known_revisions

IMPORT = '{"id": "n1", "agent_id": "a1", "content": "Prefers tea."}\n'

COMMANDS = [
    ["notes", "import", "-"], ["notes", "add", "--agent", "a1", "--content", "Prefers tea."],
    ["sessions", "add", "--agent", "a1"], ["run", "--agent", "a1", "--force"],
    ["notes", "export"], ["runs", "list"], ["gate", "--explain"], ["db", "check"],
    ["erase", "--user", "u1", "--yes"],
]


def _database_at(tmp_path: Path, revision: str) -> tuple[str, Path]:
    path = tmp_path / "old.db"
    app = build_app(Settings(database_url=f"sqlite:///{path}", llm_provider="none"))
    upgrade(app.engine, revision)
    app.dispose()
    with sqlite3.connect(path) as conn:  # a scope the commands could write to
        conn.execute("INSERT INTO sessions (id, scope_key, agent_id, started_at) VALUES "
                     "('s0', '[\"a1\",null,null]', 'a1', '2026-01-01 00:00:00')")
    return f"sqlite:///{path}", path


def _rows(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("notes", "sessions", "dream_runs")]


def test_the_revision_list_ends_at_alembics_head(tmp_path: Path) -> None:
    """The file names the check reads give the head Alembic computes from the files."""
    app = build_app(Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", llm_provider="none"))
    head = ScriptDirectory.from_config(alembic_config(app.engine)).get_current_head()
    app.dispose()
    assert known_revisions()[-1] == head and len(set(known_revisions())) == len(known_revisions())


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_an_older_schema_is_one_line_saying_to_upgrade_and_writes_nothing(
        tmp_path: Path, args: list[str]) -> None:
    """Before, on a schema at 0005 `dream notes import` and `dream sessions add` wrote their
    rows, `dream run` created a run whose phases failed on a missing column (exit 12), and
    `dream notes export` said the SQLite file's directory must be writable (exit 5)."""
    url, path = _database_at(tmp_path, "0005")
    before = _rows(path)
    line = one_error_line(dream(url, *args, input=IMPORT), ConfigError.exit_code)
    assert "revision 0005, older than" in line and "run `dream db upgrade`" in line, line
    assert _rows(path) == before


def test_a_newer_schema_is_refused_and_a_missing_column_says_to_upgrade(tmp_path: Path) -> None:
    """A revision these migrations lack (a newer dream-worker migrated the file) is refused by
    name; a missing column met anyway (a query past the check) says to upgrade, not to make the
    SQLite file's directory writable."""
    url, path = _database_at(tmp_path, known_revisions()[-1])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    line = one_error_line(dream(url, "sessions", "add", "--agent", "a1"), ConfigError.exit_code)
    assert "revision 9999, which this dream-worker's migrations" in line, line
    assert _rows(path) == [0, 1, 0]
    with pytest.raises(OperationalError) as caught, create_engine(url).connect() as conn:
        conn.execute(text("SELECT no_such_column FROM notes"))
    found = database_error(caught.value)
    assert isinstance(found, ConfigError) and "run `dream db upgrade`" in str(found)


def test_upgrade_of_tables_without_a_revision_names_them_as_not_ours(tmp_path: Path) -> None:
    """Tables but no alembic_version (another application's file, or built without the
    migrations): `dream db upgrade` was exit 5, "its directory must exist and be writable"."""
    url, path = _database_at(tmp_path, "0005")
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE alembic_version")
    line = one_error_line(dream(url, "db", "upgrade"), ConfigError.exit_code)
    assert "table agents already exists" in line and "point DREAM_DATABASE_URL" in line, line


def test_a_refused_upgrade_adds_nothing_to_another_applications_file(tmp_path: Path) -> None:
    """Another application's SQLite file with a table of ours (``notes``): `dream db upgrade`
    was refused only when its migration reached that table, after creating every table before
    it (SQLite commits each CREATE): the other file kept alembic_version, agents, dream_runs
    and six more. Now it is refused before the first statement, the file as it was."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    line = one_error_line(dream(f"sqlite:///{path}", "db", "upgrade"), ConfigError.exit_code)
    assert "table notes already exists" in line and "point DREAM_DATABASE_URL" in line, line
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_another_applications_file_is_named_so_not_sent_to_upgrade(
        tmp_path: Path, args: list[str]) -> None:
    """A file with a table of ours (``notes``) and no alembic_version: every command said "no
    dream-worker schema; run `dream db upgrade`", which then refused the file as another
    application's: a loop. Each now says what the upgrade says, and the file is as it was."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    line = one_error_line(dream(f"sqlite:///{path}", *args, input=IMPORT),
                          ConfigError.exit_code)
    assert line == ("error: the database already holds a table the migrations create (table "
                    "notes already exists) but records no dream-worker revision: it is another "
                    "application's or was built without the migrations; point "
                    "DREAM_DATABASE_URL at a new database"), line
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]


def test_a_file_with_only_tables_of_its_own_is_sent_to_upgrade(tmp_path: Path) -> None:
    """Tables none of which the migrations create: `dream db upgrade` adds the schema beside
    them, so that is still what a command says to run."""
    path = tmp_path / "shared.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE bookmarks (url TEXT)")
    line = one_error_line(dream(f"sqlite:///{path}", "runs", "list"), ConfigError.exit_code)
    assert "no dream-worker schema" in line and "run `dream db upgrade`" in line, line
    assert dream(f"sqlite:///{path}", "db", "upgrade").exit_code == 0
    assert dream(f"sqlite:///{path}", "runs", "list").exit_code == 0


@pytest.mark.postgres
def test_another_applications_tables_on_postgresql_are_named_so() -> None:
    """The same on PostgreSQL, whose missing alembic_version aborts the transaction: it is
    rolled back before the tables are looked at."""
    import uuid

    from tests.support.services import postgres_url
    from worker.store.db import make_engine
    from worker.store.schema import require_current_schema

    schema = "t_" + uuid.uuid4().hex[:12]
    admin = make_engine(postgres_url())
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
        conn.execute(text(f"CREATE TABLE {schema}.notes (body TEXT)"))
    base = postgres_url()
    engine = make_engine(f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}")
    try:
        with pytest.raises(ConfigError, match="table notes already exists"):
            require_current_schema(engine)
    finally:
        engine.dispose()
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()

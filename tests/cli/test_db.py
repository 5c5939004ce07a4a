"""`dream db upgrade|check` through a real process at the default log level: one line of their
own on stdout, stderr clean unless --verbose (SQLite and PostgreSQL); a database they cannot
migrate is one line."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from tests.cli.test_commands import dream, one_error_line
from worker.app import App
from worker.errors import ConfigError
from worker.store.migrate import alembic_config
from worker.store.schema import known_revisions

ROOT = Path(__file__).resolve().parents[2]


def _dream(url: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """`dream ARGS` as a user runs it: no DREAM_ setting but the database (INFO logs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAM_")}
    return subprocess.run([sys.executable, "-m", "worker.cli", *args], cwd=ROOT, text=True,
                          env={**env, "DREAM_DATABASE_URL": url, **extra}, capture_output=True,
                          timeout=120, check=False)


def test_upgrade_and_check_of_a_current_schema_print_one_line_and_nothing_on_stderr(
        app: App) -> None:
    """Before, `dream db upgrade` wrote Alembic's INFO lines on stderr ("Context impl
    PostgresqlImpl.", "Will assume transactional DDL.") and `dream db check` two lines on
    stdout and eight on stderr."""
    url = app.settings.database_url
    head = ScriptDirectory.from_config(alembic_config(app.engine)).get_current_head()
    shown = app.engine.url.render_as_string(hide_password=True)
    upgraded = _dream(url, "db", "upgrade")
    assert (upgraded.returncode, upgraded.stderr) == (0, ""), upgraded.stderr
    assert upgraded.stdout == f"database already at the latest revision {head}: {shown}\n"
    checked = _dream(url, "db", "check")
    assert (checked.returncode, checked.stdout, checked.stderr) == (
        0, "models match migrations\n", "")


def test_a_new_database_says_what_it_was_upgraded_from_and_verbose_shows_each_step(
        tmp_path: Path) -> None:
    """A new SQLite file: one line naming both revisions, stderr clean (before: 14 lines of
    "Running upgrade ..."); `--verbose` shows Alembic's steps."""
    quiet = _dream(f"sqlite:///{tmp_path / 'quiet.db'}", "db", "upgrade")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert quiet.stdout.startswith("database upgraded from an empty schema to ")
    assert len(quiet.stdout.splitlines()) == 1
    verbose = _dream(f"sqlite:///{tmp_path / 'verbose.db'}", "db", "upgrade", "--verbose")
    assert verbose.returncode == 0 and verbose.stdout.startswith("database upgraded from")
    assert "Running upgrade  -> 0001" in verbose.stderr, verbose.stderr


def _dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_a_database_at_a_revision_these_migrations_lack_is_one_line(tmp_path: Path) -> None:
    """A database a newer dream-worker (or another application's Alembic) migrated: upgrade and
    check were an Alembic CommandError traceback; one configuration line now, nothing changed."""
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    assert _dream(url, "db", "upgrade").returncode == 0
    with sqlite3.connect(tmp_path / "newer.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    before = _dump(tmp_path / "newer.db")
    # `db check`, like every command but `db upgrade`, meets the revision check first
    # (worker.store.schema); `db upgrade` hears it from Alembic.
    for command, line in (
            ("upgrade", "error: the database is at a revision these migrations do not have "
                        "(Can't locate revision identified by '0099'): another (newer?) "
                        "dream-worker or another application migrated it; use that version, or "
                        "point DREAM_DATABASE_URL at another database"),
            ("check", "error: the database is at revision 0099, which this dream-worker's "
                      f"migrations (up to {known_revisions()[-1]}) do not have: a newer dream-worker migrated it; "
                      "use that version, or point DREAM_DATABASE_URL at another database")):
        done = _dream(url, "db", command)
        assert (done.returncode, done.stdout) == (ConfigError.exit_code, ""), done.stderr
        assert done.stderr.splitlines() == [line]
    assert _dump(tmp_path / "newer.db") == before


HALF_DONE = '''"""test only: a migration that creates, copies and writes, then {ending}"""
import sqlalchemy as sa
from alembic import op

revision = "{revision}"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("half_done", sa.Column("id", sa.Integer, primary_key=True))
    with op.batch_alter_table("notes") as batch_op:  # SQLite: a copy of the table, renamed
        batch_op.add_column(sa.Column("half_column", sa.Integer))
    op.execute("INSERT INTO half_done (id) VALUES (1)")
    {last}


def downgrade() -> None:
    pass
'''


def _with_extra_migration(tmp_path: Path, fails: bool) -> str:
    """A copy of the migrations with one more, which fails after its first statements or not;
    the DREAM_RESOURCES_DIR that makes `dream` use it."""
    resources = tmp_path / "resources"
    if not resources.exists():
        shutil.copytree(ROOT / "migrations", resources / "migrations",
                        ignore=shutil.ignore_patterns("__pycache__"))
    head = known_revisions()[-1]
    last = 'op.execute("SELECT * FROM no_such_table")' if fails else "pass"
    text = HALF_DONE.format(ending="fails" if fails else "ends", revision="9999", head=head,
                            last=last)
    (resources / "migrations" / "versions" / "9999_half_done.py").write_text(text)
    return str(resources)


@pytest.mark.parametrize("start", ["empty", "head"])
def test_a_migration_that_fails_half_way_changes_nothing_on_sqlite(
        tmp_path: Path, start: str) -> None:
    """A migration that fails after creating a table, copying `notes` (batch mode) and writing
    a row: on SQLite each statement committed on its own, so the file was left half migrated
    (the table made, the revision not recorded) and the next upgrade failed on "table half_done
    already exists". Now the whole upgrade is one transaction: the file is as it was, and the
    upgrade succeeds once the migration is fixed."""
    path = tmp_path / "dream.db"
    url = f"sqlite:///{path}"
    head = known_revisions()[-1]
    if start == "head":
        assert _dream(url, "db", "upgrade").returncode == 0
    else:
        sqlite3.connect(path).close()
    before = _dump(path)
    quiet = {"PYTHONDONTWRITEBYTECODE": "1"}
    broken = _dream(url, "db", "upgrade",
                    DREAM_RESOURCES_DIR=_with_extra_migration(tmp_path, fails=True), **quiet)
    # One line (before: "the database has no dream-worker schema ...; run `dream db upgrade`").
    assert (broken.returncode, broken.stdout) == (ConfigError.exit_code, ""), broken.stderr
    assert broken.stderr.splitlines() == [
        "error: a migration failed (no such table: no_such_table) and the upgrade was rolled "
        f"back: the database is unchanged, at {'an empty schema' if start == 'empty' else head}; "
        "see which with `dream db upgrade --verbose`, and report it with that output"]
    assert _dump(path) == before
    fixed = _dream(url, "db", "upgrade",
                   DREAM_RESOURCES_DIR=_with_extra_migration(tmp_path, fails=False), **quiet)
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.startswith("database upgraded from ") and " to 9999: " in fixed.stdout


def _schema(app: App) -> dict[str, object]:
    """Every table with its columns and indexes, and the recorded revision."""
    from sqlalchemy import inspect

    with app.engine.connect() as conn:
        seen = inspect(conn)
        tables = {t: ([c["name"] for c in seen.get_columns(t)],
                      sorted(str(i["name"]) for i in seen.get_indexes(t)))
                  for t in sorted(seen.get_table_names())}
        version = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    return {"tables": tables, "version": version}


def test_a_failed_upgrade_leaves_either_backend_as_it_was(app: App, tmp_path: Path) -> None:
    """The same half-way failure from head on SQLite and PostgreSQL (whose DDL was transactional
    already, and stays so): tables, columns, indexes and revision unchanged; fixed, it upgrades."""
    url = app.settings.database_url
    before = _schema(app)
    quiet = {"PYTHONDONTWRITEBYTECODE": "1"}
    broken = _dream(url, "db", "upgrade",
                    DREAM_RESOURCES_DIR=_with_extra_migration(tmp_path, fails=True), **quiet)
    assert broken.returncode == ConfigError.exit_code, broken.stderr
    assert "the upgrade was rolled back" in broken.stderr
    assert _schema(app) == before
    fixed = _dream(url, "db", "upgrade",
                   DREAM_RESOURCES_DIR=_with_extra_migration(tmp_path, fails=False), **quiet)
    assert fixed.returncode == 0, fixed.stderr
    after = _schema(app)
    assert after["version"] == "9999" and "half_done" in after["tables"]  # type: ignore[operator]


def test_db_upgrade_of_an_in_memory_database_is_refused() -> None:
    """`dream db upgrade` on sqlite:///:memory: reported success and kept nothing; now it is
    one line at start-up, exit 8, as every other command."""
    for args in (["db", "upgrade"], ["runs", "list"]):
        line = one_error_line(dream("sqlite:///:memory:", *args), ConfigError.exit_code)
        assert "an in-memory SQLite database lasts one command" in line, line

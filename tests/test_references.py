"""The SQL reference checker (worker.references) reads its configured host tables once, for no
row, when a run's prune starts: a table or column the database lacks is a ConfigError naming
the setting (SQLite and PostgreSQL), never the driver's error in the middle of the phase."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.support.factories import NOW, add_notes
from worker.app import App
from worker.config import ConfigError
from worker.domain.types import Scope
from worker.references import SqlReferenceChecker
from worker.reporting import run_tree
from worker.runs import service

SCOPE = Scope("agent-1", "user-1")


@pytest.fixture
def host_users(app: App) -> App:
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE host_users (uid VARCHAR(64), state VARCHAR(16))"))
        conn.execute(text("INSERT INTO host_users VALUES ('user-1', 'active')"))
    app.settings.prune.checker = "sql"
    return app


@pytest.mark.parametrize("spec", ["no_such_table.uid.state", "host_users.uid.no_such_column",
                                  "host_users.uid.state.no_reason_column"])
def test_a_missing_table_or_column_names_the_setting(host_users: App, spec: str) -> None:
    """Whichever part is missing, the error names DREAM_PRUNE__SQL_USERS and what is missing."""
    host_users.settings.prune.sql_users = spec
    missing = next(p for p in spec.split(".") if p.startswith("no_"))
    with pytest.raises(ConfigError, match="DREAM_PRUNE__SQL_USERS names a table or column") as err:
        SqlReferenceChecker.from_settings(host_users)
    assert missing in str(err.value) and "fix the setting" in str(err.value)


def test_tables_that_exist_pass(host_users: App) -> None:
    """The configured table and columns are there: the checker reads them as before."""
    host_users.settings.prune.sql_users = "host_users.uid.state"
    checker = SqlReferenceChecker.from_settings(host_users)
    assert checker.records("user", ["user-1"])["user-1"].status == "active"  # type: ignore[union-attr]


def test_prune_fails_with_the_setting_named(host_users: App) -> None:
    """Through a run: the prune step fails with the one line that names the setting (it read
    "OperationalError: (sqlite3.OperationalError) no such table: ..." on SQLite), whole."""
    host_users.settings.prune.sql_users = "host_user.uid.state"  # a typo of the table's name
    add_notes(host_users, {"id": "n1", "agent_id": "agent-1", "user_id": "user-1",
                           "content": "Prefers the table by the window and no such column"})
    run_id = service.create_run(host_users, SCOPE, force=True, clock=NOW, phases=["prune"])
    assert run_id
    service.execute_run(host_users, run_id)
    prune = next(s for s in run_tree(host_users, run_id)["steps"] if s["phase"] == "prune")
    assert prune["status"] == "failed"
    assert prune["error"].startswith("ConfigError: DREAM_PRUNE__SQL_USERS names a table or "
                                     "column the database lacks (")
    assert "host_user" in prune["error"] and prune["error"].endswith("fix the setting")

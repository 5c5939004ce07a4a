"""R28 on SQLite: erased text leaves the database files, not only the rows.

Deleted rows linger in free pages unless ``secure_delete`` is on, and in the write-ahead log
until a checkpoint copies it back and truncates it; another process holding the file open is the
case the adversarial pass found (issue 12 item 7).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import event, text

from tests.support.factories import add_notes
from worker.app import App
from worker.cli import main
from worker.safety.erase import erase
from worker.store.db import make_engine

CANARY = "CANARY-fe3a91-secret"


def _files(app: App) -> list[Path]:
    db = Path(app.settings.database_url.split("///", 1)[1])
    return [p for p in (db, Path(f"{db}-wal")) if p.exists()]


def _copies(app: App) -> int:
    return sum(p.read_bytes().count(CANARY.encode()) for p in _files(app))


def _seed(app: App) -> None:
    add_notes(app, *({"id": f"c{k}", "user_id": "u1", "content": f"{CANARY} note {k}"}
                     for k in range(30)),
              {"id": "keep", "user_id": "u2", "content": "Other user likes coffee"})


def test_r28_every_sqlite_connection_has_secure_delete_on(tmp_path: Path) -> None:
    """The pragma is set per connection (it is not stored in the file), whatever the build's
    default: a listener that runs first switches it off, as an SQLite built without
    SQLITE_SECURE_DELETE would have it, and the engine's own hook still turns it on."""
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    event.listen(engine, "connect",
                 lambda conn, _record: conn.execute("PRAGMA secure_delete=OFF"), insert=True)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA secure_delete")).scalar() == 1
    engine.dispose()


def test_r28_canary_bytes_leave_the_files_with_a_second_connection_open(
        sqlite_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process's connection is open (as a host's would be): after `dream erase` the
    canary is in neither the main file nor the WAL."""
    _seed(sqlite_app)
    assert _copies(sqlite_app) > 0
    db = Path(sqlite_app.settings.database_url.split("///", 1)[1])
    other = sqlite3.connect(db)
    try:
        assert other.execute("SELECT count(*) FROM notes").fetchone()[0] == 31
        monkeypatch.setenv("DREAM_DATABASE_URL", sqlite_app.settings.database_url)
        out = CliRunner().invoke(main, ["erase", "--user", "u1", "--yes"])
        assert out.exit_code == 0, out.output
        assert "warning" not in out.output
        assert _copies(sqlite_app) == 0
        assert other.execute("SELECT count(*) FROM notes").fetchone()[0] == 1
    finally:
        other.close()


def test_r28_blocked_checkpoint_is_reported_then_completed(
        sqlite_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader inside an open transaction keeps old pages in the WAL: `dream erase` says so in
    one warning line (instead of claiming the text is gone); once the reader closes, the same
    erase again checkpoints and the text is gone from the files."""
    _seed(sqlite_app)
    db = Path(sqlite_app.settings.database_url.split("///", 1)[1])
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM notes").fetchone()
    try:
        monkeypatch.setenv("DREAM_DATABASE_URL", sqlite_app.settings.database_url)
        out = CliRunner().invoke(main, ["erase", "--user", "u1", "--yes"])
        assert out.exit_code == 0, out.output
        warnings = [line for line in out.output.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1 and "checkpoint blocked" in warnings[0]
    finally:
        reader.execute("COMMIT")
        reader.close()
    assert erase(sqlite_app, user_id="u1").checkpoint == "done"
    assert _copies(sqlite_app) == 0

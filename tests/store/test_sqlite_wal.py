"""SQLite's write-ahead log is folded into the main file every WAL_CHECKPOINT_PAGES pages, not
SQLite's default 1,000: a run's phases rewrite the same pages, and a checkpoint writes each once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from worker.store.db import SQLITE_BUSY_SECONDS, WAL_CHECKPOINT_PAGES, Waits, make_engine


def test_every_sqlite_connection_checkpoints_at_the_longer_interval(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as first, engine.connect() as second:
        for conn in (first, second):  # a per-connection setting, not stored in the file
            assert conn.execute(text("PRAGMA wal_autocheckpoint")).scalar() == WAL_CHECKPOINT_PAGES
    engine.dispose()
    assert WAL_CHECKPOINT_PAGES > 1000


def test_commits_past_the_default_interval_leave_the_log_growing(tmp_path: Path) -> None:
    """1,500 one-page commits: with the default the log would have been reset and reused (at
    most ~1,000 frames long); here it holds every one of them until the interval."""
    path = tmp_path / "x.db"
    engine = make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)"))
    for k in range(1500):
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t (k, v) VALUES (:k, zeroblob(3000))"), {"k": k})
    wal = path.with_name(path.name + "-wal").stat().st_size
    page = 4096 + 24  # a frame: the page and its header
    assert wal > 1400 * page
    with engine.connect() as conn:
        busy, frames, moved = conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)")).one()
    assert busy == 0 and moved == frames
    assert path.with_name(path.name + "-wal").stat().st_size == 0
    engine.dispose()


def test_a_second_engine_on_an_open_store_keeps_the_process_locks(tmp_path: Path) -> None:
    """Building an engine checks the file is an SQLite database. It used to read the header
    with a descriptor of its own, and closing that descriptor dropped every POSIX lock the
    process held on the file, its open SQLite connections' included: another process closing
    the store then saw no other user, removed its write-ahead log and index, and this
    process's open connection read 'database disk image is malformed' (a host building a
    second App beside its first, a test beside a `dream` child process)."""
    path = tmp_path / "x.db"
    first = make_engine(f"sqlite:///{path}")
    with first.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.execute(text("INSERT INTO t (x) VALUES (1)"))
    held = first.connect()
    held.execute(text("SELECT x FROM t")).all()  # a pooled connection, as a server keeps one
    second = make_engine(f"sqlite:///{path}")  # the check runs on an existing file
    other = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
             "c.execute('SELECT x FROM t').fetchall(); c.close()")
    subprocess.run([sys.executable, "-c", other, str(path)], check=True, timeout=60)
    assert path.with_name(path.name + "-wal").exists()  # still in use here: not removed
    with first.begin() as conn:
        conn.execute(text("INSERT INTO t (x) VALUES (2)"))
    assert held.execute(text("SELECT count(*) FROM t")).scalar() == 2
    held.close()
    first.dispose()
    second.dispose()


def test_a_writer_waits_the_busy_timeout_and_postgres_bounds_leave_sqlite_alone(
        tmp_path: Path) -> None:
    """SQLite's own bound on a lock wait (30 s for the write lock, reported as busy); the
    PostgreSQL settings change nothing of it and run no SET on an SQLite connection."""
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}",
                         waits=Waits(lock_timeout=1.0, statement_timeout=1.0))
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA busy_timeout")).scalar_one() == SQLITE_BUSY_SECONDS * 1000
    engine.dispose()

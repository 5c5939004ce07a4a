"""`dream demo --database FILE` deletes FILE and builds the demo afresh: only a missing or
empty file or an earlier demo store may be replaced (worker.demo.refuse_unless_demo_store)."""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

from tests.cli.test_commands import dream, one_error_line
from tests.conftest import make_sqlite_app
from tests.support.factories import add_notes
from worker.errors import InvalidInput

UNUSED = "sqlite:////nonexistent-dir/never-used.db"


def test_demo_refuses_to_replace_a_users_store_or_any_other_file(tmp_path: Path) -> None:
    """Before, `dream demo --database` unlinked whatever was there: a store of the user's own
    (its notes gone, the demo's in their place) or a file that was no database at all."""
    app = make_sqlite_app(tmp_path)
    add_notes(app, {"id": "n1", "agent_id": "support-bot", "content": "Prefers tea."})
    app.dispose()
    store = tmp_path / "dream.db"
    other = tmp_path / "notes.jsonl"
    other.write_text('{"agent_id": "a", "content": "x"}\n')
    for path in (store, other):
        before = path.read_bytes()
        line = one_error_line(dream(UNUSED, "demo", "--database", str(path)),
                              InvalidInput.exit_code)
        assert "already exists and is not a demo store" in line, line
        assert path.read_bytes() == before
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT id FROM notes").fetchall() == [("n1",)]


def test_demo_rebuilds_its_own_store_and_fills_an_empty_file(tmp_path: Path) -> None:
    demo = tmp_path / "demo.db"
    empty = tmp_path / "empty.db"
    empty.touch()
    for path in (demo, demo, empty):
        assert dream(UNUSED, "demo", "--database", str(path)).exit_code == 0
    with sqlite3.connect(demo) as conn:
        assert conn.execute("SELECT count(*) FROM dream_runs").fetchone() == (2,)


def test_demo_refuses_a_path_that_is_no_regular_file(tmp_path: Path) -> None:
    """An empty device or a pipe reads as an empty file: `dream demo --database /dev/null`
    unlinked the device node (as root) and left a regular file in its place. A path, or its
    `-wal`/`-shm` beside it, that is a pipe or a directory is now refused, left as it was."""
    import os
    import stat

    pipe = tmp_path / "pipe.db"
    os.mkfifo(pipe)
    beside = tmp_path / "store.db"
    (tmp_path / "store.db-wal").mkdir()
    for path, what in ((pipe, pipe), (tmp_path, tmp_path), (beside, tmp_path / "store.db-wal")):
        line = one_error_line(dream(UNUSED, "demo", "--database", str(path)),
                              InvalidInput.exit_code)
        assert f"{what} is not a regular file" in line, line
    assert stat.S_ISFIFO(pipe.stat().st_mode) and (tmp_path / "store.db-wal").is_dir()
    assert not beside.exists()


def test_demo_next_lines_work_from_any_directory(tmp_path: Path, monkeypatch: Any) -> None:
    """A new user's report: after `dream demo --database X` the "Next" line to see it judged
    by a scripted model named `examples/fake-llm-demo.json` relative (only valid in a
    checkout's root) and left out `--database`, so it rebuilt another store. Now every path is
    absolute, the script's is a file, and the demo command repeats the --database given."""
    monkeypatch.chdir(tmp_path)
    shown = dream(UNUSED, "demo", "--database", "mine.db")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.split("Next:\n", 1)[1].splitlines()
    store = tmp_path / "mine.db"
    assert all(f"DREAM_DATABASE_URL=sqlite:///{store} " in ln for ln in lines[:2])
    (script,) = re.findall(r"DREAM_FAKE_LLM_SCRIPT=(\S+) ", lines[2])
    assert Path(script).is_absolute() and Path(script).is_file()
    assert f"demo --database {store} " in lines[2]


def test_demo_next_lines_name_the_dream_script_absolutely(tmp_path: Path, monkeypatch: Any) -> None:
    """A new user's report: `make run` calls the demo as `.venv/bin/dream`, and with `dream`
    not on PATH the "Next" lines repeated that relative path, valid only in the checkout."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-such-bin"))
    monkeypatch.setattr(sys, "argv", [".venv/bin/dream", "demo"])
    shown = dream(UNUSED, "demo", "--database", "mine.db")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.split("Next:\n", 1)[1].splitlines()
    called = [ln.split()[1] for ln in lines[:2]]
    assert called == [str(tmp_path / ".venv/bin/dream")] * 2, lines

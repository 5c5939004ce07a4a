"""What `dream` writes does not depend on the locale's encoding: stdout is UTF-8 (a JSONL
export is a UTF-8 file, whatever the terminal), stderr escapes what it cannot show."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_sqlite_app
from tests.support.factories import add_notes

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_an_export_under_a_non_utf8_locale_is_the_utf8_file_import_reads(
        tmp_path: Path, encoding: str) -> None:
    """Under PYTHONIOENCODING=ascii (or a Latin-1 locale) `dream notes export` stopped at the
    first note with another character: a UnicodeEncodeError traceback (exit 1) after a partial
    file, and under Latin-1 the notes it did write were not UTF-8 for `dream notes import`."""
    app = make_sqlite_app(tmp_path)
    add_notes(app, {"id": "n1", "agent_id": "a1", "content": "Mag Käse — und 寿司."},
              {"id": "n2", "agent_id": "a1", "content": "Plain ASCII."})
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DREAM_")},
           "DREAM_DATABASE_URL": app.settings.database_url, "PYTHONIOENCODING": encoding,
           "PYTHONPATH": str(ROOT)}
    app.dispose()
    done = subprocess.run([sys.executable, "-m", "worker.cli", "notes", "export"],
                          capture_output=True, env=env, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode(errors="replace")
    contents = {json.loads(line)["content"] for line in done.stdout.decode("utf-8").splitlines()}
    assert contents == {"Mag Käse — und 寿司.", "Plain ASCII."}

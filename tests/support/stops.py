"""A real `dream` process stopped by a signal it sends itself at a chosen point: as it sends
its first SQL statement starting with a given text (``sql:UPDATE review_items``), or as it
reaches a crash point armed the way tests/runs/test_stopped.py arms one in process
(``point:run.after_create``, worker.safety.crashpoints). The signal arrives where the test
says, not after a sleep."""

from __future__ import annotations

import os
import subprocess
import sys

from worker.app import App

# argv: the point, the signal's name, then the `dream` arguments.
_CHILD = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine
from worker.cli import main
from worker.safety import crashpoints

kind, _, where = sys.argv[1].partition(":")
sent = []

def send():
    if not sent:
        sent.append(True)
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))

def on_statement(_conn, _cursor, statement, *_):
    if " ".join(statement.split()).startswith(where):
        send()

if kind == "sql":
    event.listen(Engine, "before_cursor_execute", on_statement)
else:
    crashpoints.arm(where, send)
main(sys.argv[3:], prog_name="dream")
"""


def dream_stopped(app: App, at: str, sig: str, *args: str,
                  **env: str) -> subprocess.CompletedProcess[str]:
    """`dream ARGS` on ``app``'s database in a child process sending itself ``sig``
    ("SIGTERM", "SIGINT") at ``at`` (``sql:<statement start>`` or ``point:<crash point>``); no
    broker, no model, logs at ERROR unless ``env`` says otherwise."""
    environ = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
               "DREAM_LLM_PROVIDER": "none", "DREAM_LOG_LEVEL": "ERROR", **env}
    environ.pop("DREAM_BROKER_URL", None)
    try:
        return subprocess.run([sys.executable, "-c", _CHILD, at, sig, *args], env=environ,
                              capture_output=True, text=True, timeout=120)
    finally:
        # The test's own pooled connections go: on SQLite the child, closing the database
        # last as far as it can tell, may remove its -shm file, which a connection still
        # open here keeps mapping (it then reads stale pages: "database disk image is
        # malformed" or rows from before the child's writes).
        app.engine.dispose()

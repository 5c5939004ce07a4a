"""The `dream` command line: thin shells that translate arguments into service calls.

``worker.cli.group.main`` is the click group (with the one-line error translation of
``worker.cli.errors``); every command module below exposes ``register(group)`` and is listed in
``COMMAND_MODULES``, in order (``host`` adds ``notes add`` to the group ``data`` registers).

To add a command group, e.g. ``dream review``:

1. write ``worker/cli/review.py`` with a ``register(main: click.Group) -> None`` that calls
   ``main.add_command(...)``; take the App from ``worker.cli.common.cli_app(ctx)``, raise
   ``worker.errors`` classes (or ``worker.cli.errors.UserError`` for a bad command line),
   decorate each command with ``worker.cli.errors.user_errors``, and say what a stop (Ctrl-C,
   SIGTERM) of it leaves with ``worker.cli.errors.stop_says`` (its one line, exit 13);
2. import it here and append it to ``COMMAND_MODULES``.

Command modules import only ``worker.cli.common`` and ``worker.cli.errors`` from this package
(the servers also ``worker.cli.serve``), never each other.
"""

from __future__ import annotations

from worker.cli import api, data, db, examples, host, mcp, review, runs, safety
from worker.cli.group import main

COMMAND_MODULES = (db, data, runs, host, safety, api, examples, mcp, review)

for _module in COMMAND_MODULES:
    _module.register(main)

__all__ = ["COMMAND_MODULES", "main"]

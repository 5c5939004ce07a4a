"""`dream examples import`: load examples (input/output pairs) the archive phase maintains."""

from __future__ import annotations

import click


def register(main: click.Group) -> None:
    from worker.cli_common import cli_app, read_lines, user_errors

    @main.group()
    def examples() -> None:
        """Import examples."""

    @examples.command("import")
    @click.argument("file")
    @click.pass_context
    @user_errors
    def examples_import(ctx: click.Context, file: str) -> None:
        """Import examples from a JSONL FILE (- for stdin); all-or-nothing and idempotent by id."""
        from worker.ingest.examples import import_examples

        result = import_examples(cli_app(ctx), read_lines(file))
        click.echo(f"read {result.read} examples: {result.inserted} added, "
                   f"{result.duplicates} already present")

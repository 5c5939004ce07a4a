"""`dream examples import`: load examples (input/output pairs) the archive phase maintains."""

from __future__ import annotations

import click

from worker.cli.common import cli_app, echo_imported, export_records, read_lines
from worker.cli.errors import stop_says, user_errors


def register(main: click.Group) -> None:
    main.add_command(examples)


@click.group()
def examples() -> None:
    """Import and export examples."""


@examples.command("import")
@stop_says("the import is one transaction, stored whole or not at all; run it again (examples "
           "already stored are skipped)")
@click.argument("file")
@click.pass_context
@user_errors
def examples_import(ctx: click.Context, file: str) -> None:
    """Import examples from a JSONL FILE (- for stdin); all-or-nothing and idempotent by id."""
    from worker.ingest.examples import import_examples

    result = import_examples(cli_app(ctx), read_lines(file))
    echo_imported(result, "examples")


@examples.command("export")
@stop_says("the output holds only the examples written before the stop; export again")
@click.pass_context
@user_errors
def examples_export(ctx: click.Context) -> None:
    """Write every example as JSONL to stdout, in the form `dream examples import` reads."""
    export_records(ctx, "examples")

"""`dream api`: serve the host API and dashboard with uvicorn."""

from __future__ import annotations

import click

from worker.cli.common import cli_app
from worker.cli.errors import stop_says, user_errors
from worker.cli.serve import SERVER_STOP, finish_started_runs, serve
from worker.errors import ConfigError


@click.command("api")
@stop_says(SERVER_STOP)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on.")
@click.pass_context
@user_errors
def api_cmd(ctx: click.Context, host: str, port: int) -> None:
    """Serve the HTTP API (tokens from DREAM_API_TOKENS; /healthz needs none)."""
    from worker.api import create_api
    from worker.api.auth import parse_tokens

    app = cli_app(ctx, serving=True)
    # Checked here, before listening: unset, `{}` or a malformed value would refuse every
    # request (or fail only when the app is built, after the port was bound).
    if not parse_tokens(app.settings.api_tokens):
        state = "is not set" if not app.settings.api_tokens else "holds no token"
        raise ConfigError(f"DREAM_API_TOKENS {state}; every request would be refused. Set it to "
                          '{"<token>": {"role": "admin"}} (tokens ≥ 16 characters)')
    serve(lambda: create_api(app), host, port, app.settings.api_shutdown_seconds)
    finish_started_runs(app)


def register(main: click.Group) -> None:
    main.add_command(api_cmd)

"""`dream mcp`: serve the memory tools to MCP clients (stdio for one scope, or streamable HTTP)."""

from __future__ import annotations

import sys
from functools import partial

import click

from worker.cli.common import IDENT, USER_IDENT, cli_app, standard_stream
from worker.cli.errors import UserError, stop_says, user_errors
from worker.cli.serve import SERVER_STOP, end_now, finish_started_runs, serve
from worker.domain.types import Scope
from worker.errors import ConfigError


@click.command("mcp")
@stop_says(SERVER_STOP)
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio",
              show_default=True, help="stdio: one client, one scope; http: streamable HTTP at /mcp.")
@click.option("--agent", default=None, type=IDENT,
              help="stdio: the scope every tool acts on (agent id).")
@click.option("--user", default=None, type=USER_IDENT, help="stdio: scope user id.")
@click.option("--company", default=None, type=IDENT, help="stdio: scope company id.")
@click.option("--host", default="127.0.0.1", show_default=True, help="http only.")
@click.option("--port", default=8090, show_default=True, type=click.IntRange(0, 65535),
              help="http only.")
@click.pass_context
@user_errors
def mcp_cmd(ctx: click.Context, transport: str, agent: str | None, user: str | None,
            company: str | None, host: str, port: int) -> None:
    """Serve the memory tools: remember, list_candidates, fuse, keep_apart, start_dream,
    dream_status, undo_run, review_list, review_show, review_approve and review_decline.

    Over stdio the tools act on --agent/--user/--company; over HTTP on the scope of each
    request's bearer token (a scoped token of DREAM_API_TOKENS)."""
    try:
        from worker.mcp import server
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("mcp"):
            raise
        raise ConfigError("`dream mcp` needs the MCP SDK: pip install 'dream-worker[mcp]'") from None
    if (user or company) and not agent:
        raise UserError("--user and --company need --agent")
    if transport == "stdio" and not agent:
        raise UserError("--transport stdio needs --agent (with optional --user/--company): "
                        "the one scope this server's tools act on")
    if transport == "http" and agent:
        raise UserError("--agent binds stdio only; over HTTP each request's bearer token names "
                        "its scope")
    if transport == "stdio":
        _stdio_open()
    app = cli_app(ctx, serving=True)
    if agent:
        # A stop signal during the drain (a second one) ends the process now.
        server.stdio_server(app, Scope(agent, user, company),
                            at_once=partial(end_now, app)).run("stdio")
        finish_started_runs(app)  # the client left (stdin closed); its dream ends first
        return
    from worker.api.auth import parse_tokens

    if not any(p.scope is not None for _, p in parse_tokens(app.settings.api_tokens)):
        raise ConfigError('DREAM_API_TOKENS has no scoped token; add {"<token>": {"agent_id": '
                        '"..."}} (tokens ≥ 16 characters; admin tokens are not accepted here)')
    serve(lambda: server.http_app(app, host, port), host, port,
          app.settings.api_shutdown_seconds)
    finish_started_runs(app)


def _stdio_open() -> None:
    """The client's pipes are there: Python finds no standard stream at start-up when its
    descriptor was closed (the next file opened would take its number)."""
    for stream, name in ((sys.stdin, "standard input"), (sys.stdout, "standard output")):
        standard_stream(stream, f"--transport stdio speaks over {name}",
                        "start `dream mcp` from an MCP client (it pipes both), or use "
                        "--transport http")


def register(main: click.Group) -> None:
    main.add_command(mcp_cmd)

"""`dream mcp`: the tools of worker.mcp.tools on the official MCP SDK, over stdio or streamable HTTP.

Over stdio the server is bound to the scope it was started with; over HTTP every request is
bound to the scope of its bearer token (the tokens of DREAM_API_TOKENS; admin tokens are refused:
an MCP client acts for one tenant).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp

from worker.api.auth import Principal, authenticate, bearer, parse_tokens
from worker.api.guards import BodyLimit
from worker.api.handlers import caller_detail, database_detail, validation_detail
from worker.app import App
from worker.domain.types import Scope
from worker.errors import DreamError
from worker.mcp.http_errors import AdminTokenRefusal, LoneSurrogates, OneLineErrors
from worker.mcp.tools import ScopedTools
from worker.safety.scrub import stack
from worker.store.errors import database_error
from worker.store.health import database_state, health_body

log = structlog.get_logger(__name__)

INSTRUCTIONS = (
    "Long-term memory of one agent scope, maintained by dream-worker. `remember` stores a note "
    "with write-time dedup; `list_candidates` shows similar notes your model may fuse with "
    "`fuse` or mark with `keep_apart`; `start_dream` runs the maintenance dream, `dream_status` "
    "follows it, `undo_run` reverts a whole run; `review_list`, `review_show`, `review_approve` and "
    "`review_decline` decide what a dream proposed instead of applying. Ids from another scope "
    "are not found."
)

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)
# Adds or records without retiring anything the caller did not name.
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                           open_world_hint=False)
# Retires notes (revoked, never deleted, undoable) or reverts a run.
# Answers a question, but may write a derived cache on the way: list_candidates embeds the
# scope's notes that have no vector yet (stored, so the next call and the dream reuse them).
# Not read-only to a client that trusts the hint, yet changes no note and is safe to repeat.
CACHING = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                          open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                              open_world_hint=False)

ScopeOf = Callable[[Context], Scope]


class DreamTokenVerifier:
    """The SDK's bearer check against DREAM_API_TOKENS: only scoped tokens get in."""

    def __init__(self, tokens: list[tuple[bytes, Principal]]) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = authenticate(self.tokens, token)
        if principal is None or principal.scope is None:
            if principal is not None:
                log.warning("mcp.admin_token_refused")
            return None
        return AccessToken(token=token, client_id=principal.label, scopes=[])


class DreamServer(MCPServer):
    """Arguments the tool's schema refuses answer ``invalid: <field>: <rule>``, one line, as the
    API's 422: the SDK's own answer is pydantic's multi-line dump, which quotes the value sent
    (note text too) and carries no code. Types are strict, as the API's bodies: ``"7"`` for an
    item id or ``"yes"`` for a flag is refused, never converted."""

    # The longest stdio line read (DREAM_API_MAX_BODY_BYTES: a message is a request body).
    max_line_bytes = 1_048_576
    # Over stdio, what a stop signal during the drain does (the signal's name): end the process
    # now, its runs given back (`dream mcp` sets it); None: the serving is cancelled.
    at_once: Callable[[str], None] | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context | None = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is None:  # the SDK's "Unknown tool: x" says not what there is
            raise ToolError(f"Error executing tool {name[:64]}: not_found: no tool {name[:64]!r}; "
                            "tools/list names this server's "
                            f"tools ({', '.join(t.name for t in self._tool_manager.list_tools())})")
        try:  # strict types first: the SDK reads "7" as 7 and "yes" as true
            _known_arguments(name, tool.fn_metadata.arg_model.model_fields, arguments)
            tool.fn_metadata.arg_model.model_validate(arguments, strict=True)
            return await super().call_tool(name, arguments, context)
        except ValidationError as exc:
            raise ToolError(f"Error executing tool {name}: invalid: "
                            f"{validation_detail(exc.errors())}") from None
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: invalid: "
                            f"{validation_detail(exc.__cause__.errors())}") from None

    async def run_stdio_async(self) -> None:
        """The SDK's stdio loop, with a JSON-RPC error for each line it cannot read (it would
        drop it, and its sender would wait forever) or that is too long, and an answer to each
        request read before stdin closed: worker.mcp.stdio."""
        from worker.mcp.stdio import serve_stdio

        await serve_stdio(self._lowlevel_server, self.max_line_bytes, self.at_once)


def _known_arguments(tool: str, fields: dict[str, Any], arguments: dict[str, Any]) -> None:
    """An argument the tool does not take is refused, as the API refuses an unknown field: the
    SDK ignored it, so a misspelt ``reason`` declined with none and ``force`` for
    ``force_cascade`` undid without cascading."""
    takes = {field.alias or key for key, field in fields.items()}
    unknown = sorted(str(k) for k in arguments if k not in takes)
    if unknown:
        raise ToolError(f"Error executing tool {tool}: invalid: unknown argument "
                        f"{unknown[0][:64]!r}; {tool} takes {', '.join(sorted(takes)) or 'none'}")


def build_server(app: App, scope_of: ScopeOf, *, auth: AuthSettings | None = None,
                 verifier: DreamTokenVerifier | None = None) -> DreamServer:
    """One MCPServer whose every tool call runs for ``scope_of(ctx)``."""
    server = DreamServer(
        "dream-worker", instructions=INSTRUCTIONS, version="1", auth=auth,
        token_verifier=verifier, log_level="WARNING",
    )
    # The SDK logs each refusal's text at INFO ("Tool 'fuse' failed: ...") and, at DEBUG, some
    # messages whole; a refusal may quote note words (a strict fuse names what it found
    # ungrounded), so the SDK's records stop at WARNING whatever DREAM_LOG_LEVEL says (R21).
    logging.getLogger("mcp").setLevel(logging.WARNING)

    def tools(ctx: Context) -> ScopedTools:
        return ScopedTools(app, scope_of(ctx))

    _memory_tools(server, tools)
    _dream_tools(server, tools)
    _review_tools(server, tools)
    # Called, not used as a decorator: the SDK's custom_route has no return annotation.
    server.custom_route("/healthz", methods=["GET"], include_in_schema=False)(_healthz(app))
    server.custom_route("/livez", methods=["GET"], include_in_schema=False)(_livez)
    return server


def _memory_tools(server: MCPServer, tools: Callable[[Context], ScopedTools]) -> None:
    """A host's own writes: remember a note, list what to fuse, fuse, keep apart."""

    @server.tool(annotations=ADDITIVE)
    def remember(content: str, ctx: Context, type: str = "Context", importance: float = 0.5,
                 conversation_id: str | None = None, manual: bool = True) -> dict[str, Any]:
        """Store a note in this scope unless it is already known: NOOP (known), UPDATE (supersedes
        a shorter near-duplicate) or ADD, with the id and why. type: Preference, Constraint,
        Context, Example or Issue. conversation_id: the conversation it was said in (erasing
        that conversation erases the note). manual=false: your own note, not a person's, so
        dreams may retire it (a newer value, unused past retention); a person's never."""
        return _call(lambda: tools(ctx).remember(content, type, importance, conversation_id,
                                                 manual))

    @server.tool(annotations=CACHING)
    def list_candidates(ctx: Context, threshold: float = 0.88, limit: int = 50) -> dict[str, Any]:
        """Fusion candidates: similar pairs (most similar first), the pairs a dream would ask a
        model about, the last dream's open items, and "topic" items (chained pairs; a small
        scope's short notes): fuse the notes of one attribute (a changed value into the one said
        last), keep_apart the rest. Changes no note; embeds notes not embedded yet."""
        return _call(lambda: tools(ctx).list_candidates(threshold, limit))

    @server.tool(annotations=DESTRUCTIVE)
    def fuse(source_ids: list[str], fused_content: str, ctx: Context,
             fused_importance: float | None = None, strict: bool = False,
             type: str | None = None,
             source_versions: dict[str, int] | None = None) -> dict[str, Any]:
        """Replace the source notes with your fused text in one transaction: sources are revoked
        (kept), the new note points back to them; undo_run(run_id=<the answer's undo_id>) gives
        them back. strict refuses facts no source has. source_versions (note id -> the
        version list_candidates showed) refuses a source changed since your model read it.
        review_items_stale: the open review items that named a source, recorded stale (they
        can never apply)."""
        return _call(lambda: tools(ctx).fuse(source_ids, fused_content, fused_importance,
                                             strict, type, source_versions))

    @server.tool(annotations=ADDITIVE)
    def keep_apart(source_ids: list[str], ctx: Context,
                   source_versions: dict[str, int] | None = None) -> dict[str, Any]:
        """Record that these notes are not the same: never offered together again until one of
        them changes. source_versions as for fuse. review_items_stale: the open review items
        that would merge or revoke one of them into another, recorded stale."""
        return _call(lambda: tools(ctx).keep_apart(source_ids, source_versions))


def _dream_tools(server: MCPServer, tools: Callable[[Context], ScopedTools]) -> None:
    """The dream itself: queue one, read its status and step tree, undo a run."""

    @server.tool(annotations=DESTRUCTIVE)
    def start_dream(ctx: Context, force: bool = False, dry_run: bool = False,
                    allow_retire: int | None = None) -> dict[str, Any]:
        """Queue a dream for this scope (consolidate, contradictions, prune, archive); refused
        with the gate's reason when it is not due, unless force. dry_run applies nothing.
        allow_retire (0 to 10000000) lets this run retire up to that many notes past the
        blast-radius guard: the count a blocked run's reason names; force never does."""
        return _call(lambda: tools(ctx).start_dream(force, dry_run, allow_retire))

    @server.tool(annotations=READ_ONLY)
    def dream_status(ctx: Context, run_id: str | None = None) -> dict[str, Any]:
        """One run's status and step tree, or (no run_id) this scope's latest runs and whether a
        dream is due, with the reason."""
        return _call(lambda: tools(ctx).dream_status(run_id))

    @server.tool(annotations=DESTRUCTIVE)
    def undo_run(run_id: str, ctx: Context, force_cascade: bool = False) -> dict[str, Any]:
        """Revert every change a run made; refused (nothing changed) if a note it touched has
        changed since, unless force_cascade also undoes the later runs that touched it. Also
        takes the undo_id that fuse and an UPDATE of remember answer.

        Answers: run_ids (the runs undone, cascaded later runs first, this run last);
        restored (ids of notes given back their state before the run); retired (ids of notes
        the runs created, now retired); overwritten (ids whose later host edit force_cascade
        replaced); missing (ids erased since, nothing to restore); examples (ids of examples
        given their status back); judgements, reviews (how many verdict-memory and
        flagged-for-review rows the runs recorded were deleted); review_items_withdrawn (how
        many of their open review items were declined, kept for the record);
        review_items_undone (how many review items they applied are now marked undone);
        review_items_stale (how many open review items of other runs named a note the undo
        moved, now recorded stale: they could never apply); review_items_applied (items this
        run proposed that stay applied by their own approval runs: id, run_id; undo_run each
        run_id to revert them);
        notes (one entry per note or example: id, entity, outcome restored | retired |
        missing, its status before and after, overwrote_host_edit when force_cascade replaced
        a host edit)."""
        return _call(lambda: tools(ctx).undo_run(run_id, force_cascade))


async def _livez(request: Request) -> Response:
    """The process answers: the API's ``/livez``."""
    return JSONResponse({"status": "ok"})


def _healthz(app: App) -> Callable[[Request], Awaitable[Response]]:
    """The API's ``/healthz``: 503 while the database is down or has no schema, so a probe
    never takes a replica into service that would fail every tool call."""

    async def healthz(request: Request) -> Response:
        body, status = health_body(await run_in_threadpool(database_state, app.engine, "mcp"))
        return JSONResponse(body, status_code=status)

    return healthz


def _review_tools(server: MCPServer, tools: Callable[[Context], ScopedTools]) -> None:
    """review_*: the changes a dream proposed instead of applying (apply mode propose or
    safe_auto), listed, shown, approved (applied in a run of their own) or declined."""

    @server.tool(annotations=READ_ONLY)
    def review_list(ctx: Context, status: str = "open", run_id: str | None = None,
                    limit: int = 100, offset: int = 0) -> dict[str, Any]:
        """Review items of this scope, oldest first: id, phase, kind (merge, revoke, flag,
        archive), the notes each would change, reason and confidence. status: open, approved,
        declined, stale, undone (approved, its run undone) or any; run_id: only that dream's
        items; limit (1 to 1000) at a time, after skipping offset (the next page: offset +
        limit)."""
        return _call(lambda: tools(ctx).review_list(status, run_id, limit, offset))

    @server.tool(annotations=READ_ONLY)
    def review_show(item_id: int, ctx: Context) -> dict[str, Any]:
        """One review item with the fused text (for a merge) and the current text and version
        of each note it names (changed = edited since it was proposed)."""
        return _call(lambda: tools(ctx).review_show(item_id))

    @server.tool(annotations=DESTRUCTIVE)
    def review_approve(ctx: Context, item_id: int | None = None, run_id: str | None = None,
                       all: bool = False) -> dict[str, Any]:
        """Apply one item (or a dream's items with run_id, or all open items) exactly as the
        dream would have, each in its own run (undo_run reverts it). A note changed since the
        proposal makes the item stale: refused, nothing written."""
        return _call(lambda: tools(ctx).review_approve(item_id, run_id, all))

    @server.tool(annotations=ADDITIVE)
    def review_decline(ctx: Context, item_id: int | None = None, run_id: str | None = None,
                       all: bool = False, reason: str | None = None) -> dict[str, Any]:
        """Decline one item (or a dream's items, or all): no note changes, and the same change
        is not proposed again until one of its notes changes."""
        return _call(lambda: tools(ctx).review_decline(item_id, run_id, all, reason))


def _call(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Refusals the caller can fix become a tool error (``code: one line``), never a traceback."""
    try:
        return fn()
    except DreamError as exc:  # every refusal a caller can fix: its class names the code
        raise ToolError(f"{exc.code}: {caller_detail(exc, 'mcp')}") from None
    except ToolError:
        raise
    except SQLAlchemyError as exc:
        error = database_error(exc)
        if error is None:
            raise _internal(exc) from None
        log.warning("mcp.database_failed", error=str(error))
        raise ToolError(f"{error.code}: {database_detail(error)}") from None
    except Exception as exc:
        raise _internal(exc) from None


def _internal(exc: Exception) -> ToolError:
    """A bug: its message may quote note text (R21), so neither the caller nor the log (the
    SDK would print it with the traceback) gets it; frames only."""
    log.error("mcp.tool_failed", error_type=type(exc).__name__, frames=stack(exc))
    return ToolError(f"internal: the tool failed ({type(exc).__name__}); see the server log")


def bound_scope(scope: Scope) -> ScopeOf:
    """stdio: every call acts on the scope the server was started for."""
    return lambda ctx: scope


def token_scope(tokens: list[tuple[bytes, Principal]]) -> ScopeOf:
    """HTTP: every call acts on the scope of the bearer token of the request that carried it."""

    def scope_of(ctx: Context) -> Scope:
        headers = ctx.headers or {}
        principal = authenticate(tokens, bearer(headers.get("authorization")))
        if principal is None or principal.scope is None:
            raise ToolError("unauthorized: send a scoped bearer token from DREAM_API_TOKENS")
        return principal.scope

    return scope_of


def stdio_server(app: App, scope: Scope,
                 at_once: Callable[[str], None] | None = None) -> MCPServer:
    server = build_server(app, bound_scope(scope))
    server.max_line_bytes = app.settings.api_max_body_bytes
    server.at_once = at_once
    return server


def http_app(app: App, host: str, port: int) -> ASGIApp:
    """The streamable HTTP app at /mcp (bearer tokens from DREAM_API_TOKENS) plus /healthz."""
    tokens = parse_tokens(app.settings.api_tokens)
    # The SDK wants an issuer for its metadata; the tokens are ours, so the server names itself.
    auth = AuthSettings(issuer_url=f"http://{_url_host(host)}:{port}", resource_server_url=None)
    server = build_server(app, token_scope(tokens), auth=auth, verifier=DreamTokenVerifier(tokens))
    limit = app.settings.api_max_body_bytes
    # Stateless: no per-process session table, so any replica behind a Service can answer any
    # request (every tool call is one self-contained request carrying its token).
    starlette = server.streamable_http_app(host=host, stateless_http=True,
                                           max_request_body_size=limit)
    # The API's own limit, outermost: an oversized body is refused unread, before the token (R31).
    # Inside it, the SDK's answers to an unreadable body are made one line (worker.mcp.http_errors).
    # A lone surrogate escape is refused there too, before the SDK's 2026-07-28 transport reads it.
    return BodyLimit(LoneSurrogates(OneLineErrors(AdminTokenRefusal(starlette, tokens)), tokens),
                     max_bytes=limit)


def _url_host(host: str) -> str:
    # An IPv6 address in brackets, without its zone ("fe80::1%eth0"), which no URL may carry.
    return f"[{host.partition('%')[0]}]" if ":" in host else host

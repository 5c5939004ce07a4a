"""The servers' listening sockets (`dream api`, `dream mcp --transport http`): bound before
uvicorn starts, so an address that cannot be used is one ``error:`` line naming the option."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn

import click

from worker.app import App
from worker.cli.errors import UserError
from worker.errors import Conflict
from worker.runs.lease import give_back_executing
from worker.runs.stops import signal_of


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """A socket bound to each address ``host`` names (as asyncio's ``create_server`` binds
    them: ``localhost`` may be two), or the one line saying why it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise UserError(f"--host {host!r} is not an address to listen on ({reason}); pass an IP "
                        "address of this machine (127.0.0.1, or 0.0.0.0 for every interface) "
                        "or a name that resolves to one") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio: "::" and "0.0.0.0" are two sockets
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]  # --port 0: every address on the one port it got
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise _bind_error(host, port, exc) from None
    return sockets


def _bind_error(host: str, port: int, exc: OSError) -> Exception:
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return Conflict(f"cannot listen on {where}: the port is already in use; stop what "
                        "listens there or pass another --port")
    if exc.errno == errno.EACCES:
        return UserError(f"cannot listen on {where}: permission denied (ports below 1024 need "
                         "privileges); pass a --port from 1024 up")
    if exc.errno == errno.EADDRNOTAVAIL:
        return UserError(f"cannot listen on {where}: {host} is not an address of this machine; "
                         "pass --host 127.0.0.1, or 0.0.0.0 for every interface")
    return UserError(f"cannot listen on {where} ({exc.strerror or type(exc).__name__}); check "
                     "--host and --port")


def serve(build: Callable[[], Any], host: str, port: int, grace: int) -> None:
    """Bind ``host``:``port``, then build the ASGI app and serve it with uvicorn on those
    sockets until SIGTERM or SIGINT: new connections are refused at once, the requests in flight
    get ``grace`` seconds to be answered (then they are cancelled), and this returns, so the
    caller can wait for the dreams the server started. Access logs off: uvicorn's would print
    query strings (the dashboard token) and client details; ours log paths only."""
    import uvicorn

    sockets = listening_sockets(host, port)
    url = "http://{}:{}".format(f"[{host}]" if ":" in host else host,
                                sockets[0].getsockname()[1])

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            # uvicorn says where it listens only when it binds the sockets itself.
            if not self.should_exit:
                logging.getLogger("uvicorn.error").info(
                    "Uvicorn running on %s (Press CTRL+C to quit)", url)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # Once shut down, uvicorn raises the signal that stopped it again under the handler
            # it found: SIGTERM's default killed the process there (exit -15) before the dreams
            # it started had ended. Under these no-op handlers the stop is a clean return.
            if threading.current_thread() is not threading.main_thread():
                with super().capture_signals():
                    yield
                return
            found = {sig: signal.signal(sig, _stopped) for sig in _STOPS}
            try:
                with super().capture_signals():
                    yield
            finally:
                for sig, handler in found.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(build(), host=host, port=port, access_log=False, log_config=None,
                            timeout_graceful_shutdown=grace)
    try:
        Server(config).run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()


_STOPS = (signal.SIGINT, signal.SIGTERM)


def _stopped(signum: int, frame: FrameType | None) -> None:
    """What a stop signal uvicorn raises again after its shutdown does: nothing more."""


# What a stop that reaches the `dream` group leaves: one before the server served (or after it
# ended); a stop while it waits for what it started is ``ends_at_once``'s.
SERVER_STOP = "it was not serving; no run of it is left running"


def finish_started_runs(app: App) -> None:
    """Wait for the dreams this server started in its own threads (no broker): the process
    ending kills them mid-phase, and each run would stay `running`, holding its scope, until
    its lease lapsed. A run is bounded by its own time limits; a stop signal meanwhile ends
    the wait (``ends_at_once``)."""
    with ends_at_once(app):
        for thread in app.threads:
            thread.join()


@contextmanager
def ends_at_once(app: App) -> Iterator[None]:
    """A stop (Ctrl-C, SIGTERM) of a server that is no longer serving (the stop before this one
    asked it to end: it waits for its dreams) ends the process now (``end_now``)."""
    try:
        yield
    except KeyboardInterrupt as stop:
        end_now(app, signal_of(stop))


def end_now(app: App, signal_name: str) -> NoReturn:
    """End a server now: each run it is executing is given back (a dream interrupted, `dream
    run --due` resumes it; an approval cancelled), one line says so, exit 13. The exit does
    not wait for the threads still answering requests (Python would join them, and a request
    thread cannot be cancelled): their writes roll back with the process."""
    released = give_back_executing(f"stopped by {signal_name} while the server ended; the "
                                   "run is resumed by `dream run --due` or the next gate check")
    runs = (f"gave back {len(released)} run{'s' if len(released) != 1 else ''} it was "
            f"executing ({', '.join(released)}): a dream is interrupted (`dream run --due` "
            "resumes it), an approval cancelled (approve its item again)"
            if released else "no run of it is left running")
    context = click.get_current_context(silent=True)
    path = context.command_path if context is not None else "dream"
    click.echo(f"`{path}` stopped at once by {signal_name}: requests still in flight were left "
               f"unanswered; {runs}", err=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(13)

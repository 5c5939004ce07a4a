"""The API on a real uvicorn socket in a thread, for browser and concurrency tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import uvicorn

from worker.api import create_api
from worker.app import App


def serve(app: App) -> Iterator[str]:
    """Yield the base URL of a uvicorn server over ``app``; stopped when the generator closes."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_api(app), log_config=None, access_log=False,
                                           limit_concurrency=64))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

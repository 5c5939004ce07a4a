"""Resident memory of a real `dream api` process while an unauthenticated client uploads 300 MB,
with the body limit effectively off and at its default (README "Safety", R31).

    .venv/bin/python -m tests.bench.api_body_limit
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PORT = 8765
DREAM = str(Path(sys.executable).with_name("dream"))  # the venv's entry point
UPLOAD = 300 * 1000 * 1000


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def measure(limit: int | None) -> str:
    tmp = Path(tempfile.mkdtemp())
    env = {**os.environ, "DREAM_DATABASE_URL": f"sqlite:///{tmp / 'bench.db'}",
           "DREAM_API_TOKENS": json.dumps({"x" * 20: {"role": "admin"}}), "DREAM_LOG_LEVEL": "WARNING"}
    if limit is not None:
        env["DREAM_API_MAX_BODY_BYTES"] = str(limit)
    subprocess.run([DREAM, "db", "upgrade"], env=env, check=True, capture_output=True)
    server = subprocess.Popen([DREAM, "api", "--port", str(PORT)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)
        before = peak = rss_mb(server.pid)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_mb(server.pid))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        sent, answer = 0, b""
        with socket.create_connection(("127.0.0.1", PORT)) as conn:
            conn.sendall(b"POST /api/notes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % UPLOAD)
            chunk = b"a" * (1 << 20)
            try:
                while sent < UPLOAD:
                    part = chunk[: UPLOAD - sent]
                    conn.sendall(part)
                    sent += len(part)
            except OSError:
                pass  # the server answered and closed
            try:
                answer = conn.recv(64)
            except OSError:
                answer = b"(connection reset)"
        time.sleep(0.5)
        done.set()
        sampler.join()
    finally:
        server.terminate()
        server.wait()
    status = answer.split(b"\r\n")[0].decode(errors="replace")
    return (f"limit {limit if limit is not None else 'default'}: RSS {before} MB before, peak {peak} MB; "
            f"{sent / 1e6:.0f} MB sent; {status}")


if __name__ == "__main__":
    print(measure(10**12))
    print(measure(None))

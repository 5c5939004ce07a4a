"""A small W3C WebDriver client over httpx: chromedriver driving a real headless Chromium.

Enough for page tests: open a URL, set the viewport (desktop or phone, through the DevTools
device-metrics override), run a script against the live DOM, click, and take full-page or
element screenshots.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.services import unavailable

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Browser:
    def __init__(self, client: httpx.Client, session: str) -> None:
        self.http = client
        self.session = session

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        reply = self.http.request(method, f"/session/{self.session}{path}", json=body)
        data = reply.json()
        if reply.status_code != 200:
            raise RuntimeError(f"webdriver {path}: {data.get('value', data)}")
        return data.get("value")

    def cdp(self, cmd: str, **params: Any) -> Any:
        return self._call("POST", "/goog/cdp/execute", {"cmd": cmd, "params": params})

    def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        self.cdp("Emulation.setDeviceMetricsOverride", width=width, height=height,
                 deviceScaleFactor=1, mobile=mobile)

    def get(self, url: str) -> None:
        self._call("POST", "/url", {"url": url})

    def run(self, script: str, *args: Any) -> Any:
        """Run ``script`` (a function body; ``arguments`` holds ``args``) in the page."""
        return self._call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css: str) -> str:
        return str(self._call("POST", "/element", {"using": "css selector", "value": css})[ELEMENT])

    def click(self, css: str) -> None:
        self._call("POST", f"/element/{self.find(css)}/click", {})

    def screenshot(self, path: Path) -> Path:
        """The whole page, beyond the viewport, as PNG."""
        shot = self.cdp("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def element_screenshot(self, css: str, path: Path) -> Path:
        data = self._call("GET", f"/element/{self.find(css)}/screenshot")
        path.write_bytes(base64.b64decode(data))
        return path


@contextmanager
def chromium(profile: Path) -> Iterator[Browser]:
    """A chromedriver process and one headless Chromium session; skipped when either is absent."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        unavailable("chromium and chromedriver are needed "
                    "(apt-get install -y chromium chromium-driver)")
    port = _free_port()
    proc = subprocess.Popen([driver, f"--port={port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
    try:
        _wait_ready(client, proc)
        options = {"binary": binary, "args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--hide-scrollbars", "--window-size=1366,900",
            f"--user-data-dir={profile}"]}
        reply = client.post("/session", json={"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": options}}}).json()
        session = reply["value"].get("sessionId")
        if session is None:
            raise RuntimeError(f"chromedriver gave no session: {reply['value']}")
        browser = Browser(client, session)
        try:
            yield browser
        finally:
            client.delete(f"/session/{session}")
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)


def _wait_ready(client: httpx.Client, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("chromedriver exited at start")
        try:
            if client.get("/status").json()["value"]["ready"]:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("chromedriver did not become ready in 30 s")

"""Open a local HTML page in headless Chromium and report what a user would see.

A small client of the Chrome DevTools protocol over its WebSocket (standard library only:
the protocol needs one text-frame client, written here, rather than a new dependency):
start ``chromium --headless --remote-debugging-port=0``, attach to its page, navigate,
collect console errors and uncaught exceptions, evaluate JavaScript, take a full-page
screenshot.  Used by ``tests/test_report_browser.py`` and ``studies/report_screenshots.py``.

Chromium is Debian's ``chromium`` package (``apt-get install chromium``); :func:`chromium_binary`
finds it or raises :class:`BrowserMissing` with that instruction.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["BrowserMissing", "HeadlessChromium", "PageReport", "chromium_binary", "open_page"]

INSTALL_HINT = (
    "headless Chromium is needed: install it with `apt-get install chromium` (Debian) or set CHROMIUM=/path/to/chromium"
)

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
)


class BrowserMissing(RuntimeError):
    """No Chromium binary on this machine."""


def chromium_binary() -> str:
    """``$CHROMIUM``, else ``chromium`` / ``chromium-browser`` / ``google-chrome`` on the PATH."""
    candidates = [os.environ.get("CHROMIUM")] + [
        shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise BrowserMissing(INSTALL_HINT)


class _WebSocket:
    """The client side of RFC 6455, text frames only (what the DevTools protocol uses)."""

    def __init__(self, url: str, timeout: float) -> None:
        match = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        if not match:
            raise ValueError(f"not a ws:// URL: {url}")
        host, port, path = match.group(1), int(match.group(2)), match.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode("ascii")
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode("ascii")
        )
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the WebSocket handshake")
            response += chunk
        header, self._buffer = response.split(b"\r\n\r\n", 1)
        if b" 101 " not in header.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"WebSocket handshake refused: {header.splitlines()[0]!r}")

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise ConnectionError("DevTools connection closed")
            self._buffer += chunk
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def send(self, text: str) -> None:
        payload = text.encode("utf-8")
        header = bytearray([0x81])  # FIN, text frame
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes(header) + mask + masked)

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            opcode, n = first & 0x0F, second & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if second & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode == 0x9:  # ping: answer, keep reading
                continue
            message += payload
            if first & 0x80:
                return message.decode("utf-8")

    def close(self) -> None:
        self.sock.close()


class PageReport(dict):
    """What :func:`open_page` saw: ``errors`` (console errors and exceptions) and ``value`` (the probe's result)."""


class HeadlessChromium:
    """One headless Chromium process with a DevTools connection to its page.

    Use as a context manager; :meth:`call` sends a command and returns its result, keeping
    the events that arrive meanwhile in :attr:`events`.
    """

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        self.width, self.height, self.timeout = width, height, timeout
        self.events: list[dict] = []
        self._next_id = 0

    def __enter__(self) -> HeadlessChromium:
        binary = chromium_binary()
        self._profile = tempfile.mkdtemp(prefix="classify-images-chromium-")
        self.process = subprocess.Popen(
            [
                binary,
                *FLAGS,
                f"--user-data-dir={self._profile}",
                "--remote-debugging-port=0",
                f"--window-size={self.width},{self.height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + self.timeout
        url = None
        lines = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                break
            lines.append(line)
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                url = match.group(1)
                break
        if url is None:
            self.__exit__(None, None, None)
            raise RuntimeError("Chromium did not start its DevTools server:\n" + "".join(lines[-20:]))
        port = int(re.match(r"ws://[^:]+:(\d+)/", url).group(1))
        pages = []
        while time.monotonic() < deadline and not pages:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
                pages = [t for t in json.load(response) if t.get("type") == "page"]
            time.sleep(0.05 if not pages else 0)
        self.ws = _WebSocket(pages[0]["webSocketDebuggerUrl"], self.timeout)
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )
        return self

    def __exit__(self, *exc_info) -> None:
        if getattr(self, "ws", None):
            self.ws.close()
        self.process.kill()
        self.process.wait(timeout=30)
        self.process.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def call(self, method: str, **params: Any) -> dict:
        self._next_id += 1
        self.ws.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"DevTools {method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for_event(self, method: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        for event in self.events:
            if event.get("method") == method:
                return event
        while time.monotonic() < deadline:
            message = json.loads(self.ws.receive())
            self.events.append(message)
            if message.get("method") == method:
                return message
        raise TimeoutError(f"no {method} within {timeout or self.timeout} s")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads reported so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:300])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append("console.error: " + json.dumps(params.get("args", []))[:300])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                found.append(f"log: {entry.get('text')} {entry.get('url', '')}")
        return found

    def screenshot(self, path: str | os.PathLike) -> None:
        """The whole page (not only the viewport) as a PNG at ``path``."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": self.width, "height": min(int(size["height"]), 16000), "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
        Path(path).write_bytes(base64.b64decode(data))


def open_page(
    path: str | os.PathLike, probe: str, *, screenshot: str | os.PathLike | None = None, width: int = 1280
) -> PageReport:
    """Load the local file ``path``, wait for its images, run the JavaScript ``probe``.

    Returns
    -------
    PageReport
        ``{"errors": [...], "value": <probe's JSON value>}``.
    """
    url = Path(path).resolve().as_uri()
    with HeadlessChromium(width=width) as browser:
        browser.call("Page.navigate", url=url)
        browser.wait_for_event("Page.loadEventFired")
        deadline = time.monotonic() + 30
        while not browser.evaluate("Array.from(document.images).every(i => i.complete)"):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        value = browser.evaluate(probe)
        if screenshot is not None:
            browser.screenshot(screenshot)
        return PageReport(errors=browser.errors(), value=value)

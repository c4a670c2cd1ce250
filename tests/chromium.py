"""Headless Chromium driven over its DevTools protocol (websocket-client), for the fleet
view's browser test (tests/functional/test_fleet_view_browser.py) and its benchmark
(bench/webview.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import websocket

from tests.conftest import IN_CI


def require_chromium() -> str:
    """The Chromium binary; skips the test when there is none (under CI=true, fails it:
    .ci/run installs it)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is not None:
        return binary
    message = "Chromium is not installed (Debian: apt-get install chromium)"
    if IN_CI:
        pytest.fail(f"{message}, and CI=true requires it (.ci/run installs it)")
    pytest.skip(f"{message}; CI=true makes this a failure")


class DevTools:
    """One headless Chromium and its browser-level DevTools connection (sessions are
    flattened onto it: every command names its page's session)."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking",
             "--remote-debugging-port=0", f"--user-data-dir={workdir / 'chromium'}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            url = found.group(1) if found else None
        if url is None:
            self.proc.kill()
            raise RuntimeError("Chromium did not start its DevTools endpoint")
        self.ws = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self._next = 0

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:                               # events are skipped
            answer = json.loads(self.ws.recv())
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session, expression=expression,
                           returnByValue=True)
        return result["result"].get("value")

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)

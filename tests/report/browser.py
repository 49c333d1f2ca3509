"""Headless Chromium (Debian's package) as the report's reader: the DOM after scripts
ran, every console message, and a screenshot; and a `Session` that holds a page open at a
chosen window width to measure it as a reader sees it (issue 56)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from tests.conftest import ROOT

ARTIFACTS = Path(os.environ.get("FLEET_TEST_ARTIFACTS", ROOT / "test-artifacts"))


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("the report tests need Debian's chromium: apt-get install chromium "
                    "(bash .ci/run does)", pytrace=False)
    return found


@dataclass(frozen=True)
class Page:
    dom: str
    console: list[str]


def _run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--enable-logging=stderr", "--log-level=0",
         f"--user-data-dir={home}", *args],
        capture_output=True, text=True, timeout=120, check=False)


def open_page(url: str, tmp: Path) -> Page:
    done = _run("--dump-dom", url, home=tmp / "chromium-profile")
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return Page(done.stdout, console)


def screenshot(url: str, name: str, tmp: Path, height: int = 3600) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    done = _run("--hide-scrollbars", f"--window-size=1300,{height}", f"--screenshot={path}",
                url, home=tmp / "chromium-shots")
    assert done.returncode == 0 and path.stat().st_size > 10_000, done.stderr[-2000:]
    return path


class Session:
    """Chromium driven over its DevTools pipe (--remote-debugging-pipe: JSON messages on
    file descriptors 3 and 4, no port, no network): a page at a given window width,
    scripts evaluated in it as a reader's browser would run them, and screenshots of any
    part of it. `with Session(tmp) as s: s.open(url, 1280); s.evaluate("...")`."""

    def __init__(self, tmp: Path) -> None:
        self.home = tmp / "chromium-session"
        self.process: subprocess.Popen[bytes] | None = None
        self.sent = 0
        self.buffer = b""
        self.target: str | None = None

    def __enter__(self) -> Session:
        to_chromium, from_us = os.pipe()
        to_us, from_chromium = os.pipe()

        def fds() -> None:  # in the child: its fd 3 reads our messages, fd 4 answers
            ours, theirs = os.dup(to_chromium), os.dup(from_chromium)
            os.dup2(ours, 3)
            os.dup2(theirs, 4)

        self.process = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={self.home}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chromium)
        os.close(from_chromium)
        self.write, self.read = from_us, to_us
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self.call("Browser.close")
        if self.process is not None:
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        os.close(self.write)
        os.close(self.read)

    def call(self, method: str, params: dict[str, object] | None = None,
             page: bool = False) -> dict[str, object]:
        """One DevTools command and its result; RuntimeError with Chromium's error."""
        self.sent += 1
        message: dict[str, object] = {"id": self.sent, "method": method,
                                      "params": params or {}}
        if page:
            message["sessionId"] = self.target
        os.write(self.write, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.read, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed its pipe during {method}")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\0", 1)
            answer = json.loads(line)
            if answer.get("id") == self.sent:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return dict(answer.get("result", {}))

    def open(self, url: str, width: int, height: int = 900) -> None:
        """The page at `url` in a window `width` x `height` CSS pixels, loaded, its
        scripts run."""
        if self.target is None:
            created = self.call("Target.createTarget", {"url": "about:blank"})
            attached = self.call("Target.attachToTarget",
                                 {"targetId": created["targetId"], "flatten": True})
            self.target = str(attached["sessionId"])
            self.call("Page.enable", page=True)
            self.call("Runtime.enable", page=True)
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            page=True)
        self.call("Page.navigate", {"url": url}, page=True)
        for _ in range(200):
            if self.evaluate("document.readyState") == "complete":
                return
            time.sleep(0.05)
        raise RuntimeError(f"{url} did not load in 10 s")

    def evaluate(self, expression: str) -> object:
        """What `expression` gives in the page (JSON values)."""
        done = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                              "awaitPromise": True}, page=True)
        if "exceptionDetails" in done:
            raise RuntimeError(f"{expression[:80]}: {done['exceptionDetails']}")
        result = done["result"]
        assert isinstance(result, dict)
        return result.get("value")

    def screenshot(self, path: Path, top: float = 0, height: float | None = None,
                   scale: float = 1.0) -> Path:
        """The page from `top` down `height` CSS pixels (the window's height by default)
        as a PNG at `path`, at `scale` (0.5: half as many pixels each way)."""
        width = float(cast(float, self.evaluate("document.documentElement.clientWidth")))
        shown = height if height is not None else float(
            cast(float, self.evaluate("window.innerHeight")))
        shot = self.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": top, "width": width, "height": shown, "scale": scale}},
            page=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(str(shot["data"])))
        return path

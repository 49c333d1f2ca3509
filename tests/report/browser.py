"""Headless Chromium (Debian's package) as the report's reader: the DOM after scripts
ran, every console message, and a screenshot."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

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

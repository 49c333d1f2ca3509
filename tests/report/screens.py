"""The report measured as a person sees it in Chromium (issue 56), for
tests/report/test_report_screens.py and bench/report_screens.py: what sticks out past the
page, where the offers' verdicts sit, what each chart draws, and screenshots.

    with Session(tmp) as page:
        page.open(url, 1280)
        layout = measure(page)
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tests.report.browser import Session

FIRST_SCREEN = 900  # CSS pixels: what a 1,280 x 900 or larger window shows on opening
WIDTHS = (1280, 1920)

# Every element's box against the window, outside the boxes made to scroll sideways on
# purpose (div.scroll, whose own box is checked like any other); the page's own width; each
# scroll box that would scroll; each offer's verdict's place; each chart's marks.
_MEASURE = """(() => {
  const width = window.innerWidth;
  const out = [];
  for (const el of document.body.querySelectorAll("*")) {
    const up = el.parentElement;
    if (up && up.closest(".scroll")) { continue; }
    const box = el.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) { continue; }
    if (box.right > width + 0.5 || box.left < -0.5) {
      out.push(el.tagName.toLowerCase() + "." + (el.getAttribute("class") || "") + " " +
               Math.round(box.left) + "-" + Math.round(box.right));
    }
  }
  const sideways = [];
  for (const box of document.querySelectorAll(".scroll")) {
    if (box.clientWidth > 0 && box.scrollWidth > box.clientWidth + 1) {
      const table = box.querySelector("table");
      sideways.push((table && table.getAttribute("class") || "table") + " in #" +
                    (box.closest("section") || {}).id + " " + box.scrollWidth + " > " +
                    box.clientWidth);
    }
  }
  const verdicts = [];
  for (const row of document.querySelectorAll("table.offers tbody tr")) {
    const verdict = row.querySelector("span.verdict");
    const box = verdict.getBoundingClientRect();
    verdicts.push({offer: row.querySelector("td").innerText.split("\\n")[0],
                   verdict: verdict.innerText.toLowerCase(), bottom: box.bottom + scrollY,
                   shown: box.width > 0 && box.height > 0});
  }
  const charts = [];
  for (const svg of document.querySelectorAll("svg.chart")) {
    charts.push({title: svg.getAttribute("aria-label"),
                 marks: svg.querySelectorAll(".mark").length,
                 width: svg.getBoundingClientRect().width});
  }
  return JSON.stringify({width: width, page: document.documentElement.scrollWidth,
                         height: document.documentElement.scrollHeight, out: out,
                         sideways: sideways, verdicts: verdicts, charts: charts});
})()"""
_OPEN_ALL = "document.querySelectorAll('details').forEach(d => { d.open = true; })"


@dataclass(frozen=True)
class Layout:
    """What a page looks like at one window width."""

    width: int  # the window's
    page: int  # the document's scroll width
    height: int
    out: tuple[str, ...]  # elements past the window's edge, outside scroll boxes
    sideways: tuple[str, ...]  # scroll boxes whose table is wider than the page
    verdicts: tuple[dict[str, Any], ...]  # each offer: its name, verdict, bottom, shown
    charts: tuple[dict[str, Any], ...]  # each chart: its title, marks, drawn width


def measure(page: Session, open_all: bool = False) -> Layout:
    """The page as it stands, or with every fold opened (a reader may open any)."""
    if open_all:
        page.evaluate(_OPEN_ALL)
    found = json.loads(cast(str, page.evaluate(_MEASURE)))
    return Layout(found["width"], found["page"], found["height"], tuple(found["out"]),
                  tuple(found["sideways"]), tuple(found["verdicts"]),
                  tuple(found["charts"]))


def _opened(page: Session, anchor: str) -> float:
    """Where the fold `anchor` begins, once the page's script has opened it (a link to a
    fold opens it on the hash's change, a moment after the navigation)."""
    for _ in range(100):
        if page.evaluate(f"document.getElementById('{anchor}').open"):
            break
        time.sleep(0.02)
    return float(cast(float, page.evaluate(
        f"document.getElementById('{anchor}').getBoundingClientRect().top + scrollY")))


def shoot(page: Session, url: str, folder: Path) -> list[Path]:
    """The screenshots a reader's eye checks, into `folder`: the first screen at 1,280 and
    1,920 px, the first offer opened, the providers side by side, at 1,280."""
    shots = []
    for width in WIDTHS:
        page.open(url, width)
        shots.append(page.screenshot(folder / f"first-screen-{width}.png"))
    page.open(url + "#offer-1", 1280)
    shots.append(page.screenshot(folder / "offer-1280.png", _opened(page, "offer-1") - 8,
                                 1000))
    page.open(url, 1280)
    top = float(cast(float, page.evaluate(
        "document.getElementById('charts').getBoundingClientRect().top + scrollY")))
    shots.append(page.screenshot(folder / "side-by-side-1280.png", top - 8, 1200))
    return shots


def shoot_nights(page: Session, url: str, folder: Path) -> Path:
    """A sweep's report with its offer's nights opened, at 1,280."""
    page.open(url + "#offer-1", 1280)
    return page.screenshot(folder / "nights-1280.png", _opened(page, "offer-1") - 8, 900)

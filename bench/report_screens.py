"""Screenshots of the report as a buyer reads it (issue 56), kept beside the records.

Stores the lent nodes' real documents as three providers would sell them
(tests/report/real_scene.py), writes the report over everything stored and the report of
the sweep's nights, opens both in headless Chromium (tests/report/browser.py) and saves:

- first-screen-1280.png, first-screen-1920.png: the first 900 px at each width, every
  offer's verdict on it;
- offer-1280.png: the first offer opened (what is against it, its hosts as found against
  their listing, each GPU, pair and node against a healthy one);
- side-by-side-1280.png: the providers side by side, per variant;
- nights-1280.png: the sweep's report, its offer's nights;
- layout.json: what the browser measured at both widths (elements past the page, tables
  wider than it, where each verdict sits, each chart's marks).

    python bench/report_screens.py                   # into the folder below
    python bench/report_screens.py --out /tmp/shots  # anywhere else

A screenshot over MAX_BYTES fails the run: the records stay small.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleet.analysis.dataset import Scope  # noqa: E402
from fleet.report import ReportOptions, build_report, render  # noqa: E402
from fleet.store.database import open_engine, resolve  # noqa: E402
from fleet.store.schema import upgrade  # noqa: E402
from tests.report.browser import Session  # noqa: E402
from tests.report.real_scene import store_nights, store_real  # noqa: E402
from tests.report.screens import WIDTHS, measure, shoot, shoot_nights  # noqa: E402

FOLDER = ROOT / "bench" / "records" / "2026-11-29-report-screens"
MAX_BYTES = 300_000
# The report says when it was made and from which store: fixed, so that the screenshots
# change only when the report does.
WHEN = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
STORE = "a store of the lent nodes' documents (bench/report_screens.py)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FOLDER)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        engine = open_engine(resolve(f"sqlite:///{work / 'fleet.db'}"))
        upgrade(engine)
        store_real(engine)
        store_nights(engine)
        pages = {}
        for name, scope in (("all", Scope()), ("nightly", Scope(sweep="nightly"))):
            report = build_report(engine, ReportOptions(scope=scope), STORE, now=WHEN)
            pages[name] = work / f"{name}.html"
            pages[name].write_text(render(report, "html"), encoding="utf-8")
        layouts = {}
        with Session(work) as page:
            shots = shoot(page, pages["all"].as_uri(), args.out)
            shots.append(shoot_nights(page, pages["nightly"].as_uri(), args.out))
            for width in WIDTHS:
                page.open(pages["all"].as_uri(), width)
                layouts[f"{width} as opened"] = dataclasses.asdict(measure(page))
                layouts[f"{width} every fold open"] = dataclasses.asdict(
                    measure(page, open_all=True))
        engine.dispose()
    (args.out / "layout.json").write_text(json.dumps(layouts, indent=2) + "\n")
    big = [f"{p.name}: {p.stat().st_size:,} bytes" for p in shots
           if p.stat().st_size > MAX_BYTES]
    for path in shots:
        print(f"{path}: {path.stat().st_size:,} bytes")
    for name, layout in layouts.items():
        print(f"{name}: page {layout['page']} px wide in {layout['width']}, "
              f"{len(layout['out'])} past its edge, {len(layout['sideways'])} tables wider "
              f"than it, verdicts down to {max(v['bottom'] for v in layout['verdicts']):.0f} "
              f"px, charts {[c['marks'] for c in layout['charts']]}")
    if big:
        print("over the limit: " + "; ".join(big), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

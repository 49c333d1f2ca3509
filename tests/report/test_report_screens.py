"""The report read as a person reads it (issue 56): rendered from the lent nodes' real
documents (tests/report/real_scene.py: three providers, a listing not met, a card
degraded, a GPU held by the renter's own process, an all-reduce under NCCL_P2P_DISABLE,
and five nights of one H100) by `fleet report`, opened in headless Chromium at 1,280 and
1,920 px:

- nothing sticks out past the page, as it opens or with every fold opened, but inside a
  box made to scroll; and at 1,280 no table is wider than the page, so no box scrolls;
- the first screen (900 px) holds every offer's verdict, each the one the scene was built
  to have;
- every chart draws data: at least one mark (a GPU, pair or node), on a sweep's report
  its nights too;
- hostile provider and host names stay text.

Screenshots go beside the test's artifacts (tests/report/browser.py's ARTIFACTS);
`python bench/report_screens.py` makes the ones kept in
bench/records/2026-11-29-report-screens/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine

from fleet.cli import main
from fleet.report import ReportOptions, build_report
from fleet.store.database import open_engine, resolve
from fleet.store.schema import upgrade
from tests.report.browser import ARTIFACTS, Session
from tests.report.real_scene import OFFERS, hostile_listing, store_nights, store_real
from tests.report.screens import FIRST_SCREEN, WIDTHS, measure, shoot, shoot_nights

EVIL_PROVIDER = '<script>document.title="pwned-provider"</script>'
EVIL_HOST = '<img src=x onerror="document.title=\'pwned-host\'">'


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Engine]:
    url = f"sqlite:///{tmp_path_factory.mktemp('screens') / 'fleet.db'}"
    engine = open_engine(resolve(url))
    upgrade(engine)
    store_real(engine)
    store_nights(engine)
    return url, engine


@pytest.fixture(scope="module")
def pages(store: tuple[str, Engine], tmp_path_factory: pytest.TempPathFactory
          ) -> dict[str, Path]:
    """`fleet report` over everything stored, and over the sweep's nights, as HTML."""
    url, _ = store
    folder = tmp_path_factory.mktemp("pages")
    made = {}
    for name, args in (("all", []), ("nightly", ["--sweep", "nightly"])):
        out = folder / f"{name}.html"
        done = CliRunner().invoke(main, ["report", "-o", str(out), *args, "--db", url],
                                  catch_exceptions=False)
        assert done.exit_code == 0, done.output
        made[name] = out
    return made


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_sticks_out_and_no_table_is_wider_than_the_page(
        pages: dict[str, Path], tmp_path: Path, width: int) -> None:
    with Session(tmp_path) as page:
        for name, path in pages.items():
            page.open(path.as_uri(), width)
            for opened in (False, True):
                layout = measure(page, open_all=opened)
                where = f"{name} at {width} px{', every fold open' if opened else ''}"
                assert layout.page <= layout.width, where
                assert layout.out == (), f"{where}: {layout.out}"
                if width == 1280:
                    assert layout.sideways == (), f"{where}: {layout.sideways}"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_first_screen_holds_every_offers_verdict(
        pages: dict[str, Path], store: tuple[str, Engine], tmp_path: Path,
        width: int) -> None:
    report = build_report(store[1], ReportOptions(), "test")
    with Session(tmp_path) as page:
        page.open(pages["all"].as_uri(), width)
        layout = measure(page)
        page.screenshot(ARTIFACTS / f"report-first-screen-{width}.png")
    assert len(layout.verdicts) == len(report.offers) == len(OFFERS)
    for seen in layout.verdicts:
        assert seen["shown"] and seen["bottom"] <= FIRST_SCREEN, seen
    said = {(o.provider, o.variant): o.verdict for o in report.offers}
    assert said == OFFERS
    assert [v["verdict"] for v in layout.verdicts] == [o.verdict for o in report.offers]
    # Each verdict gives its one reason: the first finding against it, or why to buy.
    for offer in report.offers:
        if offer.findings:
            assert offer.reason.startswith(f"{offer.findings[0].kind}: ")
        elif offer.verdict == "not settled":
            assert offer.reason.startswith("measured only at another configuration than "
                                           "its variant's other offers ("), offer.reason
        else:
            assert offer.reason.startswith("nothing to dispute or fix; ")


def test_every_chart_draws_data(pages: dict[str, Path], store: tuple[str, Engine],
                                tmp_path: Path) -> None:
    report = build_report(store[1], ReportOptions(), "test")
    with Session(tmp_path) as page:
        page.open(pages["all"].as_uri(), 1280)
        layout = measure(page, open_all=True)
        charts = {c["title"]: c for c in layout.charts}
        # Per variant the providers side by side, per offer its GPUs against a healthy one.
        assert len(layout.charts) == len(report.charts) + len(report.offer_charts)
        assert {o.provider for o in report.offers} == {"lambda", "nebius", "runpod"}
        assert len(report.offer_charts) == len(report.offers)
        for chart in layout.charts:
            assert chart["marks"] > 0 and chart["width"] > 500, chart
        side = charts["H100-SXM5-80GB: providers side by side"]
        assert side["marks"] == sum(1 for u in report.units if u.variant == "H100-SXM5-80GB")
        # The all-reduce under NCCL_P2P_DISABLE is a cross at the axis' edge, its figure
        # written beside it: short, in the chart as in the findings.
        runpod = next(c for c in report.offer_charts if c.provider == "runpod")
        (allreduce,) = [row for row in runpod.panels[0].rows if row.label.startswith("All")]
        (mark,) = allreduce.marks
        assert mark.short and mark.clipped == "left" and mark.text == "9%"
        for path in shoot(page, pages["all"].as_uri(), ARTIFACTS):
            assert path.stat().st_size > 10_000
        # A sweep's report: the offer's nights, a mark a night.
        page.open(pages["nightly"].as_uri(), 1280)
        nights = [c for c in measure(page, open_all=True).charts
                  if c["title"].startswith("lambda · H100-SXM5-80GB: bf16")]
        assert nights and all(c["marks"] >= 5 for c in nights), nights
        shoot_nights(page, pages["nightly"].as_uri(), ARTIFACTS)


def test_hostile_names_stay_text(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    engine = open_engine(resolve(url))
    upgrade(engine)
    store_real(engine)
    hostile_listing(engine, EVIL_PROVIDER, EVIL_HOST)
    out = tmp_path / "hostile.html"
    done = CliRunner().invoke(main, ["report", "-o", str(out), "--db", url],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    with Session(tmp_path) as page:
        page.open(out.as_uri(), 1280)
        assert "pwned" not in str(page.evaluate("document.title"))
        # No element a host's name made: no image, and the report's own script alone.
        assert page.evaluate("document.querySelectorAll('img').length") == 0
        assert page.evaluate("document.querySelectorAll('script').length") == 1
        layout = measure(page, open_all=True)
        assert layout.out == () and layout.sideways == ()
        names = [v["offer"] for v in layout.verdicts]
    assert any(EVIL_PROVIDER in name for name in names), names
    text = out.read_text()
    assert "&lt;img src=x onerror=" in text and "<img" not in text
    assert re.search(r"<script>document", text) is None

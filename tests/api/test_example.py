"""examples/h100_tflops_per_dollar.py, run as a user runs it, over a store filled through
the real ingest path with figures whose ranking is known, and with results that would
change the ranking if the script let them in: older than a month, another variant,
cool-start."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.model.document import AgentDocument
from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from tests.conftest import ROOT
from tests.store import factory
from tests.store.conftest import migrated_sqlite

SCRIPT = ROOT / "examples" / "h100_tflops_per_dollar.py"
SXM = {"variant": "H100 SXM5 80GB"}
NOW = dt.datetime.now(dt.UTC)

# provider: (hosts, soaked TFLOP/s of every GPU, price per GPU-hour in USD or None)
OFFERS = {
    "lambda": (("l-01", "l-02"), 690.0, 2.30),  # 300 TFLOP/s per dollar
    "nebius": (("n-01", "n-02"), 660.0, 2.00),  # 330
    "vast": (("v-01",), 700.0, 2.80),  # 250
    "unpriced": (("u-01",), 700.0, None),  # no price: no ratio, listed last
}
EXPECTED = [("nebius", 660.0, 2.00, 330.0), ("lambda", 690.0, 2.30, 300.0),
            ("vast", 700.0, 2.80, 250.0)]


def _store(ingest: Ingest, provider: str, host: str, tflops: float, price: float | None,
           days_ago: float, *, variant: str = "H100 SXM5 80GB", harness: str = "1.3.0"
           ) -> None:
    document = factory.document(
        host=host, gpus=2, variant=variant, gpu_tflops=[tflops, tflops], harness=harness,
        collected_at=NOW - dt.timedelta(days=days_ago), seed=int(days_ago * 10))
    listing = Listing(SXM, price, None if price is None else "USD")
    ingest.store(AgentDocument.model_validate(document), Origin(provider, host, listing))


def _fill(db: Path) -> None:
    engine = open_engine(resolve(migrated_sqlite(db)))
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for provider, (hosts, tflops, price) in OFFERS.items():
            for host in hosts:
                _store(ingest, provider, host, tflops, price, days_ago=3)
        # lambda's GPUs measured cool-start as well, high: let in, each GPU's median
        # would be 795 and lambda (345.7 per dollar) would beat nebius.
        for host in OFFERS["lambda"][0]:
            _store(ingest, "lambda", host, 900.0, 2.30, days_ago=2, harness="1")
        # cheap: 700 per dollar, but 40 days ago; and an H100 PCIe this week.
        _store(ingest, "cheap", "c-01", 700.0, 1.00, days_ago=40)
        _store(ingest, "cheap", "c-02", 560.0, 0.80, days_ago=3, variant="H100 PCIe 80GB")
    engine.dispose()


def _run(args: list[str], env: dict[str, str], cwd: Path) -> list[list[str]]:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    # A header line, the index's names, then one line per provider and currency.
    assert lines[0] == ["tflops", "price", "gpus", "tflops_per_dollar"], done.stdout
    return lines[2:]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FLEET_DB", "XDG_DATA_HOME")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"))
    return env


def _check(rows: list[list[str]]) -> None:
    assert [row[0] for row in rows] == ["nebius", "lambda", "vast", "unpriced"]
    for row, (provider, tflops, price, per_dollar) in zip(rows, EXPECTED, strict=False):
        assert row[1] == "USD", row
        assert float(row[2]) == pytest.approx(tflops, rel=0.01), provider
        assert float(row[3]) == pytest.approx(price), provider
        # Each provider's GPUs count once: two per host.
        assert int(row[4]) == 2 * len(OFFERS[provider][0]), provider
        assert float(row[5]) == pytest.approx(per_dollar, rel=0.01), provider
    assert rows[3][1] == "<NA>" and rows[3][3] == rows[3][5] == "NaN"


def test_the_example_ranks_providers_by_tflops_per_dollar(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    _fill(db)
    _check(_run([f"sqlite:///{db}"], _env(tmp_path), tmp_path))


def test_the_example_reads_the_clis_default_store(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    default = tmp_path / "data" / "fleet" / "fleet.db"
    default.parent.mkdir(parents=True)
    _fill(default)
    _check(_run([], env, tmp_path))


def test_the_docs_from_python_example_runs(tmp_path: Path) -> None:
    # The example moved with "From Python" from the README to the store's page, which the
    # README links to.
    page = (ROOT / "docs" / "store-and-library.md").read_text(encoding="utf-8")
    assert "docs/store-and-library.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    section = page.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) <= 12, "the documented example stays short"
    from tests.report.scene import store_scene

    db = tmp_path / "fleet.db"
    engine = open_engine(resolve(migrated_sqlite(db)))
    store_scene(engine)  # collected 2026-11-22: after the example's 2026-11-01
    engine.dispose()
    env = _env(tmp_path)
    env["FLEET_DB"] = str(db)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # The scene's truth: beta's GPUs 3% under alpha's (679 against 700 TFLOP/s).
    assert "beta is 3." in done.stdout and "% slower than alpha on H100 SXM5 80GB" in done.stdout
    medians = {line.split()[0]: float(line.split()[1]) for line in done.stdout.splitlines()
               if line.split()[:1] in (["alpha"], ["beta"]) and len(line.split()) == 2}
    assert medians["alpha"] == pytest.approx(700.0, rel=0.01)
    assert medians["beta"] == pytest.approx(679.0, rel=0.01)
    assert "straggler" in done.stdout and "mismatch" in done.stdout

"""One run, one story per GPU (issue 44, item 3; fleet/analysis/node/taint.py), through
`fleet ingest` and `fleet report` as a user runs them, on real documents with the case put
in (tests/fixtures/nodes/shared-gpu-runs/README.md says how each was made):

- a node suite 1.0.0 run of the lent 4x H200 whose GPU 3 matmul ran beside another
  user's pid: its pairs with GPU 3 (55%) and its all-reduce (38%), which had no process
  check of their own, go to the renter with the reason, and nothing of GPU 3 is disputed;
- a suite 1.1.0 run of the lent 2x H100 whose GPU 1 matmul ran beside another user's
  pid, and whose pair 0-1 (55%) was checked and seen clean: the pair keeps its own story
  and is disputed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fleet.cli import main
from tests.conftest import FIXTURES

RUNS = FIXTURES / "nodes" / "shared-gpu-runs"
OLD = "gpu3-shared-suite-1.0.json"  # host h200x4-gpu3-shared
CLEAN = "gpu1-shared-clean-pair-suite-1.1.json"  # host h100x2-gpu1-shared-clean-pair
REASON = ("GPU 3, pair 0-3, pair 1-3, pair 2-3, the all-reduce: measured in a run where "
          "GPU 3's matmul ran beside pid 4242 of user alice (no process check of its own)")


def fleet(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('taint') / 'fleet.db'}"
    fleet("ingest", "--db", url, "--provider", "lent", str(RUNS / OLD), str(RUNS / CLEAN))
    return url


def _report(url: str, tmp: Path, *extra: str) -> tuple[dict[str, Any], str]:
    fleet("report", "--db", url, "-o", str(tmp / "r.json"), *extra)
    fleet("report", "--db", url, "-o", str(tmp / "r.md"), *extra)
    return json.loads((tmp / "r.json").read_text()), (tmp / "r.md").read_text()


def _dispute_section(markdown: str) -> str:
    start = markdown.index("What to dispute")
    following = re.search(r"\n#+ ", markdown[start + 1:])
    return markdown[start:start + 1 + following.start()] if following else markdown[start:]


def test_the_run_s_figures_on_the_shared_gpu_go_to_the_renter_with_the_reason(
        store: str, tmp_path: Path) -> None:
    report, markdown = _report(store, tmp_path)
    old = [f for f in report["renter"] if f["title"].startswith("h200x4-gpu3-shared:")]
    assert len(old) == 1
    assert old[0]["kind"] == "contention" and old[0]["cause"] == "a process of another user"
    assert REASON in old[0]["details"]
    assert REASON in markdown
    # Nothing of GPU 3's run is the provider's: not its pairs, not its all-reduce.
    assert not [f for f in report["dispute"] if "h200x4-gpu3-shared" in f["title"]]
    assert "h200x4-gpu3-shared" not in _dispute_section(markdown)


def test_a_figure_with_its_own_clean_check_keeps_its_own_story(store: str,
                                                               tmp_path: Path) -> None:
    report, markdown = _report(store, tmp_path)
    clean = [f for f in report["dispute"]
             if f["title"].startswith("h100x2-gpu1-shared-clean-pair:")]
    assert [f["kind"] for f in clean] == ["shortfall"]
    assert "pair 0-1" in clean[0]["title"] and "55%" in clean[0]["title"]
    assert "h100x2-gpu1-shared-clean-pair: pair 0-1" in _dispute_section(markdown)
    # Its GPU 1 matmul is still the renter's, alone: the pair is not taken with it.
    [renter] = [f for f in report["renter"]
                if f["title"].startswith("h100x2-gpu1-shared-clean-pair:")]
    assert "GPU 1 matmul measured beside other work" in renter["title"]
    assert not any("measured in a run where" in line for line in renter["details"])


def test_an_anonymized_report_taints_the_same_figures_and_names_nobody(
        store: str, tmp_path: Path) -> None:
    report, markdown = _report(store, tmp_path, "--anonymize")
    tainted = [line for f in report["renter"] for line in f["details"]
               if "measured in a run where" in line]
    assert tainted == ["GPU 3, pair 0-3, pair 1-3, pair 2-3, the all-reduce: measured in "
                       "a run where GPU 3's matmul ran beside other work (no process check "
                       "of its own)"]
    assert "alice" not in markdown and "4242" not in markdown
    # The clean pair is still disputed, and only it.
    assert [f["kind"] for f in report["dispute"]] == ["shortfall"]

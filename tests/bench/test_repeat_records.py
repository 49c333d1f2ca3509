"""bench/repeat_records.py on the real records: the repeats it finds and the figures it
computes, checked against values read off the files by hand."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from agent.timing import repeat
from tests.bench import scripts

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "bench" / "records"
H100_SOAK = "2026-11-25-h100-soak-1752624020993"
H200_SOAK = "2026-11-25-h200-soak-1653724065387"
NODE = "2026-11-26-h200x4-node-probe"
PROBE_BENCH = "2026-11-26-h100-probe-bench-1753124019022"


rr = scripts.load("repeat_records")


@pytest.fixture(scope="module")
def groups() -> dict[tuple[str, str], list[Any]]:
    result: dict[tuple[str, str], list[Any]] = rr.by_card(rr.load_runs(RECORDS))
    return result


def test_the_repeats_found_and_those_left_out(groups: dict[tuple[str, str], list[Any]]
                                              ) -> None:
    found = {(record, card, runs[0].variant, rr.group_protocol(runs), len(runs))
             for (record, card), runs in groups.items()}
    h100, h200, quick = "H100-SXM5-80GB", "H200-SXM-141GB", "quick after a soak"
    assert found == {
        (H100_SOAK, "1752624020993", h100, "soaked (1.3.0)", 5),
        (H200_SOAK, "1653724065387", h200, "soaked (1.3.0)", 5),
        ("2026-11-24-h100-card21-1753024032041", "1753024032041", h100, quick, 5),
        ("2026-11-24-h100-card22-1652124095755", "1652124095755", h100, quick, 5),
        ("2026-11-24-h100-card23-1753124023371", "1753124023371", h100, quick, 5),
        ("2026-11-24-h100-card25-1652824196606", "1652824196606", h100, quick, 5),
        ("2026-11-24-h200-1653724064905", "1653724064905", h200, quick, 5),
        ("2026-11-24-h200-1653724066290", "1653724066290", h200, quick, 5),
        (NODE, "GPU-9704ed00-075a-c676-9113-b6194c17379a", h200, "together/alone", 2),
        (NODE, "GPU-45c1f5da-e0c4-77a2-ebe0-fcc3f73be564", h200, "together/alone", 2),
        (NODE, "GPU-a8837d60-c5ac-42cc-1db4-b63e6eddd5b0", h200, "together/alone", 2),
        (NODE, "GPU-5ce19102-f4ba-a768-65d7-f94027a24f14", h200, "together/alone", 2),
        # bench/device_repeat.sh's repeats with harness 1.4.0, after the catalog was fixed.
        ("2026-11-26-h100-repeat-1752824029521", "1752824029521", h100, "soaked (1.4.0)", 5),
        ("2026-11-26-h200-repeat-1653724033734", "1653724033734", h200, "soaked (1.4.0)", 5),
        (PROBE_BENCH, "1753124019022", h100, "probe (1.4.0)/bench (1.4.0)", 2),
    }
    records = {record for record, _ in groups}
    # Card 20 had no soak; cards 24 and 26 a 5-s one; 2026-11-23 none at all.
    assert not any("card20" in r or "card24" in r or "card26" in r for r in records)
    assert not any(r.startswith("2026-11-23") for r in records)
    # One harness run a GPU beside a graph reference: no repeat.
    assert "2026-11-26-h100x2-probe-reference" not in records


def test_a_probe_then_a_bench_of_one_card(groups: dict[tuple[str, str], list[Any]]) -> None:
    # The probe's result from the store it made; the bench's from its printed row,
    # "0     675.3  662-688 674.4-676.3 669.8 +0.8%  68.3% 78 s 66 1350 697".
    probe, bench = groups[(PROBE_BENCH, "1753124019022")]
    assert (probe.protocol, bench.protocol) == ("probe (1.4.0)", "bench (1.4.0)")
    assert probe.result["tflops"] == 662.1308225432957 and len(probe.result["samples_ms"]) == 12230
    assert rr.work_over_time(probe) == pytest.approx(662.1308, abs=1e-3)
    assert rr.work_over_time(bench) == 675.3 and rr.trimmed(bench) is None
    assert (probe.temperature_c, bench.temperature_c) == (77.0, 66.0)
    assert bench.flop == probe.flop == 2 * 8192**3


def test_the_catalog_is_its_records_pooled(groups: dict[tuple[str, str], list[Any]]) -> None:
    # Each of agent/timing/repeat.py's SPREADS is what its named records give, to its rounding,
    # and every record it names was found.
    again = rr.catalog_spreads(groups, repeat.SPREADS)
    assert set(again) == set(repeat.SPREADS)
    for variant, stated in repeat.SPREADS.items():
        assert again[variant].records == tuple(sorted(stated.records))
        assert again[variant].dof == stated.dof
        assert again[variant].sd == pytest.approx(stated.sd, abs=5e-6)
    assert {v: (s.sd, s.dof) for v, s in repeat.SPREADS.items()} == {
        "H100-SXM5-80GB": (0.00571, 9), "H200-SXM-141GB": (0.00188, 12)}


def test_the_h100_soak_check(groups: dict[tuple[str, str], list[Any]]) -> None:
    runs = groups[(H100_SOAK, "1752624020993")]
    assert [r.order for r in runs] == [0, 1, 2, 3, 4]
    assert {(r.harness_version, r.result["thermal"]) for r in runs} == {("1.3.0", "soaked")}
    assert runs[0].result["tflops"] == 676.9187126688488
    assert [r.temperature_c for r in runs] == [73.0, 70.0, 68.0, 76.0, 74.0]
    # Work over time, from the file itself rather than through the loader.
    with gzip.open(RECORDS / H100_SOAK / "soak.json.gz", "rt") as handle:
        raw = json.load(handle)
    expected = [2 * 8192**3 / statistics.fmean(r["result"]["samples_ms"]) / 1e9
                for r in raw["runs"]]
    assert [rr.work_over_time(r) for r in runs] == pytest.approx(expected, rel=1e-12)
    assert expected[0] == pytest.approx(677.0195, abs=1e-3)
    assert rr.trimmed(runs[0]) == pytest.approx(676.9187126688488, rel=1e-12)


def test_the_h200_soak_check_and_a_soaked_1_2_0_card(
        groups: dict[tuple[str, str], list[Any]]) -> None:
    h200 = groups[(H200_SOAK, "1653724065387")]
    assert h200[0].result["tflops"] == 668.5045928337119
    assert [r.temperature_c for r in h200] == [70.0, 68.0, 65.0, 71.0, 66.0]
    card21 = groups[("2026-11-24-h100-card21-1753024032041", "1753024032041")]
    assert card21[0].harness_version == "1.2.0"
    assert [r.result["tflops"] for r in card21] == [
        679.3898652117933, 679.9027323834036, 680.0495609051595, 680.7265209081405,
        681.9201224271571]
    assert [r.temperature_c for r in card21] == [72.0, 72.0, 72.0, 71.0, 71.0]


def test_a_node_pair_runs_together_then_alone(groups: dict[tuple[str, str], list[Any]]
                                              ) -> None:
    pair = groups[(NODE, "GPU-9704ed00-075a-c676-9113-b6194c17379a")]
    assert [(r.protocol, r.result["tflops"]) for r in pair] == [
        ("together", 663.1592110956057), ("alone", 665.2590972751989)]
    assert [r.result["concurrency"] for r in pair] == ["concurrent", "sequential"]


def test_pooled_spread_and_its_degrees_of_freedom(groups: dict[tuple[str, str], list[Any]]
                                                  ) -> None:
    pooled = rr.pooled(groups)
    dof = {key: d for key, (_, d, _) in pooled.items()}
    assert dof == {("H100-SXM5-80GB", "soaked (1.3.0)"): 4,
                   ("H200-SXM-141GB", "soaked (1.3.0)"): 4,
                   ("H100-SXM5-80GB", "quick after a soak"): 16,
                   ("H200-SXM-141GB", "quick after a soak"): 8,
                   ("H200-SXM-141GB", "together/alone"): 4,
                   ("H100-SXM5-80GB", "soaked (1.4.0)"): 4,
                   ("H200-SXM-141GB", "soaked (1.4.0)"): 4,
                   ("H100-SXM5-80GB", "probe (1.4.0)/bench (1.4.0)"): 1}
    # One card: the pooled sd is that card's own sd relative to its mean.
    runs = groups[(H100_SOAK, "1752624020993")]
    own = rr.relative_sd([rr.work_over_time(r) for r in runs])
    assert pooled[("H100-SXM5-80GB", "soaked (1.3.0)")][0] == pytest.approx(own, rel=1e-9)

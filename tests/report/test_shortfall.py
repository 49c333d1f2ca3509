"""One node judged alone against what a healthy node of its variant gives (issue 38,
fleet/analysis/node/shortfall.py, the catalog of fleet/expected.py): the lent 4x H200 node's
own document, stored through the real ingest path, raises nothing as it measured; with
its all-reduce at 7% (NCCL without peer-to-peer: 23.9 GB/s where the node gives 354), a
lost NVLink link or a slow memory copy, one finding naming the expected figure and the
records; a variant without records is judged on its datasheet share; a contended figure
is left to the contention finding."""

from __future__ import annotations

import copy
import datetime as dt
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import Engine

from fleet.analysis.dataset import Config, GpuMeasure
from fleet.analysis.node.figures import prepare
from fleet.analysis.node.shortfall import (
    DATASHEET,
    RECORDS,
    ShortfallOptions,
    find_matmul_shortfalls,
    find_shortfalls,
)
from fleet.expected import (
    CATALOG,
    H200X2_SUITE,
    H200X4_PROBE,
    H200X4_SUITE,
    Catalog,
    FigureKey,
    GiB,
    MiB,
    build,
)
from fleet.model.document import parse_document
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.node import read_node_results
from tests.bench import scripts
from tests.conftest import FIXTURES

H200X4 = FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json"
H200 = "H200-SXM-141GB"


def _document() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(H200X4).read_text())
    return data


def _scale(data: dict[str, Any], factor: float, kind: str,
           gpus: tuple[int, ...] | None = None) -> dict[str, Any]:
    """`data` with the figures of `kind` (of the GPUs or pairs `gpus` where given) scaled
    by `factor`, samples and statistics alike, as an agent would have measured them."""
    data = copy.deepcopy(data)
    for result in data["node"]:
        ends = (result["gpu_index"], result["peer_index"])
        if result["kind"] != kind or (gpus is not None and ends[:len(gpus)] != gpus
                                      and ends != gpus):
            continue
        stats = result["stats"]
        for key in ("median_gbs", "min_gbs", "max_gbs"):
            stats[key] = round(stats[key] * factor, 3)
        stats["samples_gbs"] = [round(v * factor, 3) for v in stats["samples_gbs"]]
        if stats.get("ci95_gbs"):
            stats["ci95_gbs"] = [round(v * factor, 3) for v in stats["ci95_gbs"]]
        result["gbs"] = stats["median_gbs"]
        if result.get("algbw_gbs"):
            result["algbw_gbs"] = round(result["algbw_gbs"] * factor, 3)
    return data


def _figures(engine: Engine, data: dict[str, Any], host: str = "gpu-01") -> pd.DataFrame:
    """`data` stored through the real ingest and read back as the report's frame."""
    document = parse_document(data, "test")
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(document, Origin("lent", host))
    return prepare(read_node_results(engine))


def test_the_healthy_lent_node_raises_nothing(engine: Engine) -> None:
    figures = _figures(engine, _document())
    # Memory, pinned host copies, both directions of six pairs and the all-reduce are
    # all judged against the records.
    assert find_shortfalls(figures) == []


def test_the_healthy_lent_node_against_a_catalog_without_its_own_record() -> None:
    catalog_script = scripts.load("expected_catalog")
    runs, _, observations = catalog_script.load(catalog_script.DEFAULT_RECORDS)
    without = Catalog(*build(o for o in observations if o.record != H200X4_PROBE))
    probe = [run for run in runs if run.record == H200X4_PROBE and run.document
             and run.document.get("node")]
    assert len(probe) == 1
    figures = prepare(catalog_script.node_frame(probe))
    assert find_shortfalls(figures, catalog=without) == []


def test_an_allreduce_at_seven_percent_is_one_finding_naming_the_records(
        engine: Engine) -> None:
    figures = _figures(engine, _scale(_document(), 0.07, "allreduce"))
    (found,) = find_shortfalls(figures)
    assert (found.figure, found.basis, found.host, found.variant) == (
        "all-reduce", RECORDS, "gpu-01", H200)
    assert found.indexes == ((),)
    assert found.config.size_bytes == GiB and found.config.gpus_in_run == 4
    assert found.gbs == pytest.approx(352.642 * 0.07, abs=0.01)
    assert found.entry is not None and found.expected_gbs == found.entry.gbs
    assert found.sources == (H200X4_PROBE, H200X4_SUITE)
    assert found.threshold == pytest.approx(0.90)
    assert found.cause is None
    assert found.title == (
        "gpu-01: all-reduce 24.7 GB/s, 7% of the 354 a healthy 4-GPU H200 SXM node gives "
        f"(records: {H200X4_PROBE}, {H200X4_SUITE})")
    assert "the median of 2 records" in found.evidence
    assert "the larger of the 10% floor and 4 x" in found.evidence


def test_a_lost_nvlink_link_and_a_slow_memory_are_found_on_their_units(
        engine: Engine) -> None:
    data = _scale(_scale(_document(), 17 / 18, "peer_copy", (2, 3)), 0.92, "memory_copy",
                  (1,))
    figures = _figures(engine, data)
    # The agent of suite 1.1.0 says how many links join the pair.
    lost = (figures["kind"] == "peer_copy") & (figures["gpu_index"] == 2) & (
        figures["peer_index"] == 3)
    figures = figures.assign(nvlink_links=pd.Series(18, index=figures.index, dtype=object)
                             .where(~lost, 17).where(figures["kind"] == "peer_copy", None))
    memory, pairs = find_shortfalls(figures)
    assert (memory.figure, memory.indexes) == ("memory", ((1,),))
    assert memory.title.startswith("gpu-01: GPU 1 memory copy 3,88")
    assert "a healthy H200 SXM GPU gives" in memory.title
    assert (pairs.figure, pairs.indexes) == ("pairs", ((2, 3), (2, 3)))
    assert pairs.title.startswith("gpu-01: pair 2-3 ")
    assert "a healthy H200 SXM pair over NVSwitch gives" in pairs.title
    assert "pair 2-3: 17 NVLink links where the records' pairs had 18" in pairs.evidence


def test_a_variant_without_records_is_judged_on_its_datasheet_share(engine: Engine) -> None:
    healthy = _figures(engine, _document(), "healthy")
    nameless = healthy.assign(variant="H200-NVL-141GB")
    assert find_shortfalls(nameless) == []
    slow = _figures(engine, _scale(_document(), 0.07, "allreduce"), "slow")
    (found,) = find_shortfalls(slow[slow["host"] == "slow"].assign(variant="H200-NVL-141GB"))
    assert (found.figure, found.basis, found.entry) == ("all-reduce", DATASHEET, None)
    assert found.expected_gbs == 450.0
    assert found.threshold == ShortfallOptions().allreduce_share == 0.40
    assert found.sources == ("the GPUs' one-way NVLink, else their slowest host link "
                             "(agent/gpu/links.py)",)
    assert found.title == ("slow: all-reduce 24.7 GB/s, 5% of its datasheet's 450 (no "
                           "records of a healthy H200-NVL-141GB at this configuration)")
    assert "called under 40% of it" in found.evidence


def test_a_contended_figure_is_skipped(engine: Engine) -> None:
    figures = _figures(engine, _scale(_document(), 0.07, "allreduce"))
    busy = figures.assign(contended=figures["kind"] == "allreduce")
    assert find_shortfalls(busy) == []
    # Without the flag the same figure is called.
    assert len(find_shortfalls(figures.assign(contended=False))) == 1


def test_a_host_copy_hostlink_calls_is_left_to_it(engine: Engine) -> None:
    # Half of what the link carries: fleet/analysis/node/hostlink.py's finding, not this one's.
    halved = _figures(engine, _scale(_document(), 0.5, "host_to_device", (0,)))
    assert find_shortfalls(halved) == []
    # 85% of the healthy figure: above hostlink's 70% of the link, below the records.
    slower = _figures(engine, _scale(_document(), 0.85, "host_to_device", (0,)), "gpu-02")
    (found,) = find_shortfalls(slower[slower["host"] == "gpu-02"])
    assert (found.figure, found.indexes) == ("host link", ((0,),))
    assert "a healthy H200 SXM GPU at Gen5 x16 gives" in found.title


def test_the_catalog_applies_by_link_and_fabric() -> None:
    pair = FigureKey(H200, "peer_copy", direction="one_way", size_bytes=512 * MiB)
    entry = CATALOG.lookup(pair)
    assert entry is not None and entry.key.nvlink_fabric == "switch"
    assert entry.records == (H200X2_SUITE, H200X4_PROBE, H200X4_SUITE)
    # A pair with a link lost is still judged; a direct board's pair is not a switch's,
    # nor one with more links than the records' pairs had.
    assert CATALOG.lookup(replace(pair, nvlink_links=17)) == entry
    assert CATALOG.lookup(replace(pair, nvlink_fabric="direct")) is None
    assert CATALOG.lookup(replace(pair, nvlink_links=36)) is None
    assert CATALOG.lookup(replace(pair, size_bytes=GiB)) is None
    host_copy = FigureKey(H200, "host_to_device", memory="pinned", size_bytes=256 * MiB)
    assert CATALOG.lookup(host_copy) is None  # a link not read is not compared
    assert CATALOG.lookup(replace(host_copy, link_gen=5, link_width=16)) is not None
    assert CATALOG.lookup(replace(host_copy, link_gen=4, link_width=16)) is None


def _measure(gpu: int, tflops: float, variant: str = H200) -> GpuMeasure:
    when = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
    config = Config("bf16", 8192, 8192, 8192, "sustained", "cold", "concurrent", "1.4.0",
                    "soaked", "torch 2.11.0+cu130, CUDA 13.0, cuBLAS 13.1.0")
    return GpuMeasure("lent", "gpu-01", f"uuid-{gpu}", gpu, variant, config, tflops, 1,
                      None, None, None, None, None, None, (), when, when, repeat_sd=0.002)


def test_a_soaked_matmul_below_a_healthy_gpu_is_called() -> None:
    healthy = [_measure(i, t) for i, t in enumerate((663.2, 668.9, 675.1, 666.8))]
    assert find_matmul_shortfalls(healthy) == []
    slow = [*healthy[:3], _measure(3, 630.0)]
    (found,) = find_matmul_shortfalls(slow)
    assert found.indexes == (3,) and found.entry.key.variant == H200
    assert found.title.startswith("gpu-01: GPU 3 matmul 630.0 TFLOP/s soaked, 94% of the "
                                  "669 a healthy H200 SXM GPU gives (records: ")
    # A variant without a soaked entry is not judged.
    assert find_matmul_shortfalls([_measure(0, 100.0, "B200-SXM-180GB")]) == []

"""The lent nodes' own documents (issue #32: a 4x H200 SXM node and a one-GPU H100 SXM5,
2026-11-26, bench/records/2026-11-26-*-node-*), stored through the real ingest path and
reported: a healthy node as it really measured must show its figures beside the
datasheet and raise no finding."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.model.document import parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.node import read_node_results
from tests.conftest import FIXTURES

NODES = FIXTURES / "nodes"


def _store(engine: Engine, case: str, host: str) -> None:
    path = NODES / case / "document.json"
    document = parse_document(json.loads(Path(path).read_text()), str(path))
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(document, Origin("lent", host))


def test_the_lent_nodes_are_stored_and_reported_without_a_finding(engine: Engine) -> None:
    _store(engine, "h200-sxm-x4-lent", "h200x4")
    _store(engine, "h100-sxm5-lent", "h100")
    figures = read_node_results(engine)
    # Four GPUs: 4 memory + 16 host copies + 6 pairs x 2 + 4 all-reduce sizes; one GPU: 5.
    assert figures.groupby("host", observed=True).size().to_dict() == {"h100": 5,
                                                                       "h200x4": 36}
    report = build_report(engine, ReportOptions(), "test")
    counts = report.counts()
    assert {k: counts[k] for k in ("hostlink", "peer", "straggler", "gap", "health")} == {
        "hostlink": 0, "peer": 0, "straggler": 0, "gap": 0, "health": 0}
    text = render(report, "md")
    # As the lent node measured (bench/RESULTS.md, "The whole node").
    assert "4,220 GB/s, 88% of 4,800" in text
    assert "3,006 GB/s, 90% of 3,350" in text
    assert "yes (NVLINK)" in text
    assert "353 GB/s, 78% of 450 (4 GPUs, 1 GiB)" in text
    assert "4 x 663.2 = 2652.6 (GPU 0)" in text


def _eight_from_four(slow_pair: tuple[int, int] | None = None) -> dict[str, Any]:
    """No eight-GPU kind is lent: the 4x H200 node's own document made eight GPUs wide.
    GPUs 4-7 are GPUs 0-3 again under new UUIDs and bus ids (their fingerprints, matmul
    results and per-GPU figures), each of the 28 pairs takes the figures of the real pair
    of the same GPUs modulo 4 (GPUs 0 and 4 the real 0-1 pair's), and the all-reduce is
    the real node's with eight ranks. `slow_pair` has its copies' figures 10% lower."""
    data: dict[str, Any] = json.loads(
        (NODES / "h200-sxm-x4-lent" / "document.json").read_text())
    data["host"]["hostname"] = "h200x8-simulated"
    gpus, results = list(data["gpus"]), list(data["benchmarks"])
    uuids = {g["index"]: g["uuid"] for g in gpus}
    for gpu in data["gpus"]:
        twin = copy.deepcopy(gpu)
        twin["index"] = gpu["index"] + 4
        twin["uuid"] = uuids[twin["index"]] = gpu["uuid"][:-4] + f"{twin['index']:04d}"
        twin["pci_bus_id"] = gpu["pci_bus_id"][:-4] + f"{twin['index'] + 16:02x}.0"
        gpus.append(twin)
    for result in data["benchmarks"]:
        twin = copy.deepcopy(result)
        twin["gpu_index"] += 4
        twin["gpu_uuid"] = uuids[twin["gpu_index"]]
        twin["gpus_in_run"] = 8
        results.append(twin)
    for result in results:
        result["gpus_in_run"] = 8
    node = []
    pairs = {(r["gpu_index"], r["peer_index"], r["direction"]): r for r in data["node"]
             if r["kind"] == "peer_copy"}
    for result in data["node"]:
        if result["kind"] in ("memory_copy", "host_to_device", "device_to_host"):
            for index in (result["gpu_index"], result["gpu_index"] + 4):
                node.append({**result, "gpu_index": index, "gpu_uuid": uuids[index]})
        elif result["kind"] == "allreduce":
            node.append({**result, "gpus_in_run": 8})
    for a in range(8):
        for b in range(a + 1, 8):
            low, high = sorted((a % 4, b % 4))
            real = (low, high) if low != high else (0, 1)
            for direction in ("one_way", "both_ways"):
                figure = copy.deepcopy(pairs[(real[0], real[1], direction)])
                figure.update(gpu_index=a, gpu_uuid=uuids[a], peer_index=b,
                              peer_uuid=uuids[b])
                if (a, b) == slow_pair:
                    stats = figure["stats"]
                    for key in ("median_gbs", "min_gbs", "max_gbs"):
                        stats[key] = round(stats[key] * 0.9, 3)
                    stats["samples_gbs"] = [round(v * 0.9, 3) for v in stats["samples_gbs"]]
                    stats["ci95_gbs"] = [round(v * 0.9, 3) for v in stats["ci95_gbs"]]
                    figure["gbs"] = stats["median_gbs"]
                node.append(figure)
    data.update(gpus=gpus, benchmarks=results, node=node)
    data["system"]["gpu_count"] = 8
    return data


@pytest.mark.parametrize("slow_pair", [None, (2, 6)])
def test_eight_gpus_simulated_from_the_lent_node(engine: Engine,
                                                 slow_pair: tuple[int, int] | None) -> None:
    document = parse_document(_eight_from_four(slow_pair), "simulated 8x H200")
    assert len(document.gpus) == 8 and len(document.node) == 8 * 5 + 28 * 2 + 4
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(document, Origin("lent", "h200x8"))
    report = build_report(engine, ReportOptions(), "test")
    found = [(f.kind, f.title) for f in report.dispute]
    if slow_pair is None:
        assert found == []
    else:
        # One pair of 28 10% below what a healthy H200 pair gives (fleet/expected.py):
        # one finding, which says so; the same pair as a straggler of its node would be
        # the same fault twice.
        [(kind, title)] = found
        assert kind == "shortfall"
        assert title.startswith("h200x8: pair 2-6 ")
        assert "90% of the 394 a healthy H200 SXM pair over NVSwitch gives" in title

"""A short pair's copy or host copy measured again without the run's settings that can
move it (agent/rerun/links.py): its floors against the catalog's, on the CPU path
with a real child process, and through the node suite as the agent runs it."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  CI installs the CPU build: a missing torch must fail there
else:
    pytest.importorskip("torch")

from agent import suites
from agent.node import floors
from agent.node import suite as node
from agent.rerun import links as links_rerun
from agent.source import settings
from fleet.analysis.node.shortfall import ShortfallOptions
from fleet.expected import CATALOG, FigureKey
from fleet.model.document import parse_document

H100 = "H100-SXM5-80GB"
BLOCKING = [{"name": "CUDA_LAUNCH_BLOCKING", "value": "1", "source": "environment",
             "applies": True}]
PAIR: dict[str, Any] = {
    "kind": "peer_copy", "gpu_index": 0, "peer_index": 1, "direction": "one_way",
    "size_bytes": 512 << 20, "nvlink_links": 18, "nvlink_fabric": "switch",
    "topology": "NVLINK", "datasheet_gbs": 450.0, "gbs": 396.0, "contention": []}
GEN5 = {"gen": 5, "width": 16, "gen_max": 5, "width_max": 16}
HOST: dict[str, Any] = {
    "kind": "host_to_device", "gpu_index": 1, "memory": "pinned", "size_bytes": 256 << 20,
    "link": GEN5, "datasheet_gbs": 63.02, "gbs": 55.0, "contention": [], "cpus": "0-3"}
VARIANTS = {0: H100, 1: H100}


def _report_floor(key: FigureKey) -> float:
    """What fleet/analysis/node/shortfall.py calls a figure of `key` short under."""
    entry = CATALOG.lookup(key)
    assert entry is not None
    return entry.gbs * (1.0 - ShortfallOptions().margin(key.kind, entry))


def test_the_committed_floors_are_the_reports_thresholds() -> None:
    table = floors.load()
    for direction in ("one_way", "both_ways"):
        figure = dict(PAIR, direction=direction)
        low, basis = links_rerun.floor(table, VARIANTS, figure) or (0.0, "")
        expected = _report_floor(FigureKey(H100, "peer_copy", direction=direction,
                                           size_bytes=512 << 20, nvlink_fabric="switch",
                                           nvlink_links=18))
        assert low == pytest.approx(expected, abs=0.001)
        assert basis.startswith(f"records: {'396.4' if direction == 'one_way' else '777.6'} "
                                "GB/s expected of a healthy H100-SXM5-80GB pair")
    # A pair that lost a link is judged against the full pair's figure, as the report does.
    lost = links_rerun.floor(table, VARIANTS, dict(PAIR, nvlink_links=17))
    assert lost is not None and lost[0] == pytest.approx(396.4 * 0.96, abs=0.001)
    for kind in ("host_to_device", "device_to_host"):
        low, _ = links_rerun.floor(table, VARIANTS, dict(HOST, kind=kind)) or (0.0, "")
        assert low == pytest.approx(_report_floor(FigureKey(
            H100, kind, memory="pinned", size_bytes=256 << 20, link_gen=5, link_width=16)),
            abs=0.001)


B200 = {"gpu_index": 2, "nvlink_links": None, "nvlink_fabric": None}


@pytest.mark.parametrize(("figure", "why"), [
    # The records are of pairs through NVSwitch: a direct-connect pair has its datasheet.
    (dict(PAIR, nvlink_fabric="direct", datasheet_gbs=150.0),
     "datasheet: called under 70% of 150 GB/s"),
    (dict(PAIR, **B200, datasheet_gbs=900.0), "datasheet: called under 70% of 900 GB/s"),
    (dict(PAIR, **B200, topology="SYS"), None),  # no PCIe pair judged by its datasheet
    (dict(HOST, memory="pageable"), None),  # pageable copies are not judged
    (dict(HOST, link=dict(GEN5, gen=4)), None),  # trained down: hostlink.py's finding
    (dict(HOST, link=dict(GEN5, gen=4, gen_max=4)), None),  # no records at Gen4
    (dict(HOST, gpu_index=2), None),  # no records of the variant, no datasheet rule
])
def test_a_figure_the_catalog_does_not_hold(figure: dict[str, Any], why: str | None
                                            ) -> None:
    found = links_rerun.floor(floors.load(), {**VARIANTS, 2: "B200"}, figure)
    assert (found[1] if found else None) == why


def test_decide_takes_out_what_moves_a_copy_where_one_is_short() -> None:
    table = floors.load()
    short_pair = dict(PAIR, gbs=360.0)
    short_host = dict(HOST, gbs=47.0)
    # Under 70% of what Gen5 x16 carries (44.1 GB/s) it is hostlink.py's, not a shortfall.
    slow_for_link = dict(HOST, gpu_index=0, gbs=40.0)
    figures = [short_pair, dict(PAIR, direction="both_ways", gbs=777.0), short_host,
               slow_for_link, dict(short_host, memory="pageable", gbs=7.0)]
    tree = {"name": "NCCL_ALGO", "value": "Tree", "source": "environment", "applies": True}
    plan = links_rerun.decide(figures, [*BLOCKING, tree], table, VARIANTS)
    assert plan is not None
    assert plan["without"] == ["CUDA_LAUNCH_BLOCKING"]  # NCCL's moves no copy
    assert plan["pairs"] == [(0, 1)] and plan["gpus"] == [1]
    assert sorted(plan["floors"]) == [("host_to_device", 1, "pinned"),
                                      ("peer_copy", 0, 1, "one_way")]
    # cuBLAS's setting moves no copy; nothing short; a contended figure is not judged.
    assert links_rerun.decide(figures, [dict(BLOCKING[0], name="CUBLAS_WORKSPACE_CONFIG")],
                              table, VARIANTS) is None
    assert links_rerun.decide([PAIR, HOST], BLOCKING, table, VARIANTS) is None
    seen = ["other processes on the GPU: pid 4242 (user alice, not the agent's user)"]
    assert links_rerun.decide([dict(short_pair, contention=seen),
                               dict(short_host, contention=seen)], BLOCKING, table,
                              VARIANTS) is None
    # /etc/nccl.conf's cannot be taken away (and moves no copy anyway).
    assert links_rerun.decide(figures, [dict(BLOCKING[0], source="nccl.conf:/etc/nccl.conf")],
                              table, VARIANTS) is None


def _cpu_table() -> dict[str, Any]:
    """Floors no CPU's RAM reaches, for the CPU path's figures (a pageable host copy
    with no link read, a pair's RAM copies): every copy is short."""
    cfg = node.Config.for_cpu()
    return {"memory_share": None, "memory_copy": [], "pair_share": None,
            "peer_copy": [{"variant": "None", "direction": d, "size_bytes": cfg.peer_bytes,
                           "nvlink_fabric": None, "nvlink_links": None,
                           "expected_gbs": 1e7, "floor_gbs": 1e6, "records": ["test"]}
                          for d in ("one_way", "both_ways")],
            "host_link_min_share": 0.7,
            "host_copy": [{"variant": "None", "kind": k, "memory": "pageable",
                           "size_bytes": cfg.host_bytes, "link_gen": None,
                           "link_width": None, "expected_gbs": 1e7, "floor_gbs": 1e6,
                           "records": ["test"]}
                          for k in ("host_to_device", "device_to_host")]}


def test_settle_measures_the_short_pair_and_host_copy_again_in_a_child() -> None:
    cfg = node.Config.for_cpu()
    pair = dict(PAIR, size_bytes=cfg.peer_bytes, nvlink_links=None, nvlink_fabric=None,
                gbs=1.0)
    host = dict(HOST, gpu_index=0, size_bytes=cfg.host_bytes, memory="pageable", link=None,
                datasheet_gbs=None, gbs=1.0, cpus=None)
    healthy = dict(pair, direction="both_ways", gbs=2e6)  # over its floor: left alone
    figures = [pair, healthy, host, dict(host, kind="device_to_host")]
    environ = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", NCCL_ALGO="Tree")
    said: list[str] = []
    failed = links_rerun.settle(figures, settings.collect(environ), _cpu_table(),
                                {0: "None", 1: "None"}, "cpu", cfg.repeats, said.append,
                                environ=environ)
    assert failed is None
    assert "rerun" not in healthy
    for figure in (pair, figures[2], figures[3]):
        again = figure["rerun"]
        assert again["without"] == ["CUDA_LAUNCH_BLOCKING"] and again["floor_gbs"] == 1e6
        assert "CUDA_LAUNCH_BLOCKING" not in again["ran_with"]
        assert "NCCL_ALGO" in again["ran_with"]  # only what moves a copy was taken out
        # Measured again in the child: its own samples, whatever this machine's copies
        # run at (a busy 2-core machine read 0.7 GB/s).
        assert len(again["samples_gbs"]) == cfg.repeats
        assert all(sample > 0 for sample in again["samples_gbs"])
        assert again["min_gbs"] <= again["gbs"] <= again["max_gbs"]
    assert said == [
        "node: link copies short (GPU 0 device to host (pageable) at 1 GB/s under 1e+06; "
        "GPU 0 host to device (pageable) at 1 GB/s under 1e+06; pair 0-1 one way at 1 GB/s "
        "under 1e+06): again without CUDA_LAUNCH_BLOCKING"]


def test_the_node_suite_measures_a_short_host_copy_again_without_the_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    said: list[str] = []
    cfg = node.Config.for_cpu()
    cfg.floors = _cpu_table()
    outcome = suites.run_node(cfg, [], None, said.append)
    copies = [f for f in outcome.results if f["kind"] in links_rerun.HOST_KINDS]
    assert len(copies) == 2 and not outcome.errors
    for figure in copies:
        assert figure["rerun"]["without"] == ["CUDA_LAUNCH_BLOCKING"]
        assert "CUDA_LAUNCH_BLOCKING" not in figure["rerun"]["ran_with"]
    assert any(s.startswith("node: link copies short (GPU 0 device to host (pageable) at ")
               for s in said)
    # The memory copy had no floor: not measured again.
    assert all("rerun" not in f for f in outcome.results if f["kind"] == "memory_copy")
    from agent.collect import collect

    document = collect(probe_torch=False)
    document["node"] = outcome.results
    parsed = parse_document(document, "the links rerun's document")
    stored = [r for r in parsed.node if r.kind in links_rerun.HOST_KINDS]
    assert [r.rerun.without for r in stored if r.rerun] == [["CUDA_LAUNCH_BLOCKING"]] * 2


def test_no_rerun_without_a_setting_or_with_rerun_off(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    cfg = node.Config.for_cpu()
    cfg.floors = _cpu_table()
    for key in [k for k in os.environ if settings.family_of(k) == "cuda"]:
        monkeypatch.delenv(key)
    outcome = suites.run_node(cfg, [], None, lambda _: None)  # nothing to take out
    assert all("rerun" not in f for f in outcome.results)
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    cfg.rerun = False
    outcome = suites.run_node(cfg, [], None, lambda _: None)
    assert all("rerun" not in f for f in outcome.results)


def test_a_rerun_that_fails_says_why_and_leaves_the_figures() -> None:
    environ = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    table = copy.deepcopy(_cpu_table())
    for entry in table["host_copy"]:
        entry["size_bytes"] = -1
    host = dict(HOST, gpu_index=0, size_bytes=-1, memory="pageable", link=None,
                datasheet_gbs=None, gbs=1.0, cpus=None)
    failed = links_rerun.settle([host], settings.collect(environ), table, {0: "None"}, "cpu",
                                2, lambda _: None, environ=environ)  # no tensor takes -1
    assert failed is not None and "exited" in failed
    assert "rerun" not in host

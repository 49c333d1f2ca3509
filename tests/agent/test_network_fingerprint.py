"""The network fingerprint (agent/network/) read from captures and published output: each
folder of tests/fixtures/network/ holds a `sys` tree and/or `text` outputs and the
`expected.json` written from the facts in its README row; adding a case is adding a
folder. Unit cases below pin the parsers on the published formats."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent.network import distance, gdr, sysfs, texts
from agent.network.fingerprint import SOURCES, network, replay
from fleet.model.network import NetworkFingerprint

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "network"
FOLDERS = sorted(p.name for p in CASES.iterdir() if (p / "expected.json").exists())


def fingerprint(case: str) -> dict[str, Any]:
    return network(str(CASES / case / "sys"), replay(str(CASES / case / "text")))


@pytest.mark.parametrize("case", FOLDERS)
def test_fixture_fingerprint(case: str) -> None:
    expected = json.loads((CASES / case / "expected.json").read_text())
    doc = fingerprint(case)
    NetworkFingerprint.model_validate(doc)  # the controller's model takes it as is
    assert doc["fabric_nics"] == expected["fabric_nics"]
    assert doc["gdr"]["state"] == expected["gdr"]
    assert len(doc["gpus"]) == expected["gpus"]
    by_name = {d["name"]: d for d in doc["devices"]}
    assert set(by_name) == set(expected["devices"])
    for name, fields in expected["devices"].items():
        got = {k: by_name[name][k] for k in fields}
        assert got == fields, name


def test_real_lent_node_has_no_fabric_and_reads_its_virtio_nic() -> None:
    doc = fingerprint("lent-h100-1x")
    eth0 = next(d for d in doc["devices"] if d["name"] == "eth0")
    # speed -1 in sysfs: unknown, never 0 or a guess
    assert eth0["rate_gbps"] is None and eth0["kind"] == "virtual"
    assert doc["gpus"] == [{"index": 0, "pci_address": "0000:00:06.0", "numa_node": 0}]
    assert doc["sources"] == ["topo", "modules", "uname"]


def test_live_root_with_real_symlinks(tmp_path: Path) -> None:
    # the same reader on a tree with real links, as /sys is
    net = tmp_path / "sys/class/net"
    dev = tmp_path / "sys/devices/pci0000:00/0000:00:02.0/0000:01:00.0"
    (dev / "net/ens1").mkdir(parents=True)
    (tmp_path / "sys/bus/pci/drivers/ice").mkdir(parents=True)
    for key, value in {"type": "1", "operstate": "up", "speed": "100000", "mtu": "9000"}.items():
        (dev / "net/ens1" / key).write_text(value + "\n")
    (dev / "numa_node").write_text("1\n")
    os.symlink(tmp_path / "sys/bus/pci/drivers/ice", dev / "driver")
    os.symlink(dev, dev / "net/ens1/device")
    net.mkdir(parents=True)
    os.symlink(dev / "net/ens1", net / "ens1")
    doc = network(str(tmp_path), lambda name: None)
    (ens1,) = doc["devices"]
    assert (ens1["kind"], ens1["rate_gbps"], ens1["pci_address"], ens1["numa_node"],
            ens1["driver"]) == ("ethernet", 100.0, "0000:01:00.0", 1, "ice")
    assert doc["sources"] == []


def test_replay_ignores_a_failed_tool(tmp_path: Path) -> None:
    (tmp_path / "ibstat.txt").write_text("ibpanic: no devices\n")
    (tmp_path / "ibstat.rc").write_text("1\n")
    (tmp_path / "ibv_devinfo.absent").write_text("absent\n")
    run = replay(str(tmp_path))
    assert [run(name) for name in SOURCES] == [None] * len(SOURCES)


@pytest.mark.parametrize("text, parsed", [
    ("400 Gb/sec (4X NDR)", (400.0, "4X", "NDR")),
    ("200 Gb/sec (4X HDR)", (200.0, "4X", "HDR")),
    ("100 Gb/sec (4X EDR)", (100.0, "4X", "EDR")),
    ("400", (400.0, None, None)),
    ("10 (FDR10)", (10.0, None, "FDR10")),
    ("fast", (None, None, None)),
    ("", (None, None, None)),
])
def test_rates(text: str, parsed: tuple[Any, ...]) -> None:
    assert texts.parse_rate(text) == parsed


def test_ibv_devinfo_rate_from_width_and_lane_speed() -> None:
    # rdma-core's ibv_devinfo -v port lines (active_width / active_speed)
    text = ("hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n"
            "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
            "\t\t\tactive_width:\t\t4X (2)\n\t\t\tactive_speed:\t\t100.0 Gbps (64)\n"
            "\t\t\tlink_layer:\t\tInfiniBand\n")
    (dev,) = texts.parse_ibv_devinfo(text)
    assert dev["firmware"] == "28.39.1002"
    assert dev["ports"] == [{"port": 1, "state": "Active", "link_layer": "InfiniBand",
                             "width": "4X", "rate_gbps": 400.0}]


def test_topo_without_legend_names_the_column() -> None:
    # older drivers head the NIC column with the device name (NVIDIA/nccl-tests#29)
    text = ("        GPU0    GPU1    mlx5_0  CPU Affinity\n"
            "GPU0     X      NV2     NODE    0-23,48-71\n"
            "GPU1    NV2      X      PIX     0-23,48-71\n")
    assert texts.parse_topo(text)["nics"] == {"mlx5_0": {0: "NODE", 1: "PIX"}}


def test_rdma_link_lines() -> None:
    text = ("link mlx5_0/1 state DOWN physical_state DISABLED netdev ens7f0np0\n"
            "link rxe0/1 state ACTIVE physical_state LINK_UP netdev ens3\n")
    assert [(x["device"], x["state"], x["netdev"]) for x in texts.parse_rdma_link(text)] == [
        ("mlx5_0", "DOWN", "ens7f0np0"), ("rxe0", "ACTIVE", "ens3")]


def test_fi_info_list_and_efa_domains() -> None:
    listed = texts.parse_fi_info("efa:\n    version: 120.0\ntcp:\n    version: 200.0\n")
    assert listed == {"providers": ["efa", "tcp"], "domains": []}
    domains = texts.parse_fi_info((CASES / "efa-p4d/text/fi_info_efa.txt").read_text())
    assert [texts.efa_device(d["domain"]) for d in domains["domains"]] == [
        "efa_0", "efa_1", "efa_2", "efa_3"]


@pytest.mark.parametrize("gpu, nic, numa, level", [
    # one PCIe switch: upstream port 01:00.0, downstream ports 02:00.0 / 02:01.0
    ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
     "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
     (0, 0), "PIX"),
    # two switches deep on one side
    ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/"
     "0000:04:00.0/0000:05:00.0",
     "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:06:00.0",
     (0, 0), "PXB"),
    # a VM's flat bus: both on the root bus (the lent node's GPU and virtio NIC)
    ("/sys/devices/pci0000:00/0000:00:06.0", "/sys/devices/pci0000:00/0000:00:03.0",
     (None, None), "PHB"),
    ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
     "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", (0, 0), "NODE"),
    ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
     "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", (0, 1), "SYS"),
    ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
     "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", (None, 1), None),
    ("/sys/devices/pci0000:00/0000:00:06.0", "/sys/devices/virtual/net/ifb0", (0, 0), None),
])
def test_sysfs_distance(gpu: str, nic: str, numa: tuple[Any, Any], level: str | None) -> None:
    assert distance.sysfs_distance(gpu, nic, numa[0], numa[1]) == level


@pytest.mark.parametrize("modules, kernel, flavour, state, dmabuf", [
    (["nvidia", "nvidia_peermem"], (5, 15), "proprietary", "on", "no"),
    (["nvidia", "nv_peer_mem"], None, None, "on", "unknown"),
    (["nvidia"], (6, 8), "open", "on", "possible"),
    (["nvidia"], (5, 4), "open", "off", "no"),
    (["nvidia"], (6, 8), "proprietary", "off", "no"),
    (["nvidia"], (6, 8), None, "unknown", "unknown"),
    (None, (6, 8), "proprietary", "unknown", "no"),
])
def test_gdr(modules: list[str] | None, kernel: tuple[int, int] | None, flavour: str | None,
             state: str, dmabuf: str) -> None:
    verdict = gdr.gdr(modules, kernel, flavour)
    assert (verdict["state"], verdict["dmabuf"]) == (state, dmabuf)


def test_nvidia_module_flavour() -> None:
    # the open modules' banner, as /proc/driver/nvidia/version prints it
    assert texts.parse_nvidia_module(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n"
    ) == "open"
    assert texts.parse_nvidia_module(
        (CASES / "h100-8x-ib-no-peermem/text/nvidia_version.txt").read_text()) == "proprietary"
    assert texts.parse_nvidia_module(None) is None


def test_capture_links_resolve_as_text() -> None:
    root = str(CASES / "lent-h100-1x/sys")
    assert sysfs.resolve(root, "/sys/class/net/eth0/device") == (
        "/sys/devices/pci0000:00/0000:00:03.0/virtio2")
    assert sysfs.resolve(root, "/sys/class/net/nothing") is None

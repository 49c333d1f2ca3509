"""The NVLink links a pair of GPUs really has (agent/gpu/nvlink.py, issue 38 item 4): NVML's
per-link far ends, the links that join each pair through NVSwitch or directly, the
datasheet figures built from them, and the GPU that lost a link.

Expected figures are written out by hand: links x 25 GB/s each way (NVLink 2-4; the
reference's "Links"), from the layouts the fixtures were built with
(tests/fixtures/gpus/README.md), never from the code under test.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agent.collect import collect
from agent.gpu import nvlink, variants
from agent.health import card as health
from agent.node import peers
from agent.node import suite as node
from agent.source.nvml import ReplayNvml
from fleet.model.document import Gpu, NodeResult
from tests.conftest import GPU_CASES, ROOT

DOWN = GPU_CASES / "h200-sxm-x4-nvlink-down"  # 4x H200 on NVSwitch, GPU 2 link 7 down
DIRECT = GPU_CASES / "a100-sxm4-x4-direct"  # 4x A100 SXM4, 4 links between every pair
OLD = GPU_CASES / "h200-sxm-x4-lent"  # the real recording, made before the remote calls


def fingerprints(folder: Path) -> list[dict[str, Any]]:
    gpus: list[dict[str, Any]] = collect(str(folder / "nvml-recording.json"),
                                         probe_torch=False)["gpus"]
    return gpus


def remote(link: int, bus: str | None, kind: str | None) -> dict[str, Any]:
    return {"link": link, "remote_bus_id": bus, "remote_type": kind}


def gpu(index: int, bus: str, remotes: list[dict[str, Any]] | None,
        architecture: str = "Hopper") -> dict[str, Any]:
    return {"index": index, "pci_bus_id": bus, "architecture": architecture,
            "nvlink_links_active": len(remotes or []), "nvlink_remotes": remotes,
            "pcie_gen_max": 5, "pcie_width_max": 16}


BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]


def switched(index: int, links: int = 18) -> dict[str, Any]:
    return gpu(index, BUS[index], [remote(n, "FFFFFFFF:FF:FF.0", "switch")
                                   for n in range(links)])


# --- what the pynvml calls are called -----------------------------------------------------

def test_the_calls_are_the_names_pynvml_gives_them() -> None:
    """nvidia-ml-py names the remote-PCI call without _v2 (it calls NVML's
    nvmlDeviceGetNvLinkRemotePciInfo_v2 inside); the live backend looks the name up."""
    import pynvml

    for name in (nvlink.STATE, nvlink.REMOTE_PCI, nvlink.REMOTE_TYPE):
        assert callable(getattr(pynvml, name)), name
    assert (pynvml.NVML_NVLINK_DEVICE_TYPE_GPU, pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU,
            pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH) == (0, 1, 2)


# --- reading ------------------------------------------------------------------------------

def test_an_old_recording_without_the_remote_calls_is_unknown_never_no_links() -> None:
    gpus = fingerprints(OLD)
    first = gpus[0]
    assert first["nvlink_links_active"] == 18 and len(first["nvlink_remotes"]) == 18
    assert first["nvlink_remotes"][0] == remote(0, None, None)
    # Noted once per call, not once per link.
    assert first["unavailable"]["nvmlDeviceGetNvLinkRemotePciInfo(0)"] == (
        "NVML_ERROR_FUNCTION_NOT_FOUND")
    assert first["unavailable"]["nvmlDeviceGetNvLinkRemoteDeviceType(0)"] == (
        "NVML_ERROR_FUNCTION_NOT_FOUND")
    assert not any(k.startswith(nvlink.REMOTE_PCI + "(1)") for k in first["unavailable"])
    assert nvlink.pair_links(gpus[0], gpus[1], gpus) == (None, None)
    assert nvlink.toward_ranks(gpus) is None
    # Today's figure, said to rest on an assumption.
    gbs, source = peers.pair_datasheet("NVLINK", gpus[0], gpus[1], gpus)
    assert gbs == 450.0 and source is not None and "assumed a switched board" in source
    gbs, source = node.allreduce_datasheet(["NVLINK"] * 6, gpus)
    assert gbs == 450.0 and source is not None and "assumed a switched board" in source


def test_a_document_from_before_the_far_ends_is_unknown_too() -> None:
    older = {k: v for k, v in switched(0).items() if k != "nvlink_remotes"}
    assert nvlink.pair_links(older, switched(1)) == (None, None)


def replay(device: dict[str, Any]) -> ReplayNvml:
    return ReplayNvml({"format": "nvml-recording/1", "source": "test", "system": {},
                       "devices": [device]})


def test_no_nvlink_at_all_is_known_and_an_unanswered_state_is_not() -> None:
    # A single SXM card passed into a VM: link 0 NOT_SUPPORTED, no NVLink.
    nvml = replay({"nvmlDeviceGetNvLinkState(0)": {"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}})
    unavailable: dict[str, str] = {}
    assert nvlink.read(nvml, nvml.device(0), unavailable) == ([], [])
    assert unavailable == {"nvmlDeviceGetNvLinkState(0)": "NVML_ERROR_NOT_SUPPORTED"}
    # A driver without the state call at all: NVML did not say.
    nvml = replay({})
    assert nvlink.read(nvml, nvml.device(0), {}) == ([], None)


def test_each_active_link_gets_its_far_end_and_an_inactive_one_is_not_asked() -> None:
    nvml = replay({
        "nvmlDeviceGetNvLinkState(0)": 1, "nvmlDeviceGetNvLinkState(1)": 0,
        "nvmlDeviceGetNvLinkState(2)": 1,
        "nvmlDeviceGetNvLinkState(3)": {"nvml_error": "NVML_ERROR_INVALID_ARGUMENT"},
        "nvmlDeviceGetNvLinkRemotePciInfo(0)": {"busId": "00000000:2A:00.0"},
        "nvmlDeviceGetNvLinkRemoteDeviceType(0)": 0,
        "nvmlDeviceGetNvLinkRemotePciInfo(2)": {"busId": "00000000:00:00.0"},
        "nvmlDeviceGetNvLinkRemoteDeviceType(2)": 255,  # NVML_NVLINK_DEVICE_TYPE_UNKNOWN
    })
    unavailable: dict[str, str] = {}
    states, remotes = nvlink.read(nvml, nvml.device(0), unavailable)
    assert states == [1, 0, 1]
    assert remotes == [remote(0, "00000000:2A:00.0", "gpu"),
                       remote(2, "00000000:00:00.0", None)]
    assert unavailable == {}


# --- pairs --------------------------------------------------------------------------------

def test_a_switched_pair_has_the_fewer_of_its_two_gpus_switch_links() -> None:
    assert nvlink.pair_links(switched(0), switched(1)) == (18, "switch")
    assert nvlink.pair_links(switched(0), switched(1, links=17)) == (17, "switch")
    gbs, source = peers.pair_datasheet("NVLINK", switched(0), switched(1, links=17))
    assert gbs == 425.0 and source is not None
    assert "17 links joining the pair through NVSwitch" in source


def test_a_direct_pair_has_only_its_share_of_the_links() -> None:
    gpus = fingerprints(DIRECT)
    for a in range(4):
        for b in range(a + 1, 4):
            assert nvlink.pair_links(gpus[a], gpus[b], gpus) == (4, "direct")
            # The two alone tell it too: every far end names its type.
            gbs, source = peers.pair_datasheet("NVLINK", gpus[a], gpus[b])
            assert gbs == 100.0 and source is not None  # 4 x 25, not 12 x 25
            assert "4 links joining the pair directly" in source


def test_a_link_whose_far_end_nvml_did_not_name_leaves_the_pair_unknown() -> None:
    # A far end that is no GPU of the node and of no type NVML named: a switch hidden
    # from a VM, or a GPU the VM does not hold. Not guessed.
    first = gpu(0, BUS[0], [remote(0, BUS[1], "gpu"), remote(1, "00000000:99:00.0", None)])
    second = gpu(1, BUS[1], [remote(0, BUS[0], "gpu")])
    assert nvlink.pair_links(first, second) == (None, None)
    # The same far end with its type named (a GPU outside the node) is no link of this pair.
    first["nvlink_remotes"][1]["remote_type"] = "gpu"
    assert nvlink.pair_links(first, second) == (1, "direct")
    # And a link to a third GPU of the node, of no named type, is known once the node is.
    third = gpu(2, "00000000:99:00.0", [remote(0, BUS[0], None)])
    first["nvlink_remotes"][1]["remote_type"] = None
    assert nvlink.pair_links(first, second) == (None, None)
    assert nvlink.pair_links(first, second, [first, second, third]) == (1, "direct")


def test_nvml_saying_no_link_joins_a_pair_is_zero() -> None:
    passed_through = gpu(0, BUS[0], [])  # one SXM card alone in a VM
    assert nvlink.pair_links(passed_through, switched(1)) == (0, None)
    # P2P over NVLink said yes, the links say none: no figure rather than a guess.
    assert peers.pair_datasheet("NVLINK", passed_through, switched(1)) == (None, None)


def test_the_host_link_only_where_the_path_is_known_to_be_pcie() -> None:
    gbs, source = peers.pair_datasheet("NODE", switched(0), switched(1))
    assert gbs == 63.02 and source is not None and source.startswith("through the host")
    assert peers.pair_datasheet(None, switched(0), switched(1)) == (None, None)
    assert peers.pair_datasheet("SAME", switched(0), switched(1)) == (None, None)


def test_a_gpu_that_lost_a_link_gets_its_pairs_share_and_a_verdict() -> None:
    gpus = fingerprints(DOWN)
    assert [g["nvlink_links_active"] for g in gpus] == [18, 18, 17, 18]
    assert nvlink.pair_links(gpus[0], gpus[1], gpus) == (18, "switch")
    assert nvlink.pair_links(gpus[0], gpus[2], gpus) == (17, "switch")
    assert peers.pair_datasheet("NVLINK", gpus[1], gpus[2], gpus)[0] == 425.0
    assert gpus[2]["health"]["verdict"] == "degraded"
    assert gpus[2]["health"]["reasons"] == [
        "NVLink: 17 of 18 links active (H200-SXM-141GB carries 18)"]
    assert [g["health"]["verdict"] for g in gpus] == ["healthy", "healthy", "degraded",
                                                     "healthy"]
    for one in gpus:
        Gpu.model_validate(one)


# --- the all-reduce -------------------------------------------------------------------------

def test_the_all_reduce_is_held_to_the_slowest_gpus_links_toward_the_ranks() -> None:
    down = fingerprints(DOWN)
    gbs, source = node.allreduce_datasheet(["NVLINK"] * 6, down)
    assert gbs == 425.0 and source is not None and source.startswith("GPU 2: 17 links")
    # Two of the four as the ranks: each still sends over all its switch links.
    assert node.allreduce_datasheet(["NVLINK"], down[:2])[0] == 450.0
    direct = fingerprints(DIRECT)
    # Each GPU's 12 links all lead to the other three ranks: 12 x 25.
    assert node.allreduce_datasheet(["NVLINK"] * 6, direct)[0] == 300.0
    # Two ranks of the four: only the 4 links between them count.
    assert node.allreduce_datasheet(["NVLINK"], direct[:2])[0] == 100.0


# The DGX-1 with V100 as NCCL wrote its links (NVIDIA/nccl issue #671, GPU 0 of the
# hybrid cube-mesh): one link to 07, one to 0a, two to 0b and two to 85, six in all; a
# 4-rank run of 06, 07, 0a and 0b has GPU 0 reach its ranks over 4 of them.
DGX1 = ["0000:06:00.0", "0000:07:00.0", "0000:0a:00.0", "0000:0b:00.0"]


def test_a_direct_board_whose_pairs_are_partly_on_pcie_counts_the_links_to_the_ranks() -> None:
    gpu0 = gpu(0, DGX1[0], [remote(0, DGX1[1], "gpu"), remote(1, DGX1[2], "gpu"),
                            remote(2, DGX1[3], "gpu"), remote(3, DGX1[3], "gpu"),
                            remote(4, "0000:85:00.0", "gpu"), remote(5, "0000:85:00.0", "gpu")],
               architecture="Volta")
    others = [gpu(i, DGX1[i], [remote(0, DGX1[0], "gpu")], architecture="Volta")
              for i in (1, 2, 3)]
    assert nvlink.toward_ranks([gpu0, *others]) == [(4, 0), (1, 0), (1, 0), (1, 0)]
    # The three others each reach GPU 0 over 1 link here: 25 GB/s is the slowest.
    paths = ["NVLINK", "NVLINK", "NVLINK", "SYS", "SYS", "SYS"]
    gbs, source = node.allreduce_datasheet(paths, [gpu0, *others])
    assert gbs == 25.0 and source is not None and "GPU 1: 1 link toward" in source


def test_a_path_nvml_did_not_tell_leaves_the_all_reduce_without_a_figure() -> None:
    gpus = fingerprints(DOWN)
    assert node.allreduce_datasheet(["NVLINK", None, "NVLINK", "NVLINK", "NVLINK",
                                     "NVLINK"], gpus) == (None, None)
    assert node.allreduce_datasheet([], gpus) == (None, None)
    # Every pair through the host: the slowest host link, as before.
    assert node.allreduce_datasheet(["SYS"] * 6, gpus)[0] == 63.02


def test_a_gpu_with_no_link_to_the_other_ranks_sends_through_the_host() -> None:
    lone = gpu(1, BUS[1], [])
    gbs, source = node.allreduce_datasheet(["SYS"], [switched(0), lone])
    assert gbs == 63.02
    gbs, source = node.allreduce_datasheet(["NVLINK", "SYS", "SYS"],
                                           [switched(0), switched(2), lone])
    assert gbs == 63.02 and source is not None
    assert source.startswith("GPU 1 has no NVLink toward the other ranks")


# --- the pair figure's fields -------------------------------------------------------------

def test_the_pair_figure_carries_its_links_and_fabric() -> None:
    stats = {"runs": 1, "median_gbs": 390.0, "min_gbs": 390.0, "max_gbs": 390.0, "cv": 0.0,
             "ci95_gbs": None, "samples_gbs": [390.0]}
    figure = {"suite_version": "1.0.0", "kind": "peer_copy", "gpu_index": 0,
              "gpu_uuid": None, "peer_index": 2, "direction": "one_way",
              "size_bytes": 1 << 29, "gpus_in_run": 1, "backend": "cuda", "gbs": 390.0,
              "counted": "copied, one way", "stats": stats, "topology": "NVLINK",
              "nvlink_links": 17, "nvlink_fabric": "switch", "datasheet_gbs": 425.0,
              "datasheet_source": "x", "timing_method": "cuda events",
              "torch_version": None, "cuda_runtime_version": None, "wall_s": 1.0}
    assert NodeResult.model_validate(figure).nvlink_links == 17
    with pytest.raises(ValueError):
        NodeResult.model_validate({**figure, "nvlink_fabric": "pcie"})


# --- the verdict ----------------------------------------------------------------------------

@pytest.mark.parametrize(("links", "verdict", "reasons"), [
    (health.NvLinks(17, 18, "H100-SXM5-80GB"), "degraded",
     ["NVLink: 17 of 18 links active (H100-SXM5-80GB carries 18)"]),
    (health.NvLinks(18, 18, "H100-SXM5-80GB"), "healthy", []),
    # A single SXM card passed into a VM shows no link at all: not called.
    (health.NvLinks(0, 18, "H100-SXM5-80GB"), "healthy", []),
    # A variant whose count the catalog does not know: not judged.
    (health.NvLinks(4, None, "H100-NVL-94GB"), "healthy", []),
    (None, "healthy", []),
], ids=["one-down", "all", "none-visible", "count-unknown", "not-given"])
def test_fewer_links_than_the_variant_carries_is_degraded(
        links: health.NvLinks | None, verdict: str, reasons: list[str]) -> None:
    counters = {"ecc": {"corrected_volatile": 0, "uncorrected_volatile": 0,
                        "corrected_aggregate": 0, "uncorrected_aggregate": 0,
                        "by_location": {}},
                "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                                  "failure": False},
                "retired_pages": None, "pcie_replays": 0, "pcie_replays_during_run": None,
                "pcie_gen_load": None, "pcie_width_load": None, "throttle_ns": {},
                "energy_mj": None, "xid": None}
    assert health.judge(counters, nvlink=links) == (verdict, reasons)


def test_the_verdict_after_load_keeps_the_missing_link() -> None:
    folder = DOWN
    nvml = ReplayNvml.from_file(str(folder / "nvml-recording.json"))
    before = fingerprints(folder)[2]["health"]
    after = health.update_after_load(before, nvml, nvml.device(2), 5, 16)
    assert after["verdict"] == "degraded"
    assert after["reasons"] == ["NVLink: 17 of 18 links active (H200-SXM-141GB carries 18)"]


# --- the catalog ----------------------------------------------------------------------------

@pytest.mark.parametrize(("label", "links"), [
    ("H100-SXM5-80GB", 18), ("H200-SXM-141GB", 18), ("A100-SXM4-80GB", 12),
    ("A100-SXM4-40GB", 12), ("V100-SXM2-32GB", 6), ("V100-SXM2-16GB", 6),
    ("B200-SXM-180GB", 18),
    # Not verified, or links from optional bridges: unknown.
    ("H100-NVL-94GB", None), ("H100-PCIe-80GB", None), ("A100-PCIe-80GB", None),
    ("H100-SXM5-94GB", None), ("H800-SXM5-80GB", None), ("A800-SXM4-80GB", None),
    ("GH200-96GB", None),
])
def test_the_catalog_says_how_many_links_a_variant_carries(label: str,
                                                           links: int | None) -> None:
    row = next(r for r in variants.CATALOG if r.label == label)
    assert row.nvlink_links == links
    assert (row.nvlink_source is not None) == (links is not None)


def test_a_vgpu_slice_carries_no_boards_links() -> None:
    sxm = variants.classify_variant(0x233010DE, "NVIDIA H100 80GB HBM3", "passthrough")
    assert variants.nvlink_links(sxm) == 18
    guest = variants.classify_variant(0x233010DE, "NVIDIA H100XM-80C", "vgpu")
    assert variants.nvlink_links(guest) is None
    unknown = variants.classify_variant(0x999910DE, "NVIDIA H100 80GB HBM3", "passthrough")
    assert variants.nvlink_links(unknown) is None


# --- recordings -----------------------------------------------------------------------------

def test_a_recording_carries_the_far_ends_and_replays_them(tmp_path: Path) -> None:
    out = tmp_path / "again.json"
    first = collect(str(DIRECT / "nvml-recording.json"), record_path=str(out),
                    probe_torch=False)
    recorded = json.loads(out.read_text())["devices"][0]
    assert recorded["nvmlDeviceGetNvLinkRemoteDeviceType(5)"] == 0
    assert recorded["nvmlDeviceGetNvLinkRemotePciInfo(5)"]["busId"] == "00000000:85:00.0"
    assert collect(str(out), probe_torch=False)["gpus"] == first["gpus"]


PY38_CHECK = """
import json, sys
from agent.gpu import nvlink
from agent.node import peers
from agent.node import suite as node
from agent.source.nvml import ReplayNvml
nvml = ReplayNvml.from_file(sys.argv[1])
gpus = []
for i in range(4):
    states, remotes = nvlink.read(nvml, nvml.device(i), {})
    bus = nvml.call(nvml.device(i), "nvmlDeviceGetPciInfo_v3")["busId"]
    gpus.append({"index": i, "pci_bus_id": bus, "architecture": "Ampere",
                 "nvlink_links_active": sum(states), "nvlink_remotes": remotes})
print(json.dumps([nvlink.pair_links(gpus[0], gpus[1], gpus),
                  peers.pair_datasheet("NVLINK", gpus[0], gpus[1])[0],
                  node.allreduce_datasheet(["NVLINK"] * 6, gpus)[0]]))
"""


def test_python38_counts_the_same(python38: str) -> None:
    done = subprocess.run([python38, "-c", PY38_CHECK, str(DIRECT / "nvml-recording.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[4, "direct"], 100.0, 300.0]

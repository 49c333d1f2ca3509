"""Node-suite frames with a known truth, for the node analyses alone (no store): rows in
fleet.store.node.NODE_COLUMNS, typed as `read_node_results` types them.

Healthy figures are the lent nodes' (issue 32, docs/design.md): HBM copy 3,010 GB/s on H100
SXM (datasheet 3,350) and 4,251 on H200 (4,800); pinned host copies 55.2-55.5 GB/s on
PCIe Gen5 x16 (63.02); pairs 394.5-396 GB/s one way (450) and 768-771 both ways (900);
all-reduce bus bandwidth 329-361 GB/s at 1-2 GiB. Spreads are drawn per node (its
platform, cooling, NCCL's run) and per GPU or pair on top.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import pandas as pd

from fleet.frames import frame
from fleet.store.node import NODE_COLUMNS, node_stack

MiB = 1 << 20
GiB = 1 << 30
WHEN = dt.datetime(2026, 11, 26, 3, 0, tzinfo=dt.UTC)
VARIANTS = {"H100 SXM5 80GB": (3010.0, 3350.0), "H200 SXM 141GB": (4251.0, 4800.0)}


@dataclass
class Node:
    """One node's healthy figures and the faults put into it."""

    provider: str
    host: str
    document_id: int
    gpus: int = 4
    variant: str = "H100 SXM5 80GB"
    memory_gbs: float | None = None  # default: the variant's
    pinned_gbs: float = 55.35
    pageable_gbs: float = 12.0
    one_way_gbs: float = 395.2
    both_ways_gbs: float = 769.5
    busbw_gbs: float = 361.5
    link: tuple[int, int] = (5, 16)  # under load
    link_max: tuple[int, int] = (5, 16)
    peer_access: bool = True
    topology: str = "NVLINK"
    gpu_sd: float = 0.0  # relative, per GPU or pair figure
    node_sd: float = 0.0  # relative, one draw shared by the node's figures of a kind
    busbw_sd: float = 0.0  # relative, the node's all-reduce
    gpu_scale: dict[int, float] = field(default_factory=dict)  # memory and host link
    memory_scale: dict[int, float] = field(default_factory=dict)
    link_scale: float = 1.0  # every host copy (an IOMMU, a vGPU layer)
    pair_scale: dict[tuple[int, int], float] = field(default_factory=dict)
    gpu_link: dict[int, tuple[int, int]] = field(default_factory=dict)  # one GPU's link
    # (peer access, NVML path) of some pairs, where they differ from the node's.
    pair_path: dict[tuple[int, int], tuple[bool, str]] = field(default_factory=dict)
    nccl: str = "2.28.9"


def _base(node: Node, nccl: str | None) -> dict[str, Any]:
    """The values every figure of `node` shares (with `nccl`, its all-reduce's)."""
    torch, cuda = "2.9.0", "12.8"
    return {"id": 0, "document_id": node.document_id, "run": 1, "collected_at": WHEN,
            "provider": node.provider, "provider_id": 1, "host": node.host,
            "host_id": node.document_id, "sweep": None, "variant": node.variant,
            "gpu_index": None, "gpu_uuid": None, "gpu_id": None, "peer_index": None,
            "peer_uuid": None, "peer_gpu_id": None, "direction": None, "memory": None,
            "gpus_in_run": 1, "backend": "cuda", "dtype": None, "algbw_gbs": None, "runs": 10,
            "cv": 0.001, "peer_access": None, "topology": None, "link_gen": None,
            "link_width": None, "link_gen_max": None, "link_width_max": None,
            "datasheet_source": None, "suite_version": "1.0.0", "torch_version": torch,
            "cuda_runtime_version": cuda, "nccl_version": nccl,
            "stack": node_stack(torch, cuda, nccl), "wall_s": 0.5, "contended": False,
            "contention": None, "numa_node": None, "transport": None, "nccl_settings": None,
            "nvlink_links": None, "nvlink_fabric": None, "rerun_gbs": None,
            "rerun_without": None, "rerun_kept": None, "rerun_floor_gbs": None,
            "rerun_transport": None}


def _row(base: dict[str, Any], **values: Any) -> dict[str, Any]:
    gbs = values["gbs"]
    return {**base, "min_gbs": gbs, "max_gbs": gbs, "ci95_low_gbs": gbs,
            "ci95_high_gbs": gbs, **values}


def node_rows(node: Node, rng: random.Random) -> list[dict[str, Any]]:
    """Every figure of the node suite for `node`, drawn with its spreads."""
    # A variant named "H100 SXM5 80GB #3" is H100's: many draws fit in one frame as
    # variants of their own.
    healthy_memory, memory_sheet = VARIANTS[node.variant.split(" #")[0]]
    memory = node.memory_gbs or healthy_memory

    def drawn(centre: float, shared: float) -> float:
        return centre * (1.0 + shared + rng.gauss(0.0, node.gpu_sd))

    shared = {kind: rng.gauss(0.0, node.node_sd) for kind in ("memory", "link", "pair")}
    base = _base(node, None)
    rows = []
    carries = {4: 31.5 / 16, 5: 63.02 / 16}
    for gpu in range(node.gpus):
        scale = node.gpu_scale.get(gpu, 1.0)
        gen, width = node.gpu_link.get(gpu, node.link)
        rows.append(_row(base, kind="memory_copy", gpu_index=gpu, size_bytes=GiB,
                         gbs=drawn(memory, shared["memory"]) * scale
                         * node.memory_scale.get(gpu, 1.0),
                         datasheet_gbs=memory_sheet, datasheet_source="catalog"))
        # Copies move what the negotiated link carries, at the healthy 88%.
        link_share = carries[gen] * width / 63.02
        for memory_kind, centre in (("pinned", node.pinned_gbs),
                                    ("pageable", node.pageable_gbs)):
            for kind in ("host_to_device", "device_to_host"):
                rows.append(_row(
                    base, kind=kind, gpu_index=gpu, memory=memory_kind, size_bytes=256 * MiB,
                    gbs=drawn(centre, shared["link"]) * scale * node.link_scale * link_share,
                    link_gen=gen, link_width=width, link_gen_max=node.link_max[0],
                    link_width_max=node.link_max[1], datasheet_gbs=63.02,
                    datasheet_source="PCIe Gen5 x16"))
    for a in range(node.gpus):
        for b in range(a + 1, node.gpus):
            scale = node.pair_scale.get((a, b), 1.0)
            access, path = node.pair_path.get((a, b), (node.peer_access, node.topology))
            for direction, centre, sheet in (("one_way", node.one_way_gbs, 450.0),
                                             ("both_ways", node.both_ways_gbs, 900.0)):
                rows.append(_row(
                    base, kind="peer_copy", gpu_index=a, peer_index=b, direction=direction,
                    size_bytes=512 * MiB, gbs=drawn(centre, shared["pair"]) * scale,
                    peer_access=access, topology=path,
                    datasheet_gbs=sheet, datasheet_source="18 x NVLink 4"))
    if node.gpus >= 2:
        busbw = node.busbw_gbs * (1.0 + rng.gauss(0.0, node.busbw_sd))
        for size, value in ((16 * MiB, busbw * 0.7), (GiB, busbw)):
            rows.append(_row(_base(node, node.nccl), kind="allreduce", size_bytes=size,
                             gbs=value, algbw_gbs=value * node.gpus / (2 * (node.gpus - 1)),
                             gpus_in_run=node.gpus, backend="nccl", dtype="bf16",
                             datasheet_gbs=450.0, datasheet_source="18 x NVLink 4"))
    return rows


def node_frame(nodes: list[Node], seed: int = 0) -> pd.DataFrame:
    """The figures of `nodes`, as `read_node_results` would hand them out."""
    rng = random.Random(seed)
    rows = [row for node in nodes for row in node_rows(node, rng)]
    for i, row in enumerate(rows):
        row["id"] = i + 1
    # itemgetter reads a row's values in the columns' order at C speed: the many-draw
    # tests build frames of 800,000 figures.
    values = itemgetter(*(c.name for c in NODE_COLUMNS))
    return frame(NODE_COLUMNS, [values(row) for row in rows])


def gpu_frame(nodes: list[Node], form_factor: str = "SXM", architecture: str = "Hopper",
              nvlink_links: int = 18) -> pd.DataFrame:
    """The fingerprint columns the peer rule reads, one row per GPU of `nodes`."""
    return pd.DataFrame([{"document_id": n.document_id, "gpu_index": i,
                          "form_factor": form_factor, "architecture": architecture,
                          "nvlink_links_total": nvlink_links}
                         for n in nodes for i in range(n.gpus)])


def fleet_of(provider: str, hosts: int, first_id: int, **knobs: Any) -> list[Node]:
    """`hosts` nodes of `provider`, documents numbered from `first_id`."""
    return [Node(provider, f"{provider}-{h:02d}", first_id + h, **knobs) for h in range(hosts)]

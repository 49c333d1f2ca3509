"""The node suite's figures (fleet-agent/1 `node`) for a factory document, from a few knobs.

Shaped as agent/node/suite.py measures them: per GPU a 1 GiB memory copy (2 GiB counted) and
256 MiB host-link copies both ways, pinned and pageable; per pair of GPUs (lower index
first) one way and both ways at once; and, from two GPUs on, an NCCL all-reduce over
16 MiB to 1 GiB whose figure is the bus bandwidth. Each figure is the median of its own
samples, so a stored row can be checked against the numbers it was made from.

    data = factory.document(gpus=4)
    data["node"] = node_factory.node_results(data, memory_gbs=3010.0)
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping
from typing import Any

from fleet.model.document import AgentDocument, NodeResult

MiB = 1 << 20
GiB = 1 << 30
ALLREDUCE_SIZES = (16 * MiB, 64 * MiB, 256 * MiB, GiB)
STACK = {"torch_version": "2.9.0", "cuda_runtime_version": "12.8"}
NCCL = "2.28.9"
# H100 SXM: HBM3 3.35 TB/s; PCIe Gen5 x16 about 64 GB/s a way; 18 NVLink 4 at 25 GB/s a
# way each (shared/reference/gpu-variants.md, "Links").
DATASHEET = {"memory_copy": 3350.0, "host": 63.015, "nvlink": 450.0}


def bandwidth(samples_gbs: list[float]) -> dict[str, Any]:
    """The Bandwidth record of these samples, as agent/node/bandwidth.py builds it."""
    ordered = sorted(samples_gbs)
    mean = math.fsum(samples_gbs) / len(samples_gbs)
    stdev = statistics.stdev(samples_gbs) if len(samples_gbs) > 1 else 0.0
    middle = len(ordered) // 2
    return {"runs": len(samples_gbs), "median_gbs": statistics.median(samples_gbs),
            "min_gbs": ordered[0], "max_gbs": ordered[-1], "cv": stdev / mean,
            "ci95_gbs": [ordered[max(0, middle - 2)], ordered[min(len(ordered) - 1,
                                                                  middle + 2)]],
            "samples_gbs": samples_gbs}


def figure(kind: str, gbs: float, rng: random.Random, *, gpu: Mapping[str, Any] | None,
           size_bytes: int, counted: str, runs: int = 10, noise: float = 0.002,
           datasheet_gbs: float | None = None, datasheet_source: str | None = None,
           **fields: Any) -> dict[str, Any]:
    """One NodeResult whose median is about `gbs` (`noise` is the repeats' spread)."""
    # To the MB/s, as the agent rounds them.
    samples = [round(gbs * (1.0 + rng.gauss(0.0, noise)), 3) for _ in range(runs)]
    stats = bandwidth(samples)
    result: dict[str, Any] = {
        "suite_version": "1.0.0", "kind": kind,
        "gpu_index": None if gpu is None else gpu["index"],
        "gpu_uuid": None if gpu is None else gpu["uuid"],
        "size_bytes": size_bytes, "gpus_in_run": 1, "backend": "cuda",
        "gbs": stats["median_gbs"], "counted": counted, "stats": stats,
        "datasheet_gbs": datasheet_gbs,
        "datasheet_source": datasheet_source if datasheet_gbs is not None else None,
        "timing_method": "cuda-events-per-copy", **STACK, "wall_s": 0.8,
    }
    result.update(fields)
    return result


def node_results(document: Mapping[str, Any], *, seed: int = 0, memory_gbs: float = 3010.0,
                 pinned_gbs: float = 55.2, pageable_gbs: float = 12.0,
                 peer_gbs: float = 396.0, both_ways_gbs: float = 771.0,
                 busbw_gbs: Mapping[int, float] | None = None,
                 gpu_scale: Mapping[int, float] | None = None,
                 pair_scale: Mapping[tuple[int, int], float] | None = None,
                 peer_access: bool = True, topology: str = "NVLINK",
                 link: tuple[int, int] = (5, 16), runs: int = 10,
                 noise: float = 0.002) -> list[dict[str, Any]]:
    """Every figure of the node suite for the document's GPUs, validated.

    `gpu_scale[i]` scales GPU i's memory and host-link figures, `pair_scale[(a, b)]` the
    pair's (a < b); `link` is the PCIe generation and width the host link ran at under
    load (the cards support Gen5 x16); `busbw_gbs` the all-reduce's bus bandwidth by
    size (default: 251 GB/s at 16 MiB rising to 361.5 at 1 GiB, the 4x H100 node's)."""
    rng = random.Random(f"node/{document['host']['hostname']}/{seed}")
    gpus = sorted(document["gpus"], key=lambda g: g["index"])
    busbw = dict(busbw_gbs or {16 * MiB: 251.0, 64 * MiB: 300.0, 256 * MiB: 340.0,
                               GiB: 361.5})
    results: list[dict[str, Any]] = []
    for gpu in gpus:
        scale = (gpu_scale or {}).get(gpu["index"], 1.0)
        state = {"gen": link[0], "width": link[1], "gen_max": 5, "width_max": 16}
        results.append(figure(
            "memory_copy", memory_gbs * scale, rng, gpu=gpu, size_bytes=GiB,
            counted="read + written (2 x size)", runs=runs, noise=noise,
            datasheet_gbs=DATASHEET["memory_copy"], datasheet_source="H100 SXM5 datasheet"))
        for memory, gbs in (("pinned", pinned_gbs), ("pageable", pageable_gbs)):
            for kind in ("host_to_device", "device_to_host"):
                results.append(figure(
                    kind, gbs * scale, rng, gpu=gpu, size_bytes=256 * MiB, counted="copied",
                    runs=runs, noise=noise, datasheet_gbs=DATASHEET["host"],
                    datasheet_source="PCIe Gen5 x16", memory=memory, link=state))
    for a, first in enumerate(gpus):
        for second in gpus[a + 1:]:
            scale = (pair_scale or {}).get((first["index"], second["index"]), 1.0)
            common = {"peer_index": second["index"], "peer_uuid": second["uuid"],
                      "peer_access": peer_access, "topology": topology}
            results.append(figure(
                "peer_copy", peer_gbs * scale, rng, gpu=first, size_bytes=512 * MiB,
                counted="copied, one way", runs=runs, noise=noise,
                datasheet_gbs=DATASHEET["nvlink"], datasheet_source="18 x NVLink 4",
                direction="one_way", **common))
            results.append(figure(
                "peer_copy", both_ways_gbs * scale, rng, gpu=first, size_bytes=512 * MiB,
                counted="copied each way at once, both summed (2 x size)", runs=runs,
                noise=noise, datasheet_gbs=2 * DATASHEET["nvlink"],
                datasheet_source="twice one way (18 x NVLink 4)", direction="both_ways",
                **common))
    ranks = len(gpus)
    if ranks >= 2:
        for size, gbs in sorted(busbw.items()):
            result = figure("allreduce", gbs, rng, gpu=None, size_bytes=size,
                            counted="bus bandwidth (nccl-tests)", runs=runs, noise=noise,
                            datasheet_gbs=DATASHEET["nvlink"],
                            datasheet_source="18 x NVLink 4", gpus_in_run=ranks,
                            backend="nccl", dtype="bf16", nccl_version=NCCL)
            result["algbw_gbs"] = result["gbs"] * ranks / (2 * (ranks - 1))
            results.append(result)
    for result in results:
        NodeResult.model_validate(result)
    return results


def with_node(document: dict[str, Any], **knobs: Any) -> dict[str, Any]:
    """`document` with its node suite's figures (`node_results`' knobs), validated."""
    document["node"] = node_results(document, **knobs)
    AgentDocument.model_validate(document)
    return document

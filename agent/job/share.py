"""What share of the GPU's own memory copy a decode step read, from the same run.

A decode step at the bandwidth point reads its weights and cache once and does little
else: the memory system sets its time. Its GB/s beside the datasheet's HBM figure mixes
two gaps, the card's (a device copy of 1 GiB reads 88-90% of the datasheet on lent H100s
and H200s) and the step's own (small kernels, launch, the attention kernel). Beside the
node suite's memory copy of the same GPU in the same run, it says the step's alone: the
H200's decode edge over an H100 should follow their copies' ratio, and where it does not,
this share says the step, not the memory, holds it back (issue 45).

Standard library only: this runs on the GPU host.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional


def set_copy_shares(jobs: List[Dict[str, Any]], node: List[Dict[str, Any]]) -> None:
    """Each decode result's `copy_gbs` and `copy_share` from the memory copy the node
    suite measured on its GPU in this run; left None where there is none, or where the
    copy was measured beside other work (its figure is not the card's)."""
    copies: Dict[int, float] = {}
    for figure in node:
        if figure.get("kind") != "memory_copy" or figure.get("gpu_index") is None:
            continue
        if figure.get("contention"):
            continue
        copies[int(figure["gpu_index"])] = float(figure["gbs"])
    for result in jobs:
        gbs: Optional[float] = result.get("gbs")
        copy = copies.get(int(result["gpu_index"]))
        if result.get("workload") != "decode" or not gbs or not copy:
            continue
        result["copy_gbs"] = copy
        result["copy_share"] = gbs / copy

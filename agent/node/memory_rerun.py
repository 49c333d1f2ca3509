"""Whose a short memory copy is, settled by measuring it again (DESIGN.md, "Judging one
node"; issue 44), as agent/node/rerun.py settles the all-reduce.

A GPU's memory copy is short where it falls under its floor (agent/node/floors.json
"memory_copy": the catalog's figure of its variant at the size, less the larger of 5% and
four times the records' sd; without an entry, `memory_share` of its datasheet's HBM
bandwidth), the same threshold the report calls it by (fleet/analysis/node/shortfall.py).

Where a short GPU ran under settings that can move a copy (CUDA_*: agent/source/
settings.py), its memory copy runs again in a child process whose environment lacks
them, and the rerun's figure goes on the original's `rerun`. One figure, not a pair as
the matmul's: a memory copy moves with the HBM clock alone, hot or cool (3,003-3,008 GB/s
on every H100 SXM5 lent, 4,220-4,249 on every H200), so a card that had cooled between
the two reads the same. The caller watches the GPUs around it: another process there
drops the rerun.

On a healthy node this costs nothing. On a short one: the child's start (torch's
import, CUDA's context, NVML's read of the GPUs: seconds) and one copy of 1 GiB a repeat.
"""

import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent import child
from agent.node import bandwidth
from agent.source import settings as run_settings

MAX_NAMES = 64
MAX_BASIS = 512
RESULT_PREFIX = "fleet-memory-rerun "
TIMEOUT_S = 120.0


def floor(table: Dict[str, Any], variant: Optional[str], figure: Dict[str, Any]
          ) -> Optional[Tuple[float, str]]:
    """(floor GB/s, what it rests on) for a memory copy; None where nothing judges it."""
    size = int(figure["size_bytes"])
    fitting = [e for e in table.get("memory_copy", ())
               if (e.get("variant"), e.get("size_bytes")) == (variant, size)]
    if fitting:
        low = min(fitting, key=lambda e: float(e["floor_gbs"]))
        return (float(low["floor_gbs"]),
                f"records: {float(low['expected_gbs']):g} GB/s expected of a healthy "
                f"{variant} ({len(low.get('records', ()))} records), called under "
                f"{float(low['floor_gbs']):g}")
    share, sheet = table.get("memory_share"), figure.get("datasheet_gbs")
    if share and sheet:
        return (round(float(share) * float(sheet), 3),
                f"datasheet: called under {float(share):.0%} of {float(sheet):g} GB/s")
    return None


def decide(figures: Sequence[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variants: Dict[int, str]) -> Optional[Dict[str, Any]]:
    """What a rerun would take out and measure: {"without", "gpus", "floors" (each short
    GPU's (floor, basis))}; None where no memory copy is short, or no setting that can
    move one may be taken out."""
    short: Dict[int, Tuple[float, str]] = {}
    for figure in figures:
        if figure.get("kind") != "memory_copy" or figure.get("gpu_index") is None:
            continue
        index = int(figure["gpu_index"])
        found = floor(table, variants.get(index), figure)
        if found is not None and float(figure["gbs"]) < found[0]:
            short[index] = (found[0], found[1][:MAX_BASIS])
    if not short:
        return None
    taken = sorted({str(s["name"]) for s in run_settings.suspects(recorded, "memory_copy")
                    if run_settings.removable(s)})[:MAX_NAMES]
    if not taken:
        return None
    return {"without": taken, "gpus": sorted(short), "floors": short}


def settle(figures: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variants: Dict[int, str], device: str, size: int,
           repeats: int, progress: Callable[[str], None],
           environ: Optional[Dict[str, str]] = None, timeout_s: float = TIMEOUT_S
           ) -> Optional[str]:
    """Copy the short GPUs' memory again without the settings `decide` names, in a child
    process, and put each figure on its original's `rerun`. Returns why it could not be
    done (the figures then stand alone, and the controller calls them unsettled)."""
    if child.in_child():
        return None
    plan = decide(figures, recorded, table, variants)
    if plan is None:
        return None
    judged: Dict[int, Tuple[float, str]] = plan["floors"]
    under = "; ".join(f"GPU {f['gpu_index']} at {float(f['gbs']):g} GB/s under "
                      f"{judged[int(f['gpu_index'])][0]:g}" for f in figures
                      if f.get("kind") == "memory_copy" and f.get("gpu_index") is not None
                      and int(f["gpu_index"]) in judged)
    progress(f"node: memory copy short ({under}): again without "
             f"{', '.join(plan['without'])}")
    spec = {"device": device, "gpus": plan["gpus"], "size": size, "repeats": repeats}
    report, failed, wall = child.run("agent.node.memory_rerun:child_main", spec,
                                     plan["without"], RESULT_PREFIX, timeout_s, environ)
    if report is None:
        return failed
    again = {int(f["gpu_index"]): f for f in report["figures"] if f.get("gpu_index") is not None}
    ran_with = report["ran_with"]
    for figure in figures:
        if figure.get("kind") != "memory_copy" or figure.get("gpu_index") is None:
            continue
        index = int(figure["gpu_index"])
        other = again.get(index)
        if index not in judged or other is None:
            continue
        record = other["stats"]
        figure["rerun"] = {
            "without": plan["without"], "kept": [],
            "floor_gbs": judged[index][0], "floor_basis": judged[index][1],
            "gbs": record["median_gbs"], "min_gbs": record["min_gbs"],
            "max_gbs": record["max_gbs"], "samples_gbs": record["samples_gbs"],
            "algbw_gbs": None, "transports": None, "ran_with": ran_with[:MAX_NAMES],
            "wall_s": wall}
    return None


def child_main(argv: List[str]) -> int:
    """The rerun's child: each named GPU's memory copy, the figures on one line."""
    from agent.collect import collect
    from agent.matmul.harness import Config, import_torch, match_targets
    from agent.node import memory

    spec = json.loads(argv[0])
    cuda = spec["device"] == "cuda"
    # The GPUs as NVML names them, so that each figure carries its GPU's index and UUID.
    gpus = collect(probe_torch=False)["gpus"] if cuda else []
    torch = import_torch()
    stack = bandwidth.Stack(torch)
    figures: List[Dict[str, Any]] = []
    for target in match_targets(torch, Config(device=spec["device"], gpus=spec["gpus"]),
                                gpus, None):
        device = torch.device(f"cuda:{target.index}" if cuda else "cpu")
        stream = torch.cuda.Stream(device) if cuda else None
        figures.append(memory.measure(torch, device, stream, target.fingerprint(gpus),
                                      int(spec["size"]), stack, int(spec["repeats"])))
    child.reply(RESULT_PREFIX, {"figures": figures})
    return 0 if figures else 3

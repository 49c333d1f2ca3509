"""Whose a short memory copy is, settled by measuring it again (docs/reruns.md; issue 44),
as agent/rerun/allreduce.py settles the all-reduce.

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

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent.matmul.harness import Config, import_torch, match_targets
from agent.node import bandwidth, memory
from agent.rerun import child
from agent.rerun.bounds import MAX_BASIS, MAX_NAMES, TIMEOUT_S
from agent.rerun.protocol import Plan, Rerun
from agent.source import settings as run_settings


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


class MemoryRerun(Rerun):
    """The short GPUs' memory copies again in a child."""

    kind = "memory"

    def __init__(self, figures: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
                 table: Dict[str, Any], variants: Dict[int, str], device: str, size: int,
                 repeats: int) -> None:
        self.figures, self.recorded, self.table = figures, recorded, table
        self.variants, self.device, self.size, self.repeats = variants, device, size, repeats

    def _copies(self) -> List[Dict[str, Any]]:
        return [f for f in self.figures
                if f.get("kind") == "memory_copy" and f.get("gpu_index") is not None]

    def plan(self) -> Optional[Plan]:
        return decide(self.figures, self.recorded, self.table, self.variants)

    def said(self, plan: Plan) -> str:
        judged: Dict[int, Tuple[float, str]] = plan["floors"]
        under = "; ".join(f"GPU {f['gpu_index']} at {float(f['gbs']):g} GB/s under "
                          f"{judged[int(f['gpu_index'])][0]:g}" for f in self._copies()
                          if int(f["gpu_index"]) in judged)
        return f"node: memory copy short ({under}): again without {', '.join(plan['without'])}"

    def spec(self, plan: Plan) -> Dict[str, Any]:
        return {"device": self.device, "gpus": plan["gpus"], "size": self.size,
                "repeats": self.repeats}

    def place(self, plan: Plan, answer: Dict[str, Any], wall: float) -> None:
        judged: Dict[int, Tuple[float, str]] = plan["floors"]
        again = {int(f["gpu_index"]): f for f in answer["figures"]
                 if f.get("gpu_index") is not None}
        for figure in self._copies():
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
                "algbw_gbs": None, "transports": None,
                "ran_with": answer["ran_with"][:MAX_NAMES], "wall_s": wall}


def settle(figures: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variants: Dict[int, str], device: str, size: int,
           repeats: int, progress: Callable[[str], None],
           environ: Optional[Dict[str, str]] = None,
           timeout_s: float = TIMEOUT_S["memory"]) -> Optional[str]:
    """Copy the short GPUs' memory again without the settings `decide` names, in a child
    process, and put each figure on its original's `rerun`. Returns why it could not be
    done (the figures then stand alone, and the controller calls them unsettled)."""
    return MemoryRerun(figures, recorded, table, variants, device, size, repeats
                       ).settle(progress, environ, timeout_s)


@child.measures("memory")
def measure(spec: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
    """The child: each named GPU's memory copy, as the node suite copies it."""
    cuda = spec["device"] == "cuda"
    nvml, gpus = child.gpus_here() if cuda else (None, [])
    if nvml is not None:
        nvml.close()
    torch = import_torch()
    stack = bandwidth.Stack(torch)
    figures: List[Dict[str, Any]] = []
    for target in match_targets(torch, Config(device=spec["device"], gpus=spec["gpus"]),
                                gpus, None):
        device = torch.device(f"cuda:{target.index}" if cuda else "cpu")
        stream = torch.cuda.Stream(device) if cuda else None
        figures.append(memory.measure(torch, device, stream, target.fingerprint(gpus),
                                      int(spec["size"]), stack, int(spec["repeats"])))
    return {"figures": figures}, bool(figures)

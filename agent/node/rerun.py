"""Whose a short all-reduce is, settled by measuring it again (DESIGN.md, "Judging one
node"): where the figure at the largest size falls under the floor the controller calls
it short by (agent/node/floors.py) and the run's settings hold some that can move it
(agent/source/settings.py), the all-reduce runs again in the same run with those taken out
of its ranks' environment. Both figures go in the document: the rerun on each size's
figure (`rerun`), with what was taken out, what stayed and why.

What stays: what fleet keeps as found in every process it starts (NVLink multicast
switches: the lent machines turn multicast off, and it must stay off), and a setting of
/etc/nccl.conf, which NCCL reads whatever the environment says. The controller names
both in its finding.

On a healthy node this costs nothing: no rerun. On a short one, one more all-reduce over
the same sizes: the ranks' start (torch's import, NCCL's init: seconds) and the sizes'
iterations (at 7% of a healthy H200 node's 354 GB/s, 1 GiB takes 70 ms a step, 25 steps).
"""

import os
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from agent.node import bandwidth, collective, floors
from agent.source import settings as run_settings


def decide(figures: Sequence[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variant: Optional[str], ranks: int
           ) -> Optional[Dict[str, Any]]:
    """What a rerun would take out and why: {"without", "kept", "floor_gbs",
    "floor_basis"}; None where the largest size is not short, nothing judges it, or no
    setting that can move it may be taken out."""
    if not figures:
        return None
    largest = max(figures, key=lambda f: int(f["size_bytes"]))
    floor = floors.allreduce_floor(table, variant, ranks, int(largest["size_bytes"]),
                                   str(largest.get("dtype")), str(largest["backend"]),
                                   largest.get("datasheet_gbs"))
    if floor is None or float(largest["gbs"]) >= floor[0]:
        return None
    movers = [s for s in recorded
              if s.get("applies") and run_settings.moves(str(s["name"]), "allreduce")]
    taken = sorted({str(s["name"]) for s in movers
                    if not run_settings.kept(str(s["name"])) and run_settings.removable(s)})
    if not taken:
        return None
    stayed = sorted({str(s["name"]) for s in movers} - set(taken))
    return {"without": taken, "kept": stayed, "floor_gbs": floor[0],
            "floor_basis": floor[1][:512]}


def settle(figures: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variant: Optional[str], devices: Sequence[Optional[int]],
           backend: str, sizes: Sequence[int], timeout_s: float, warmup: int,
           iterations: int, progress: Callable[[str], None],
           environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    """Run the all-reduce again without the settings `decide` names, where it names
    some, and put each size's figure on the original's `rerun`. Returns why the rerun
    failed (the originals then stand alone, and the controller calls them unsettled),
    else None."""
    plan = decide(figures, recorded, table, variant, len(devices))
    if plan is None:
        return None
    progress(f"node: all-reduce short ({max(figures, key=lambda f: f['size_bytes'])['gbs']:g}"
             f" GB/s under {plan['floor_gbs']:g}): again without {', '.join(plan['without'])}")
    base = dict(os.environ if environ is None else environ)
    started = time.monotonic()
    with tempfile.NamedTemporaryFile("w", prefix="fleet-empty-", suffix=".conf") as empty:
        env = run_settings.without(base, recorded, plan["without"], empty.name)
        try:
            rows, seen = collective.run(devices, backend, sizes, timeout_s, warmup,
                                        iterations, env=env)
        except (collective.CollectiveError, OSError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"[:4000]
    wall = round(time.monotonic() - started, 3)
    factor = 2.0 * (len(devices) - 1) / len(devices)
    by_size = {int(row["size"]): row for row in rows}
    for figure in figures:
        row = by_size.get(int(figure["size_bytes"]))
        if row is None:
            continue
        algbw = [int(row["size"]) / (ms / 1e3) / 1e9 for ms in row["ms"] if ms > 0]
        if not algbw:
            continue
        record = bandwidth.summary([a * factor for a in algbw])
        figure["rerun"] = {
            "without": plan["without"], "kept": plan["kept"],
            "floor_gbs": plan["floor_gbs"], "floor_basis": plan["floor_basis"],
            "gbs": record["median_gbs"], "min_gbs": record["min_gbs"],
            "max_gbs": record["max_gbs"], "samples_gbs": record["samples_gbs"],
            "algbw_gbs": round(statistics.median(algbw), 3),
            "transports": dict(seen.get("transports") or {}) if backend == "nccl" else None,
            "ran_with": list(row.get("env") or [])[:64], "wall_s": wall}
    return None

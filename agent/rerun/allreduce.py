"""Whose a short all-reduce is, settled by measuring it again (docs/reruns.md): where the
figure at any size falls under the floor the controller calls that size short by
(agent/node/floors.py) and the run's settings hold some that can move it
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
Its child is the all-reduce's own ranks (agent/node/collective.py), started without the
names and with the user's /etc-less conf file copied less their lines.
"""

import os
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from agent.node import bandwidth, collective, floors
from agent.rerun import child
from agent.rerun.bounds import MAX_BASIS, MAX_NAMES, MAX_WHY
from agent.rerun.protocol import Plan, Rerun
from agent.source import settings as run_settings


def decide(figures: Sequence[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variant: Optional[str], ranks: int,
           system: Iterable[str] = ()) -> Optional[Dict[str, Any]]:
    """What a rerun would take out and why: {"without", "kept", "floors" (each judged
    size's (floor GB/s, what it rests on)), "short" (the sizes under theirs)}; None where
    no size is short, nothing judges them, or no setting that can move them may be taken
    out. `system`: the names /etc/nccl.conf sets, beside those `recorded` says it does.

    A name /etc/nccl.conf also sets stays, whichever source applied: taken out of the
    environment, NCCL would take /etc's value and the rerun would still run under one.
    At most MAX_NAMES are taken out (and named kept); a suspect past them is in neither
    list, and the controller calls such a rerun's finding unsettled."""
    judged: Dict[int, Tuple[float, str]] = {}
    short: List[int] = []
    for figure in figures:
        size = int(figure["size_bytes"])
        floor = floors.allreduce_floor(table, variant, ranks, size, str(figure.get("dtype")),
                                       str(figure["backend"]), figure.get("datasheet_gbs"))
        if floor is None:
            continue
        judged[size] = (floor[0], floor[1][:MAX_BASIS])
        if float(figure["gbs"]) < floor[0]:
            short.append(size)
    if not short:
        return None
    movers = [s for s in recorded
              if s.get("applies") and run_settings.moves(str(s["name"]), "allreduce")]
    etc = set(system) | {str(s["name"]) for s in recorded if not run_settings.removable(s)}
    taken = sorted({str(s["name"]) for s in movers
                    if not run_settings.kept(str(s["name"])) and run_settings.removable(s)
                    and str(s["name"]) not in etc})[:MAX_NAMES]
    if not taken:
        return None
    # What stays and why: kept as found, or set by /etc/nccl.conf; not a name past the cap.
    stayed = sorted({str(s["name"]) for s in movers
                     if str(s["name"]) not in taken
                     and (run_settings.kept(str(s["name"])) or str(s["name"]) in etc)}
                    )[:MAX_NAMES]
    return {"without": taken, "kept": stayed, "floors": judged, "short": sorted(short)}


class AllreduceRerun(Rerun):
    """The all-reduce over the same ranks and sizes again, its ranks without the names."""

    kind = "allreduce"

    def __init__(self, figures: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
                 table: Dict[str, Any], variant: Optional[str],
                 devices: Sequence[Optional[int]], backend: str, sizes: Sequence[int],
                 warmup: int, iterations: int) -> None:
        self.figures, self.recorded, self.table = figures, recorded, table
        self.variant, self.devices, self.backend, self.sizes = variant, devices, backend, sizes
        self.warmup, self.iterations = warmup, iterations

    def plan(self) -> Optional[Plan]:
        system = [name for name, _ in run_settings.read_conf(run_settings.SYSTEM_CONF)]
        return decide(self.figures, self.recorded, self.table, self.variant,
                      len(self.devices), system)

    def said(self, plan: Plan) -> str:
        judged: Dict[int, Tuple[float, str]] = plan["floors"]
        under = "; ".join(f"{f['size_bytes']} B at {f['gbs']:g} GB/s under "
                          f"{judged[int(f['size_bytes'])][0]:g}" for f in self.figures
                          if int(f["size_bytes"]) in plan["short"])
        return (f"node: all-reduce short ({under}): again without "
                f"{', '.join(plan['without'])}")

    def again(self, plan: Plan, environ: Optional[Dict[str, str]], timeout_s: float
              ) -> child.Answer:
        base = dict(os.environ if environ is None else environ)
        # The user's file less the removed names' lines, not an empty file: whatever else
        # it sets (NCCL_NVLS_ENABLE=0 past any cap on what was recorded) reaches the ranks.
        text, dropped = run_settings.filtered_conf(run_settings.user_conf(base),
                                                   plan["without"])
        started = time.monotonic()
        with tempfile.NamedTemporaryFile("wb", prefix="fleet-rerun-", suffix=".conf") as copy:
            copy.write(text)
            copy.flush()
            redirect = dropped or "NCCL_CONF_FILE" in plan["without"]
            env = run_settings.without(base, plan["without"], copy.name if redirect else None)
            try:
                rows, seen = collective.run(self.devices, self.backend, self.sizes,
                                            timeout_s, self.warmup, self.iterations, env=env)
            except (collective.CollectiveError, OSError, ValueError) as exc:
                return None, f"{type(exc).__name__}: {exc}"[:MAX_WHY], 0.0
        return {"rows": rows, "seen": seen}, None, round(time.monotonic() - started, 3)

    def place(self, plan: Plan, answer: Dict[str, Any], wall: float) -> None:
        judged: Dict[int, Tuple[float, str]] = plan["floors"]
        factor = 2.0 * (len(self.devices) - 1) / len(self.devices)
        by_size = {int(row["size"]): row for row in answer["rows"]}
        seen = answer["seen"]
        for figure in self.figures:
            size = int(figure["size_bytes"])
            row = by_size.get(size)
            if row is None:
                continue
            algbw = [int(row["size"]) / (ms / 1e3) / 1e9 for ms in row["ms"] if ms > 0]
            if not algbw:
                continue
            record = bandwidth.summary([a * factor for a in algbw])
            figure["rerun"] = {
                "without": plan["without"], "kept": plan["kept"],
                "floor_gbs": judged[size][0] if size in judged else None,
                "floor_basis": judged[size][1] if size in judged else None,
                "gbs": record["median_gbs"], "min_gbs": record["min_gbs"],
                "max_gbs": record["max_gbs"], "samples_gbs": record["samples_gbs"],
                "algbw_gbs": round(statistics.median(algbw), 3),
                "transports": (dict(seen.get("transports") or {})
                               if self.backend == "nccl" else None),
                "ran_with": [n for n in row.get("env") or [] if run_settings.storable(n)
                             ][:MAX_NAMES],
                "wall_s": wall}


def settle(figures: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variant: Optional[str], devices: Sequence[Optional[int]],
           backend: str, sizes: Sequence[int], timeout_s: float, warmup: int,
           iterations: int, progress: Callable[[str], None],
           environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    """Run the all-reduce again without the settings `decide` names, where it names
    some, and put each size's figure on the original's `rerun`, with the floor that size
    was judged by (None where nothing judged it). Returns why the rerun failed (the
    originals then stand alone, and the controller calls them unsettled), else None."""
    return AllreduceRerun(figures, recorded, table, variant, devices, backend, sizes, warmup,
                          iterations).settle(progress, environ, timeout_s)

"""Whose a short link copy is, settled by measuring it again (docs/reruns.md; issue 44),
as agent/rerun/memory.py settles a memory copy: a pair's peer copy
(agent/node/peers.py, one way and both ways) and a GPU's host copy
(agent/node/hostlink.py, to and from the device).

A copy is short where it falls under the floor the report calls it short by
(fleet/analysis/node/shortfall.py, carried by agent/node/floors.json):

- a pair: "peer_copy", the catalog's figure of its variant, direction and size at the
  NVLink fabric and links it crossed (a pair with fewer links than the records' is judged
  against them: fewer is what a lost link looks like), less the larger of 4% and four
  times the records' sd; without an entry, `pair_share` of its datasheet figure, and only
  over an NVLink path (the report judges no PCIe pair by its datasheet);
- a host copy: "host_copy", the catalog's figure at the PCIe generation and width the
  copy ran at, less the larger of 10% and four times the sd. No datasheet share: a copy
  whose link ran below its maximum, or under `host_link_min_share` of what its link
  carries, is fleet/analysis/node/hostlink.py's finding, not a shortfall, and is left alone
  here as there.

A figure the agent saw another process beside (`contention`) is not judged by the report,
nor measured again here. Where a short copy ran under settings that can move it (CUDA_*:
agent/source/settings.py), the short pairs and the short copies' GPUs are measured again
in one child process whose environment lacks them (agent/rerun/child.py), with the suite's own
code, size and repeats; a host copy from the CPUs the first ran from, so that its buffer
lands on the same NUMA node. Each rerun figure goes on its original's `rerun`. The caller
watches the GPUs around it: another process there drops the rerun.

On a healthy node this costs nothing. On a short one: the child's start (torch's import,
CUDA's context, NVML's read of the GPUs: seconds), a pair's two copies (milliseconds over
NVLink), and a GPU's host copies, pinned and pageable as the suite measures them (4.0-5.5
s a GPU in the suite on the lent 2x H100, bench/records/2026-11-26-h100x2-node-healthy,
of which the copies take under one: the rest is making the host buffers).
"""

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent.gpu import links, numa
from agent.matmul.harness import Config, import_torch, match_targets
from agent.node import bandwidth, hostlink, peers
from agent.node.suite import LINK_KINDS
from agent.rerun import child
from agent.rerun.bounds import MAX_BASIS, MAX_NAMES, TIMEOUT_S
from agent.rerun.protocol import Plan, Rerun
from agent.source import settings as run_settings

# The node suite's link figures (agent/node/suite.py LINK_KINDS): a pair's, a GPU's host's.
KINDS = LINK_KINDS
HOST_KINDS = tuple(k for k in KINDS if k != "peer_copy")

# ("peer_copy", GPU, peer, direction) or (kind, GPU, host memory): one figure of a run.
Key = Tuple[Any, ...]
Floor = Tuple[float, str]


def key_of(figure: Dict[str, Any]) -> Optional[Key]:
    """The figure's place in its run, as its rerun is matched to it; None for a figure of
    another kind or one that does not say which GPUs it is of."""
    kind = figure.get("kind")
    if figure.get("gpu_index") is None:
        return None
    if kind == "peer_copy" and figure.get("peer_index") is not None:
        return (kind, int(figure["gpu_index"]), int(figure["peer_index"]),
                str(figure.get("direction")))
    if kind in HOST_KINDS:
        return (kind, int(figure["gpu_index"]), str(figure.get("memory")))
    return None


def _records(entry: Dict[str, Any], what: str) -> Floor:
    return (float(entry["floor_gbs"]),
            f"records: {float(entry['expected_gbs']):g} GB/s expected of a healthy {what} "
            f"({len(entry.get('records', ()))} records), called under "
            f"{float(entry['floor_gbs']):g}")


def pair_floor(table: Dict[str, Any], variant: Optional[str], figure: Dict[str, Any]
               ) -> Optional[Floor]:
    """(floor GB/s, what it rests on) for a pair's copy, picked as the catalog's lookup
    picks (fleet/expected.py `Catalog.lookup`); None where nothing judges it."""
    fabric, joined = figure.get("nvlink_fabric"), figure.get("nvlink_links")
    fitting = [
        e for e in table.get("peer_copy", ())
        if (e.get("variant"), e.get("direction"), e.get("size_bytes"))
        == (variant, figure.get("direction"), int(figure["size_bytes"]))
        and not (e.get("nvlink_fabric") is not None and fabric is not None
                 and e.get("nvlink_fabric") != fabric)
        and (e.get("nvlink_links") is None or joined is None
             or int(joined) <= int(e["nvlink_links"]))]
    if fitting:
        exact = [e for e in fitting
                 if (e.get("nvlink_fabric"), e.get("nvlink_links")) == (fabric, joined)]
        low = min(exact or fitting, key=lambda e: float(e["expected_gbs"]))
        return _records(low, f"{variant} pair, {str(figure.get('direction')).replace('_', ' ')}")
    share, sheet = table.get("pair_share"), figure.get("datasheet_gbs")
    if share and sheet and str(figure.get("topology") or "").upper().startswith("NV"):
        return (round(float(share) * float(sheet), 3),
                f"datasheet: called under {float(share):.0%} of {float(sheet):g} GB/s")
    return None


def _left_to_hostlink(table: Dict[str, Any], figure: Dict[str, Any]) -> bool:
    """Whether fleet/analysis/node/hostlink.py calls the copy (its link below its maximum, or
    the copy under its share of what the link carries): its finding, not a shortfall."""
    link = figure.get("link") or {}
    gen, width = link.get("gen"), link.get("width")
    below = ((gen is not None and link.get("gen_max") is not None and gen < link["gen_max"])
             or (width is not None and link.get("width_max") is not None
                 and width < link["width_max"]))
    carries = links.pcie_gbs(gen, width) or figure.get("datasheet_gbs")
    share = table.get("host_link_min_share")
    slow = bool(share and carries and float(figure["gbs"]) < float(share) * float(carries))
    return below or slow


def host_floor(table: Dict[str, Any], variant: Optional[str], figure: Dict[str, Any]
               ) -> Optional[Floor]:
    """(floor GB/s, what it rests on) for a host copy at the link it ran at; None where
    nothing judges it as a shortfall."""
    link = figure.get("link") or {}
    fitting = [e for e in table.get("host_copy", ())
               if (e.get("variant"), e.get("kind"), e.get("memory"), e.get("size_bytes"),
                   e.get("link_gen"), e.get("link_width"))
               == (variant, figure.get("kind"), figure.get("memory"),
                   int(figure["size_bytes"]), link.get("gen"), link.get("width"))]
    if not fitting or _left_to_hostlink(table, figure):
        return None
    low = min(fitting, key=lambda e: float(e["expected_gbs"]))
    gen = f" at Gen{link['gen']} x{link['width']}" if link.get("gen") else ""
    return _records(low, f"{variant} GPU{gen}, {str(figure['kind']).replace('_', ' ')} "
                         f"({figure.get('memory')})")


def floor(table: Dict[str, Any], variants: Dict[int, str], figure: Dict[str, Any]
          ) -> Optional[Floor]:
    """The floor of a pair's or host copy (its source GPU's variant); None where nothing
    judges it."""
    variant = variants.get(int(figure["gpu_index"]))
    if figure.get("kind") == "peer_copy":
        return pair_floor(table, variant, figure)
    return host_floor(table, variant, figure)


def decide(figures: Sequence[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variants: Dict[int, str]) -> Optional[Dict[str, Any]]:
    """What a rerun would take out and measure: {"without", "pairs" ([GPU, peer] each),
    "gpus" (the short host copies' GPUs), "floors" (each short figure's key: (floor,
    basis))}; None where no copy is short, or no setting that can move one may be taken
    out."""
    short: Dict[Key, Floor] = {}
    for figure in figures:
        key = key_of(figure)
        if key is None or figure.get("contention"):
            continue
        found = floor(table, variants, figure)
        if found is not None and float(figure["gbs"]) < found[0]:
            short[key] = (found[0], found[1][:MAX_BASIS])
    if not short:
        return None
    kinds = {k[0] for k in short}
    taken = sorted({str(s["name"]) for kind in kinds
                    for s in run_settings.suspects(recorded, kind)
                    if run_settings.removable(s)})[:MAX_NAMES]
    if not taken:
        return None
    return {"without": taken,
            "pairs": sorted({(k[1], k[2]) for k in short if k[0] == "peer_copy"}),
            "gpus": sorted({k[1] for k in short if k[0] in HOST_KINDS}), "floors": short}


def _name(key: Key) -> str:
    if key[0] == "peer_copy":
        return f"pair {key[1]}-{key[2]} {str(key[3]).replace('_', ' ')}"
    return f"GPU {key[1]} {str(key[0]).replace('_', ' ')} ({key[2]})"


class LinksRerun(Rerun):
    """The short pairs' copies and the short host copies' GPUs again in one child."""

    kind = "links"

    def __init__(self, figures: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
                 table: Dict[str, Any], variants: Dict[int, str], device: str,
                 repeats: int) -> None:
        self.figures, self.recorded, self.table = figures, recorded, table
        self.variants, self.device, self.repeats = variants, device, repeats

    def plan(self) -> Optional[Plan]:
        return decide(self.figures, self.recorded, self.table, self.variants)

    def _originals(self, plan: Plan) -> Dict[Key, Dict[str, Any]]:
        judged: Dict[Key, Floor] = plan["floors"]
        originals: Dict[Key, Dict[str, Any]] = {}
        for figure in self.figures:
            key = key_of(figure)
            if key is not None and key in judged:
                originals[key] = figure
        return originals

    def said(self, plan: Plan) -> str:
        judged: Dict[Key, Floor] = plan["floors"]
        originals = self._originals(plan)
        under = "; ".join(f"{_name(k)} at {float(originals[k]['gbs']):g} GB/s under {v[0]:g}"
                          for k, v in sorted(judged.items(), key=lambda item: str(item[0])))
        return f"node: link copies short ({under}): again without {', '.join(plan['without'])}"

    def spec(self, plan: Plan) -> Dict[str, Any]:
        pairs: Dict[Tuple[int, int], Dict[str, Any]] = {}
        hosts: Dict[int, Dict[str, Any]] = {}
        for key, figure in sorted(self._originals(plan).items(),
                                  key=lambda item: str(item[0])):
            size = int(figure["size_bytes"])
            if key[0] == "peer_copy":
                pair = pairs.setdefault((key[1], key[2]),
                                        {"gpus": [key[1], key[2]], "size": size})
                pair["size"] = max(pair["size"], size)
            else:
                # From the CPUs the first copy ran from: its host buffer on the same NUMA
                # node.
                host = hosts.setdefault(key[1], {"gpu": key[1], "size": size,
                                                 "cpus": figure.get("cpus")})
                host["size"] = max(host["size"], size)
        return {"device": self.device, "repeats": self.repeats,
                "pairs": list(pairs.values()), "hosts": list(hosts.values())}

    def place(self, plan: Plan, answer: Dict[str, Any], wall: float) -> None:
        judged: Dict[Key, Floor] = plan["floors"]
        again = {key_of(f): f for f in answer["figures"] if key_of(f) is not None}
        for key, figure in self._originals(plan).items():
            other = again.get(key)
            if other is None:
                continue
            record = other["stats"]
            figure["rerun"] = {
                "without": plan["without"], "kept": [],
                "floor_gbs": judged[key][0], "floor_basis": judged[key][1],
                "gbs": record["median_gbs"], "min_gbs": record["min_gbs"],
                "max_gbs": record["max_gbs"], "samples_gbs": record["samples_gbs"],
                "algbw_gbs": None, "transports": None,
                "ran_with": answer["ran_with"][:MAX_NAMES], "wall_s": wall}


def settle(figures: List[Dict[str, Any]], recorded: Sequence[Dict[str, Any]],
           table: Dict[str, Any], variants: Dict[int, str], device: str, repeats: int,
           progress: Callable[[str], None], environ: Optional[Dict[str, str]] = None,
           timeout_s: float = TIMEOUT_S["links"]) -> Optional[str]:
    """Copy the short pairs and the short host copies' GPUs again without the settings
    `decide` names, in a child process, at each figure's own size, and put each rerun
    figure on its original's `rerun`. Returns why it could not be done (the figures then
    stand alone, and the controller calls them unsettled)."""
    return LinksRerun(figures, recorded, table, variants, device, repeats
                      ).settle(progress, environ, timeout_s)


def _cpu_pair(torch: Any, pair: List[int], size: int, stack: bandwidth.Stack,
              repeats: int) -> List[Dict[str, Any]]:
    """On the CPU path, RAM copies in a pair's place: the code path, not a figure of any
    link (the suite measures no pair there; tests settle one through a real child)."""
    results = []
    src, dst = (torch.empty(size, dtype=torch.uint8).random_(0, 256) for _ in range(2))
    for direction, counted in (("one_way", size), ("both_ways", 2 * size)):
        started = time.monotonic()

        def op(times: int = counted // size) -> None:
            for _ in range(times):
                dst.copy_(src)
        samples = bandwidth.time_op(torch, op, counted, None, repeats=repeats)
        results.append(bandwidth.figure(
            stack, "peer_copy", samples, size, "copied", "cpu", started,
            gpu_index=pair[0], gpu_uuid=None, peer_index=pair[1], peer_uuid=None,
            direction=direction))
    return results


@child.measures("links")
def measure(spec: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
    """The child: each named pair's copies and each named GPU's host copies, as the node
    suite measures them."""
    cuda = spec["device"] == "cuda"
    repeats = int(spec["repeats"])
    # The GPUs as NVML names them, so that each figure carries its GPU's index and UUID.
    nvml, gpus = child.gpus_here() if cuda else (None, [])
    if nvml is not None:
        nvml.close()
    torch = import_torch()
    stack = bandwidth.Stack(torch)
    wanted = sorted({int(i) for p in spec["pairs"] for i in p["gpus"]}
                    | {int(h["gpu"]) for h in spec["hosts"]})
    targets = match_targets(torch, Config(device=spec["device"],
                                          gpus=wanted if cuda else None), gpus, None)
    found = {int(t.fingerprint(gpus)["index"]): t for t in targets}
    figures: List[Dict[str, Any]] = []
    for pair in spec["pairs"]:
        a, b = (int(i) for i in pair["gpus"])
        if not cuda:
            figures += _cpu_pair(torch, [a, b], int(pair["size"]), stack, repeats)
            continue
        if a not in found or b not in found:
            continue
        ta, tb = found[a], found[b]
        figures += peers.measure(
            torch, (torch.device(f"cuda:{ta.index}"), torch.device(f"cuda:{tb.index}")),
            (ta.fingerprint(gpus), tb.fingerprint(gpus)), (None, None), None,
            int(pair["size"]), stack, repeats, node=gpus)
        torch.cuda.empty_cache()
    for host in spec["hosts"]:
        target = found.get(int(host["gpu"]))
        if target is None:
            continue
        device = torch.device(f"cuda:{target.index}" if cuda else "cpu")
        stream = torch.cuda.Stream(device) if cuda else None
        cpus = numa.parse_cpulist(host["cpus"]) if host.get("cpus") else None
        with numa.pinned_to(cpus):
            measured, _ = hostlink.measure(torch, device, stream, target.fingerprint(gpus),
                                           None, None, int(host["size"]), stack, repeats)
        figures += measured
        if cuda:
            torch.cuda.empty_cache()
    return {"figures": figures}, bool(figures)

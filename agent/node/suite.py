"""The node suite: what a node's memory and links do, measured after the matmul in the
same agent run and runtime.

Per GPU, one GPU at a time so that no figure shares the host's root complex or memory
with another: the memory bandwidth (agent/node/memory.py) and the host link both ways, pinned
and pageable (agent/node/hostlink.py). Per pair of GPUs: peer access, NVML's path, and the
copy one way and both ways at once (agent/node/peers.py). The whole node: an all-reduce with
one process per GPU, over sizes from 16 MiB to 1 GiB (agent/node/collective.py). Each figure
carries its datasheet figure and its source (agent/gpu/links.py).

A GPU whose figures fail is reported with the reason (stage "node") while the rest of the
suite, and the GPU's matmul result, stand. On the CPU path (`--cpu`) the same code runs
on RAM, with a two-rank gloo all-reduce in spawned processes, so tests exercise the
coordination for real.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent.gpu import links, numa, nvlink
from agent.matmul.harness import Config as HarnessConfig
from agent.matmul.harness import GpuTarget, HarnessError, import_torch, match_targets
from agent.node import bandwidth, collective, hostlink, memory, peers
from agent.source.nvml import Nvml
from agent.timing import contention

MiB = 1 << 20
GiB = 1 << 30

Progress = Callable[[str], None]
# Longer than NVML's utilization sample period (1/6 s to 1 s, by product).
IDLE_BEFORE_UTILIZATION_S = 1.2


@dataclass
class Config:
    """Sizes and repeats of the suite's figures (docs/node-suite.md says why)."""

    device: str = "cuda"
    gpus: Optional[List[int]] = None
    # 1 GiB copied (2 GiB counted): twenty times the 50-60 MB L2, so HBM is measured.
    copy_bytes: int = GiB
    # 256 MiB each way: 4.6 ms at Gen5 x16, long beside the copy's ~10 us start.
    host_bytes: int = 256 * MiB
    # 512 MiB, nvbandwidth's default buffer: 1.3 ms over 18 NVLink 4 links.
    peer_bytes: int = 512 * MiB
    allreduce_sizes: Tuple[int, ...] = (16 * MiB, 64 * MiB, 256 * MiB, GiB)
    repeats: int = bandwidth.REPEATS
    allreduce_warmup: int = collective.WARMUP
    allreduce_iterations: int = collective.ITERATIONS
    # NCCL's start and the ranks' torch import dominate (seconds); a hung rank must not
    # hold the run.
    allreduce_timeout_s: float = 120.0
    cpu_ranks: int = 2
    skip: Tuple[str, ...] = field(default_factory=tuple)
    # What each figure is called short under (agent/node/floors.py); None: the table
    # packed with the agent. A short figure under settings that can move it runs again
    # without them (the `Reruns` handed to `run`: agent/rerun/node.py) unless `rerun` is
    # off.
    floors: Optional[Dict[str, Any]] = None
    rerun: bool = True

    @classmethod
    def for_cpu(cls) -> "Config":
        """Sizes a CI machine copies in milliseconds: the path, not a figure."""
        return cls(device="cpu", copy_bytes=16 * MiB, host_bytes=8 * MiB, peer_bytes=8 * MiB,
                   allreduce_sizes=(1 * MiB, 4 * MiB), repeats=6, allreduce_warmup=2,
                   allreduce_iterations=6)


@dataclass
class Outcome:
    """What the suite measured, what failed, and each GPU's host link under load."""

    results: List[Dict[str, Any]] = field(default_factory=list)
    errors: List[Dict[str, Any]] = field(default_factory=list)
    links: Dict[int, Dict[str, Optional[int]]] = field(default_factory=dict)

    def fail(self, message: str, gpu: Optional[int] = None) -> None:
        """Note a figure that could not be measured, with the GPU it belongs to."""
        error: Dict[str, Any] = {"stage": "node", "message": message[:4000]}
        if gpu is not None:
            error["gpu"] = gpu
        self.errors.append(error)


# A rerun ready to run: why it could not be done, else None.
Settle = Callable[[], Optional[str]]


class Reruns:
    """What measures the node's short figures again without the run's settings
    (agent/rerun/node.py, the layer above the suites): the suite says when, and watches
    the GPUs around it; each method returns the rerun to run, or None where no setting
    that can move those figures could be taken out (nothing is then read or run)."""

    def memory(self, cfg: "Config", copies: List[Dict[str, Any]],
               prints: Sequence[Dict[str, Any]], progress: Progress) -> Optional[Settle]:
        """The memory copies'."""
        return None

    def links(self, cfg: "Config", copies: List[Dict[str, Any]],
              prints: Sequence[Dict[str, Any]], progress: Progress) -> Optional[Settle]:
        """The pairs' and host copies' (`LINK_KINDS`)."""
        return None

    def allreduce(self, cfg: "Config", reduced: List[Dict[str, Any]],
                  prints: Sequence[Dict[str, Any]], ranks: Sequence[Optional[int]],
                  backend: str, progress: Progress) -> Optional[Settle]:
        """The all-reduce's."""
        return None


# The figures a link rerun measures again: a pair's copy, a GPU's host copies.
LINK_KINDS = ("peer_copy", "host_to_device", "device_to_host")


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:4000]


def allreduce_datasheet(paths: Sequence[Optional[str]], gpus: Sequence[Dict[str, Any]]
                        ) -> Tuple[Optional[float], Optional[str]]:
    """Bus bandwidth can reach each GPU's one-way NVLink toward the other ranks, the
    slowest GPU's (agent/gpu/nvlink.py: through NVSwitch, all its links to switches; direct,
    its links to the other ranks; a GPU none of whose links reaches a rank, its host
    link). Where NVML says NVLink joins every pair but not where the links go (an old
    driver or recording): each GPU's active links, said to assume a switched board. The
    slowest host link only where every pair's path is known and none is NVLink; None
    where a path is unknown."""
    def slowest(figures: List[Tuple[Optional[float], Optional[str]]]
                ) -> Tuple[Optional[float], Optional[str]]:
        return min(figures, key=lambda f: float(f[0] or 0.0))

    if not paths or any(p != "NVLINK" and p not in peers.PCIE_PATHS for p in paths):
        return None, None
    hosts = [links.pcie_figure(g.get("pcie_gen_max"), g.get("pcie_width_max")) for g in gpus]
    if "NVLINK" not in paths:
        known = [f for f in hosts if f[0] is not None]
        return slowest(known) if known else (None, None)
    ranks = nvlink.rank_figures(gpus)
    if ranks is None:
        if any(p != "NVLINK" for p in paths):
            return None, None  # some pairs over PCIe, and where the links go not known
        known = [f for f in (links.nvlink_figure(g) for g in gpus) if f[0] is not None]
        if not known:
            return None, None
        gbs, source = slowest(known)
        return gbs, (f"{source}; assumed a switched board: NVML did not say where the "
                     "links go")
    figures = [ranks[i] if ranks[i][0] is not None else (
        hosts[i][0], f"GPU {gpus[i].get('index')} has no NVLink toward the other ranks, "
                     f"through the host: {hosts[i][1]}") for i in range(len(gpus))]
    if any(f[0] is None for f in figures):
        return None, None
    return slowest(figures)


class _Watch:
    """Who else is on some GPUs around a figure: their processes read before it and after
    it, as the harness does around the matmul (agent/timing/contention.py), and how busy each was
    when the suite began (`busy`)."""

    def __init__(self, targets: Sequence[GpuTarget], busy: Dict[int, Optional[int]]
                 ) -> None:
        self.targets = targets
        self.seen: List[Dict[str, Any]] = []
        known = [busy.get(t.index) for t in targets]
        self.busy = max((b for b in known if b is not None), default=None)

    def __enter__(self) -> "_Watch":
        for t in self.targets:
            self.seen += contention.others(t.nvml, t.handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for t in self.targets:
            self.seen += contention.others(t.nvml, t.handle)

    def mark(self, figures: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The figures with what was seen around them."""
        lines = contention.reasons(self.seen, self.busy)
        processes = list({p["pid"]: p for p in self.seen}.values())
        for figure in figures:
            figure["contention"] = lines
            figure["processes"] = processes
        return figures


def _busy(targets: Sequence[GpuTarget]) -> Dict[int, Optional[int]]:
    """Each GPU's utilization once the agent's own matmul has left it: NVML averages over
    its last sample period (up to a second), so a reading taken at once would show the
    agent's own load. A process in another container is invisible to the process list;
    this is where it shows."""
    if any(t.nvml is not None and t.handle is not None for t in targets):
        time.sleep(IDLE_BEFORE_UTILIZATION_S)
    return {t.index: contention.utilization(t.nvml, t.handle) for t in targets}


def run(cfg: Config, gpus: Sequence[Dict[str, Any]], nvml: Optional[Nvml],
        progress: Progress, reruns: Optional[Reruns] = None) -> Outcome:
    """Measure the node; the figures are fleet-agent/1 NodeResults. `reruns`: what measures
    a short figure again (none: nothing is)."""
    again = reruns if reruns is not None and cfg.rerun else Reruns()
    torch = import_torch()
    targets = match_targets(torch, HarnessConfig(device=cfg.device, gpus=cfg.gpus), gpus,
                            nvml)
    cuda = cfg.device == "cuda"
    if cuda:
        torch.cuda.empty_cache()  # the matmul's operands, still cached
    stack = bandwidth.Stack(torch)
    outcome = Outcome()
    busy = _busy(targets) if cuda else {}
    prints = [t.fingerprint(gpus) for t in targets]
    for target, gpu in ((targets[i], prints[i]) for i in range(len(targets))):
        device = torch.device(f"cuda:{target.index}" if cuda else "cpu")
        stream = torch.cuda.Stream(device) if cuda else None
        label = f"GPU {gpu.get('index')}" if cuda else "the CPU"
        try:
            progress(f"node: {label} memory copy")
            with _Watch([target], busy) as watch:
                copied = memory.measure(torch, device, stream, gpu, cfg.copy_bytes, stack,
                                        cfg.repeats)
            outcome.results += watch.mark([copied])
            progress(f"node: {label} host link, pinned and pageable")
            # From the GPU's own CPUs, so that the host buffers land on its NUMA node.
            place = (numa.locality(gpu, target.nvml, target.handle) if cuda
                     else {"numa_node": None, "cpus": None})
            with _Watch([target], busy) as watch, numa.pinned_to(place["cpus"]) as ran_on:
                figures, link = hostlink.measure(torch, device, stream, gpu, target.nvml,
                                                 target.handle, cfg.host_bytes, stack,
                                                 cfg.repeats)
            for figure in figures:
                figure["numa_node"] = place["numa_node"]
                figure["cpus"] = numa.cpulist(ran_on) if ran_on else None
            outcome.results += watch.mark(figures)
            if cuda and gpu.get("index") is not None:
                outcome.links[int(gpu["index"])] = link
        except Exception as exc:  # one GPU's failure must not lose the others' figures
            outcome.fail(f"{label}: {_why(exc)}", gpu.get("index"))
        finally:
            if cuda:
                torch.cuda.empty_cache()
    copies = [f for f in outcome.results if f.get("kind") == "memory_copy"]
    settle = again.memory(cfg, copies, prints, progress)
    if settle is not None:
        _again("memory copy again without the run's settings", copies,
               targets if cuda else [], busy, settle, progress, outcome)
    paths: List[Optional[str]] = []
    if cuda:
        for a in range(len(targets)):
            for b in range(a + 1, len(targets)):
                ta, tb = targets[a], targets[b]
                ga, gb = prints[a], prints[b]
                progress(f"node: GPU {ga.get('index')} and GPU {gb.get('index')}, "
                         "one way and both ways")
                try:
                    with _Watch([ta, tb], busy) as watch:
                        figures = peers.measure(
                            torch, (torch.device(f"cuda:{ta.index}"),
                                    torch.device(f"cuda:{tb.index}")),
                            (ga, gb), (ta.handle, tb.handle), nvml, cfg.peer_bytes, stack,
                            cfg.repeats, node=gpus)
                    paths.append(figures[0].get("topology"))
                    outcome.results += watch.mark(figures)
                except Exception as exc:
                    paths.append(None)
                    outcome.fail(f"GPU {ga.get('index')} and GPU {gb.get('index')}: "
                                 f"{_why(exc)}", ga.get("index"))
                finally:
                    torch.cuda.empty_cache()
    copies = [f for f in outcome.results if f.get("kind") in LINK_KINDS]
    settle = again.links(cfg, copies, prints, progress)
    if settle is not None:
        _again("link copies again without the run's settings", copies,
               targets if cuda else [], busy, settle, progress, outcome)
    ranks: List[Optional[int]] = ([t.index for t in targets] if cuda
                                  else [None] * cfg.cpu_ranks)
    if len(ranks) >= 2:
        backend = "nccl" if cuda else "gloo"
        progress(f"node: all-reduce, {len(ranks)} ranks ({backend}), "
                 f"{len(cfg.allreduce_sizes)} sizes")
        started = time.monotonic()
        reduced: List[Dict[str, Any]] = []
        try:
            # The ranks have not started before, and have ended after: whoever is seen
            # on the GPUs then is someone else.
            with _Watch(targets if cuda else [], busy) as watch:
                rows, seen = collective.run(ranks, backend, cfg.allreduce_sizes,
                                            cfg.allreduce_timeout_s, cfg.allreduce_warmup,
                                            cfg.allreduce_iterations)
            reduced = watch.mark(collective.figures(
                rows, len(ranks), backend, "bf16" if cuda else "fp32", stack, started,
                allreduce_datasheet(paths, prints) if cuda else (None, None),
                transport=seen if backend == "nccl" else None,
                settings=collective.settings(os.environ)))
            # In the outcome before any rerun: nothing the rerun does can lose them.
            outcome.results += reduced
        except (collective.CollectiveError, OSError, ValueError) as exc:
            outcome.fail(f"all-reduce over {len(ranks)} ranks: {_why(exc)}")
        settle = again.allreduce(cfg, reduced, prints, ranks, backend, progress) \
            if reduced else None
        if settle is not None:
            _rerun(reduced, targets if cuda else [], busy, settle, progress, outcome)
    return outcome


def _rerun(reduced: List[Dict[str, Any]], targets: Sequence[GpuTarget],
           busy: Dict[int, Optional[int]], settle: Settle, progress: Progress,
           outcome: Outcome) -> None:
    """The all-reduce again without the run's settings where it was short, its figures on
    `reduced`'s; watched as the first was, since someone arriving in between would make it
    short and the finding the provider's."""
    what = "all-reduce again without the run's settings"
    try:
        with _Watch(targets, busy) as watch:
            failed = settle()
    except Exception as exc:  # a temp file, a corrupt floors.json: the figures stand
        for figure in reduced:
            figure.pop("rerun", None)
        outcome.fail(f"{what} did not run ({_why(exc)}); the original figures stand")
        return
    if failed:
        outcome.fail(f"{what}: {failed}")
    _drop_if_seen(watch, reduced, what, progress, outcome)


def _again(what: str, figures: List[Dict[str, Any]], targets: Sequence[GpuTarget],
           busy: Dict[int, Optional[int]], settle: Callable[[], Optional[str]],
           progress: Progress, outcome: Outcome) -> None:
    """Run `settle` (a rerun that puts its figures on `figures`' `rerun`) watched as the
    first figures were: someone arriving in between would make them short, and the
    finding the provider's. A rerun that fails leaves the original figures, said so."""
    try:
        with _Watch(targets, busy) as watch:
            failed = settle()
    except Exception as exc:  # a corrupt floors.json, a child that cannot start
        failed = f"did not run ({_why(exc)})"
    if failed:
        for figure in figures:
            figure.pop("rerun", None)
        outcome.fail(f"{what}: {failed}; the original figures stand")
        return
    _drop_if_seen(watch, figures, what, progress, outcome)


def _drop_if_seen(watch: _Watch, figures: List[Dict[str, Any]], what: str,
                  progress: Progress, outcome: Outcome) -> None:
    """A rerun another process shared is dropped: someone arriving in between would make
    the figure short again and the finding the provider's."""
    if watch.seen and any("rerun" in f for f in figures):
        for figure in figures:
            figure.pop("rerun", None)
        lines = "; ".join(contention.reasons(watch.seen, None))
        progress(f"node: {what} dropped: {lines}")
        outcome.fail(f"{what} dropped, another process was on the GPUs ({lines}); the "
                     "original figures stand, unsettled")


def run_or_fail(cfg: Config, gpus: Sequence[Dict[str, Any]], nvml: Optional[Nvml],
                progress: Progress, reruns: Optional[Reruns] = None) -> Outcome:
    """`run`, with a suite that cannot start at all (no torch, no device) reported as one
    failure instead of raised."""
    try:
        return run(cfg, gpus, nvml, progress, reruns)
    except HarnessError as exc:
        outcome = Outcome()
        outcome.fail(f"{exc}; node suite not run")
        return outcome

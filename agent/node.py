"""The node suite: what a node's memory and links do, measured after the matmul in the
same agent run and runtime.

Per GPU, one GPU at a time so that no figure shares the host's root complex or memory
with another: the memory bandwidth (agent/memory.py) and the host link both ways, pinned
and pageable (agent/hostlink.py). Per pair of GPUs: peer access, NVML's path, and the
copy one way and both ways at once (agent/peers.py). The whole node: an all-reduce with
one process per GPU, over sizes from 16 MiB to 1 GiB (agent/collective.py). Each figure
carries its datasheet figure and its source (agent/links.py).

A GPU whose figures fail is reported with the reason (stage "node") while the rest of the
suite, and the GPU's matmul result, stand. On the CPU path (`--cpu`) the same code runs
on RAM, with a two-rank gloo all-reduce in spawned processes, so tests exercise the
coordination for real.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agent import bandwidth, collective, hostlink, links, memory, peers
from agent.harness import Config as HarnessConfig
from agent.harness import GpuTarget, HarnessError, import_torch, match_targets
from agent.nvml import Nvml

MiB = 1 << 20
GiB = 1 << 30

Progress = Callable[[str], None]


@dataclass
class Config:
    """Sizes and repeats of the suite's figures (the README's "The whole node" says why)."""

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


def _fingerprint(target: GpuTarget, gpus: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    for gpu in gpus:
        if target.nvml_index is not None and gpu.get("index") == target.nvml_index:
            return gpu
    # The CPU path, or a GPU NVML does not see: what the figure can still say.
    return {"index": target.nvml_index if target.nvml_index is not None else target.index,
            "uuid": target.uuid}


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:4000]


def allreduce_datasheet(paths: Sequence[Optional[str]], gpus: Sequence[Dict[str, Any]]
                        ) -> Tuple[Optional[float], Optional[str]]:
    """Bus bandwidth can reach each GPU's one-way link: NVLink where NVML says every pair
    has it, else the slowest host link."""
    if paths and all(p == "NVLINK" for p in paths):
        known = [f for f in (links.nvlink_figure(g) for g in gpus) if f[0] is not None]
        if known:
            return min(known, key=lambda f: float(f[0] or 0.0))
    known = [f for f in (links.pcie_figure(g.get("pcie_gen_max"), g.get("pcie_width_max"))
                         for g in gpus) if f[0] is not None]
    if not known:
        return None, None
    return min(known, key=lambda f: float(f[0] or 0.0))


def run(cfg: Config, gpus: Sequence[Dict[str, Any]], nvml: Optional[Nvml],
        progress: Progress) -> Outcome:
    """Measure the node; the figures are fleet-agent/1 NodeResults."""
    torch = import_torch()
    targets = match_targets(torch, HarnessConfig(device=cfg.device, gpus=cfg.gpus), gpus,
                            nvml)
    cuda = cfg.device == "cuda"
    if cuda:
        torch.cuda.empty_cache()  # the matmul's operands, still cached
    stack = bandwidth.Stack(torch)
    outcome = Outcome()
    prints = [_fingerprint(t, gpus) for t in targets]
    for target, gpu in ((targets[i], prints[i]) for i in range(len(targets))):
        device = torch.device(f"cuda:{target.index}" if cuda else "cpu")
        stream = torch.cuda.Stream(device) if cuda else None
        label = f"GPU {gpu.get('index')}" if cuda else "the CPU"
        try:
            progress(f"node: {label} memory copy")
            outcome.results.append(memory.measure(torch, device, stream, gpu, cfg.copy_bytes,
                                                  stack, cfg.repeats))
            progress(f"node: {label} host link, pinned and pageable")
            figures, link = hostlink.measure(torch, device, stream, gpu, target.nvml,
                                             target.handle, cfg.host_bytes, stack,
                                             cfg.repeats)
            outcome.results += figures
            if cuda and gpu.get("index") is not None:
                outcome.links[int(gpu["index"])] = link
        except Exception as exc:  # one GPU's failure must not lose the others' figures
            outcome.fail(f"{label}: {_why(exc)}", gpu.get("index"))
        finally:
            if cuda:
                torch.cuda.empty_cache()
    paths: List[Optional[str]] = []
    if cuda:
        for a in range(len(targets)):
            for b in range(a + 1, len(targets)):
                ta, tb = targets[a], targets[b]
                ga, gb = prints[a], prints[b]
                progress(f"node: GPU {ga.get('index')} and GPU {gb.get('index')}, "
                         "one way and both ways")
                try:
                    figures = peers.measure(
                        torch, (torch.device(f"cuda:{ta.index}"),
                                torch.device(f"cuda:{tb.index}")),
                        (ga, gb), (ta.handle, tb.handle), nvml, cfg.peer_bytes, stack,
                        cfg.repeats)
                    paths.append(figures[0].get("topology"))
                    outcome.results += figures
                except Exception as exc:
                    paths.append(None)
                    outcome.fail(f"GPU {ga.get('index')} and GPU {gb.get('index')}: "
                                 f"{_why(exc)}", ga.get("index"))
                finally:
                    torch.cuda.empty_cache()
    ranks: List[Optional[int]] = ([t.index for t in targets] if cuda
                                  else [None] * cfg.cpu_ranks)
    if len(ranks) >= 2:
        backend = "nccl" if cuda else "gloo"
        progress(f"node: all-reduce, {len(ranks)} ranks ({backend}), "
                 f"{len(cfg.allreduce_sizes)} sizes")
        started = time.monotonic()
        try:
            rows = collective.run(ranks, backend, cfg.allreduce_sizes,
                                  cfg.allreduce_timeout_s, cfg.allreduce_warmup,
                                  cfg.allreduce_iterations)
            outcome.results += collective.figures(
                rows, len(ranks), backend, "bf16" if cuda else "fp32", stack, started,
                allreduce_datasheet(paths, prints) if cuda else (None, None))
        except (collective.CollectiveError, OSError, ValueError) as exc:
            outcome.fail(f"all-reduce over {len(ranks)} ranks: {_why(exc)}")
    return outcome


def run_or_fail(cfg: Config, gpus: Sequence[Dict[str, Any]], nvml: Optional[Nvml],
                progress: Progress) -> Outcome:
    """`run`, with a suite that cannot start at all (no torch, no device) reported as one
    failure instead of raised."""
    try:
        return run(cfg, gpus, nvml, progress)
    except HarnessError as exc:
        outcome = Outcome()
        outcome.fail(f"{exc}; node suite not run")
        return outcome

"""`python -m agent` (or the zipapp): run the agent and print JSON lines on stdout.

Each line is an event: `progress` while it works, then one `document` (fleet-agent/1), or,
for `cluster`, one `cluster` event (fleet-cluster/1, agent/cluster/step.py).
Logs and tracebacks go to stderr, so stdout stays machine-readable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional

from agent import __version__
from agent.cluster import options as cluster_options
from agent.cluster import step as cluster_step
from agent.collect import SourceError, collect
from agent.job.suite import Config as JobConfig
from agent.matmul.harness import DEFAULT_DTYPE, DEFAULT_SIZE, DTYPES
from agent.matmul.harness import Config as HarnessConfig
from agent.node.suite import Config as NodeConfig
from agent.storage.suite import Config as StorageConfig
from agent.storage.suite import Target as StorageTarget
from agent.timing.soak import MEASURE_S as SOAK_MEASURE_S


def _emit(event: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, sort_keys=True, allow_nan=False) + "\n")
    sys.stdout.flush()


def main(argv: Optional[List[str]] = None) -> int:
    """Parse the command line, fingerprint (and benchmark) this host, and return the exit status."""
    parser = argparse.ArgumentParser(
        prog="fleet-agent",
        description="Fingerprint this host's NVIDIA GPUs and print fleet-agent/1 JSON lines.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    fp = sub.add_parser("fingerprint", help="fingerprint every GPU (read-only by default)")
    fp.add_argument("--source", metavar="FILE",
                    help="an NVML recording, nvidia-smi -q text or -q -x XML instead of the driver")
    fp.add_argument("--record", metavar="FILE",
                    help="also write what NVML answered as an nvml-recording/1 file")
    fp.add_argument("--probe-writes", action="store_true",
                    help="write each setting's current value back and record the driver's answer")
    fp.add_argument("--no-torch", action="store_true",
                    help="do not look for torch and the CUDA runtime")
    bench = sub.add_parser("bench", help="fingerprint, then run the standard matmul harness, "
                                         "the node suite and the job suite")
    bench.add_argument("--suite", choices=("all", "gemm", "node", "job", "storage"),
                       default="all",
                       help="all: the matmul, then the job suite (a transformer's "
                            "training step and decode, while the cards hold the matmul's "
                            "heat), then the node suite (memory, host links, GPU pairs, "
                            "all-reduce), then storage; gemm: the matmul alone; node: "
                            "the node suite alone; job: the job suite alone; storage: "
                            "the storage suite alone (default %(default)s)")
    bench.add_argument("--no-torch", action="store_true",
                       help="do not probe torch's versions nor time its import among the "
                            "host facts (the suites still import it)")
    bench.add_argument("--scratch", metavar="DIR",
                       help="the node's local scratch to measure (default: the "
                            "temporary folder, or home where that is memory)")
    bench.add_argument("--shared-fs", metavar="DIR", action="append", default=[],
                       help="a shared filesystem to measure (repeatable); shared mounts "
                            "the host has are measured too, where writable")
    bench.add_argument("--storage-budget-s", type=float, default=StorageConfig.budget_s,
                       help="the storage suite's time on the node (default %(default)s)")
    bench.add_argument("--checkpoint-gib", type=float, default=2.0,
                       help="the checkpoint's size in GiB, shrunk to what the budget "
                            "holds (default %(default)s)")
    bench.add_argument(
        "--job-compile", action="store_true",
        help="the job suite's training step and decode under torch.compile too, beside "
             "eager: each with the backend the node's eager figures made fastest, gated "
             "against float32 as the backends are, compile times recorded apart (cold "
             "compiles are 20-40 s a GPU, past the stage's minute: not by default)")
    bench.add_argument("--dtype", choices=DTYPES, default=DEFAULT_DTYPE)
    bench.add_argument("--size", type=int, default=DEFAULT_SIZE,
                       help=f"M = N = K (default {DEFAULT_SIZE})")
    bench.add_argument("-m", type=int, help="M, overriding --size")
    bench.add_argument("-n", type=int, help="N, overriding --size")
    bench.add_argument("-k", type=int, help="K, overriding --size")
    bench.add_argument("--pause-ms", type=float,
                       help="burst mode: pause this long between timed runs (a cool-start "
                            "figure, like --quick)")
    bench.add_argument("--quick", action="store_true",
                       help="the cool-start figure: warm up until 1-s windows agree and "
                            "measure (under 20 s a GPU), instead of loading every GPU until "
                            "throughput and temperature stop moving (the soaked default)")
    l2 = bench.add_mutually_exclusive_group()
    l2.add_argument("--warm-l2", action="store_true", help="do not flush the L2 between runs")
    l2.add_argument("--flush-always", action="store_true",
                    help="flush the L2 before every run even where A, B and C together "
                         "outsize the flush buffer (by default, sustained runs leave the "
                         "flush out there: they evict the L2 themselves)")
    # Harness 1.1's opt-in, 1.2's default: still accepted from older scripts.
    l2.add_argument("--flush-auto", action="store_true", help=argparse.SUPPRESS)
    bench.add_argument("--sequential", action="store_true",
                       help="one GPU at a time instead of all at once")
    bench.add_argument("--gpus", help="comma-separated NVML indexes to benchmark")
    defaults = HarnessConfig()
    bench.add_argument("--measure-s", type=float,
                       help=f"measure this long once soaked (default {SOAK_MEASURE_S:g}), or "
                            "at least this long after a quick warm-up (default 6)")
    bench.add_argument("--soak-cap-s", type=float, default=defaults.soak_cap_s,
                       help="stop waiting for the matmul's, and the job's training step's, "
                            "load to soak after this long and flag the result not_soaked "
                            "(default %(default)s)")
    bench.add_argument("--soak-span-s", type=float, default=defaults.soak_span_s,
                       help="fit the soak's slopes over this trailing span; no GPU soaks "
                            "sooner (default %(default)s)")
    bench.add_argument("--soak-window-s", type=float, default=defaults.soak_window_s,
                       help="the soak curve's window (default %(default)s)")
    bench.add_argument("--max-warmup-s", type=float, default=defaults.max_warmup_s,
                       help="--quick: give up waiting for a steady card after this long "
                            "(default %(default)s)")
    bench.add_argument("--max-total-s", type=float, default=defaults.max_total_s,
                       help="--quick: stop extending a measurement whose sub-windows "
                            "disagree once the run on a GPU has lasted this long "
                            "(default %(default)s)")
    bench.add_argument("--lock-clocks", type=int, metavar="MHZ",
                       help="lock the SM clock during the run "
                            "(changes a GPU setting; reset after)")
    bench.add_argument("--cpu", action="store_true",
                       help="run the harness on the CPU with torch (for tests; use small sizes)")
    cluster_options.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "cluster":
        return cluster_step.main(cluster_options.config(args), _emit)
    config: Optional[HarnessConfig] = None
    node: Optional[NodeConfig] = None
    if args.command == "bench" and args.suite in ("all", "node"):
        node = NodeConfig.for_cpu() if args.cpu else NodeConfig()
        node.gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
    storage: Optional[StorageConfig] = None
    if args.command == "bench" and args.suite in ("all", "storage"):
        storage = StorageConfig(
            targets=([StorageTarget(args.scratch, "scratch", "inventory")]
                     if args.scratch else [])
            + [StorageTarget(p, "shared", "inventory") for p in args.shared_fs],
            budget_s=args.storage_budget_s,
            checkpoint_bytes=int(args.checkpoint_gib * (1 << 30)))
        if args.cpu:  # the tests' sizes: a few seconds beside the CPU suites
            storage.file_bytes, storage.small_files = 8 << 20, 100
            storage.checkpoint_bytes = min(storage.checkpoint_bytes, 16 << 20)
            storage.budget_s = min(storage.budget_s, 5.0)
    job: Optional[JobConfig] = None
    if args.command == "bench" and args.suite in ("all", "job"):
        job = JobConfig.for_cpu() if args.cpu else JobConfig()
        job.gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
        job.sequential = args.sequential
        job.compile = args.job_compile
        if not args.cpu:
            job.cap_s = args.soak_cap_s
    if args.command == "bench" and args.suite in ("all", "gemm"):
        config = HarnessConfig(
            dtype=args.dtype,
            m=args.m or args.size, n=args.n or args.size, k=args.k or args.size,
            mode="burst" if args.pause_ms is not None else "sustained",
            protocol="quick" if args.quick or args.pause_ms is not None else "soaked",
            pause_ms=args.pause_ms if args.pause_ms is not None else 0.0,
            warm_l2=args.warm_l2,
            flush="always" if args.flush_always else "auto",
            sequential=args.sequential,
            gpus=[int(g) for g in args.gpus.split(",")] if args.gpus else None,
            device="cpu" if args.cpu else "cuda",
            measure_s=args.measure_s,
            soak_cap_s=args.soak_cap_s,
            soak_span_s=args.soak_span_s,
            soak_window_s=args.soak_window_s,
            max_warmup_s=args.max_warmup_s,
            max_total_s=args.max_total_s,
            lock_clocks_mhz=args.lock_clocks,
        )
    try:
        document = collect(
            source_path=getattr(args, "source", None),
            probe_writes=getattr(args, "probe_writes", False),
            record_path=getattr(args, "record", None),
            probe_torch=not getattr(args, "no_torch", False),
            emit=_emit,
            bench=config,
            node=node,
            job=job,
            storage=storage,
        )
    except SourceError as exc:
        sys.stderr.write(f"fleet-agent: {exc}\n")
        return 2
    _emit({"event": "document", "document": document})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The node's all-reduce: torch.distributed, one process per GPU spawned by the agent,
reported as nccl-tests reports it so that its figures compare with what users know.

Each rank times every all-reduce with CUDA events on its own stream (the host clock on
the CPU path, where gloo's all-reduce returns when done); an iteration took as long as
its slowest rank, so the per-iteration maximum over ranks is kept. algbw is the tensor's
bytes over that time and busbw = algbw x 2(n-1)/n (nccl-tests' PERFORMANCE.md: the
bandwidth each GPU's link carried, comparable with its datasheet figure whatever n). The
first all-reduce of each size checks its sum before any time counts.

The ranks are `python -c` children of the agent's own Python, importing the agent from
where it was loaded (the zipapp or the source tree), so nothing beyond the agent needs to
be on the host.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from agent.node import bandwidth

WARMUP = 5  # nccl-tests' default warm-up iterations
ITERATIONS = 20  # and its default timed ones
RESULT_PREFIX = "fleet-allreduce "
# NCCL says at INFO which transport each channel's connection took ("Channel 00/0 :
# 0[0] -> 1[1] via P2P/CUMEM/read", "via SHM/direct/direct", "[send] via NET/Socket/0")
# and which of its settings came from the environment ("NCCL_P2P_DISABLE set by
# environment to 1."). INIT and ENV are the subsystems that print both; the rest (graph
# search, tuning tables) would be hundreds of lines a rank.
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
# The path runs to the line's end: a network's name may hold a space ("via NET/AWS
# Libfabric/0/GDRDMA", NVIDIA/nccl src/transport/net.cc prints the net's own name).
_VIA = re.compile(r"\bvia (P2P|SHM|NET|COLLNET|NVLS|PXN)(/[^\r\n]*)?")
_SET_BY_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to ([^\s]{1,128})")
# NVLS shows as channels of its own ("24 coll channels, ..., 0 nvls channels, ..."), not
# as a "via": counted where NCCL built some.
_NVLS = re.compile(r"\b[1-9][0-9]* nvls channels\b|\bConnected NVLS\b")
# The settings that steer NCCL's transports or the ranks' GPUs, as the agent ran under
# them: what a finding names as a cause. Bounded: a value is a setting, not a payload.
MAX_SETTINGS = 32


def settings(environ: "Dict[str, str] | os._Environ[str]",
             prefixes: Tuple[str, ...] = ("NCCL_",)) -> Dict[str, str]:
    """The variables of `environ` named with one of `prefixes` (NCCL_* by default, GLOO_*
    too for the cluster's ranks) and CUDA_VISIBLE_DEVICES, values cut at 128."""
    named = sorted(k for k in environ
                   if k.startswith(prefixes) or k == "CUDA_VISIBLE_DEVICES")
    return {k[:64]: str(environ[k])[:128] for k in named[:MAX_SETTINGS]}


def transports(logs: Sequence[str], max_paths: int = 8) -> Dict[str, Any]:
    """What NCCL's INFO lines of every rank say it used: {"transports": {"P2P": 24, ...}
    (connections per transport), "paths": the distinct "P2P/CUMEM/read" forms (the first
    `max_paths`), "set_by_environment": ["NCCL_P2P_DISABLE=1", ...]}."""
    counts: Dict[str, int] = {}
    paths: List[str] = []
    said: List[str] = []
    for log in logs:
        for line in log.splitlines():
            if "NCCL INFO" not in line:
                continue
            via = _VIA.search(line)
            if via:
                counts[via.group(1)] = counts.get(via.group(1), 0) + 1
                path = (via.group(1) + (via.group(2) or "")).rstrip()[:64]
                if path not in paths and len(paths) < max_paths:
                    paths.append(path)
            elif _NVLS.search(line):
                counts["NVLS"] = counts.get("NVLS", 0) + 1
            env = _SET_BY_ENV.search(line)
            if env:
                text = f"{env.group(1)}={env.group(2).rstrip('.')}"[:160]
                if text not in said and len(said) < 16:
                    said.append(text)
    return {"transports": counts, "paths": paths, "set_by_environment": said}


class CollectiveError(Exception):
    """The all-reduce could not run, or its ranks failed; the message says why."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def agent_root() -> str:
    """Where the agent was imported from (the zipapp or the source tree), for a child
    `python -c` to import it from: the all-reduce's ranks, the job's rerun."""
    import agent

    # agent/__init__.py sits in the zipapp (x.pyz/agent/) or in the source tree.
    return os.path.dirname(os.path.dirname(os.path.abspath(agent.__file__)))


def _rank_command(rank: int, world: int, port: int, backend: str, device: Optional[int],
                  sizes: Sequence[int], warmup: int, iterations: int) -> List[str]:
    boot = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from agent.node.collective import rank_main; sys.exit(rank_main(sys.argv[2:]))")
    args = ["--rank", str(rank), "--world", str(world), "--port", str(port),
            "--backend", backend, "--sizes", ",".join(str(s) for s in sizes),
            "--warmup", str(warmup), "--iterations", str(iterations)]
    if device is not None:
        args += ["--device", str(device)]
    return [sys.executable, "-c", boot, agent_root(), *args]


def run(devices: Sequence[Optional[int]], backend: str, sizes: Sequence[int],
        timeout_s: float, warmup: int = WARMUP, iterations: int = ITERATIONS,
        env: Optional[Dict[str, str]] = None
        ) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """All-reduce over one rank per entry of `devices` (torch indexes; None on the CPU):
    per size, the per-iteration times in ms of the slowest rank and the names of the
    settings (agent/source/settings.py's families) rank 0 ran under (`env`); and, through
    NCCL, the transports its ranks' logs name (`transports`). `env`: the ranks'
    environment, the agent's own by default (agent/rerun/allreduce.py takes settings out)."""
    port = _free_port()
    env = dict(os.environ if env is None else env)
    if backend == "nccl":
        env.update(NCCL_DEBUG_ENV)
    # Each rank writes to files, not pipes: a rank blocked on a full pipe while rank 0
    # waits for it in a collective would hold the node until the timeout.
    with contextlib.ExitStack() as files:
        streams = [(files.enter_context(tempfile.TemporaryFile()),
                    files.enter_context(tempfile.TemporaryFile())) for _ in devices]
        procs = [subprocess.Popen(
            _rank_command(rank, len(devices), port, backend, device, sizes, warmup,
                          iterations),
            stdout=streams[rank][0], stderr=streams[rank][1], stdin=subprocess.DEVNULL,
            env=env)
            for rank, device in enumerate(devices)]
        deadline = time.monotonic() + timeout_s
        try:
            for proc in procs:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise CollectiveError(f"the {len(devices)}-rank all-reduce did not finish in "
                                  f"{timeout_s:g} s") from None
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        outputs = []
        for rank, proc in enumerate(procs):
            out, err = streams[rank]
            out.seek(0)
            err.seek(0)
            outputs.append((proc.returncode, out.read().decode("utf-8", "replace"),
                            err.read().decode("utf-8", "replace")))
    failed = [(rank, code, err) for rank, (code, _, err) in enumerate(outputs) if code != 0]
    if failed:
        rank, code, said = failed[0]
        tail = " | ".join(said.strip().splitlines()[-3:])[-600:]
        raise CollectiveError(f"rank {rank} of {len(devices)} exited {code}: {tail}")
    rows = [json.loads(line[len(RESULT_PREFIX):]) for line in outputs[0][1].splitlines()
            if line.startswith(RESULT_PREFIX)]
    if len(rows) != len(sizes):
        raise CollectiveError(f"rank 0 reported {len(rows)} of {len(sizes)} sizes")
    # NCCL logs to stdout unless NCCL_DEBUG_FILE says otherwise: read both.
    seen = transports([out + "\n" + err for _, out, err in outputs])
    return rows, seen


def figures(rows: Sequence[Dict[str, Any]], ranks: int, backend: str, dtype: str,
            stack: bandwidth.Stack, started: float,
            datasheet: "tuple[Optional[float], Optional[str]]",
            **fields: Any) -> List[Dict[str, Any]]:
    """One allreduce NodeResult per size: busbw samples and the median algbw beside;
    `fields` (the transport, the settings) go on each."""
    factor = 2.0 * (ranks - 1) / ranks
    out = []
    for row in rows:
        size = int(row["size"])
        algbw = [size / (ms / 1e3) / 1e9 for ms in row["ms"] if ms > 0]
        if not algbw:
            continue
        busbw = [a * factor for a in algbw]
        result = bandwidth.figure(
            stack, "allreduce", busbw, size,
            f"bus bandwidth: algbw x 2(n-1)/n, n = {ranks} (nccl-tests)", backend, started,
            datasheet=datasheet, gpus_in_run=ranks, dtype=dtype,
            nccl_version=stack.nccl_version if backend == "nccl" else None, **fields)
        result["algbw_gbs"] = round(statistics.median(algbw), 3)
        out.append(result)
    return out


def rank_main(argv: List[str]) -> int:
    """One rank: join the group, check each size's sum, time its all-reduces, and (rank 0)
    print one line per size."""
    parser = argparse.ArgumentParser(prog="fleet-allreduce-rank")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", type=int)
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    args = parser.parse_args(argv)
    import datetime

    from agent.source.settings import family_of

    # What the rank itself ran under: the evidence that a rerun ran without a setting.
    ran_with = sorted(name for name in os.environ if family_of(name) is not None)[:64]

    import torch
    import torch.distributed as dist

    cuda = args.device is not None
    if cuda:
        torch.cuda.set_device(args.device)
    device = torch.device(f"cuda:{args.device}" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            count = size // torch.empty((), dtype=dtype).element_size()
            tensor = torch.full((count,), float(args.rank + 1), dtype=dtype, device=device)
            dist.all_reduce(tensor)
            expected = args.world * (args.world + 1) / 2
            if not bool(torch.all(tensor == expected)):
                raise SystemExit(f"all-reduce of {size} bytes gave a wrong sum "
                                 f"(expected {expected:g} everywhere)")
            # Random values, never a constant; summed in place, they grow world-fold a
            # step and stay finite in bf16 over the few dozen steps timed (8^30 < 1e28).
            tensor.uniform_(-1.0, 1.0)
            for _ in range(args.warmup):
                dist.all_reduce(tensor)
            times = _timed(torch, dist, tensor, args.iterations, cuda)
            slowest = torch.tensor(times, dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if args.rank == 0:
                sys.stdout.write(RESULT_PREFIX + json.dumps(
                    {"size": size, "ms": [round(float(t), 6) for t in slowest.tolist()],
                     "env": ran_with}) + "\n")
                sys.stdout.flush()
    finally:
        dist.destroy_process_group()
    return 0


def _timed(torch: Any, dist: Any, tensor: Any, iterations: int, cuda: bool) -> List[float]:
    if not cuda:
        times = []
        for _ in range(iterations):
            start = time.perf_counter()
            dist.all_reduce(tensor)
            times.append((time.perf_counter() - start) * 1e3)
        return times
    stream = torch.cuda.current_stream()
    marks = []
    for _ in range(iterations):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        dist.all_reduce(tensor)
        stop.record(stream)
        marks.append((start, stop))
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in marks]

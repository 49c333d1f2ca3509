"""One rank of a cluster step: join the world at the rendezvous, check and time each
collective, and report on a file of JSON lines that the node's command reads
(agent/cluster/step.py).

The rank says what it does as it goes ("gpu", "backend", "progress", "joined", "figure",
"error"), one JSON object a line, to a file of its own rather than to stdout: NCCL writes
its INFO log to stdout through C's buffer, which may cut a line of ours in two.

An iteration took as long as its slowest rank: each rank times its own (CUDA events on the
GPU, the host clock on the CPU, where gloo's collective returns when done), then the times
are max-reduced over the world, so every node holds, and reports, the same figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import threading
import time
from typing import IO, Any, Dict, List, Optional, Sequence

WARMUP = 5  # nccl-tests' default warm-up iterations
ITERATIONS = 20  # and its default timed ones
# Every collective a rank can run: all-reduce (data parallel), all-gather and
# reduce-scatter (FSDP's two halves), all-to-all (a mixture of experts' dispatch). A pair
# of nodes runs the first two (`PAIR_OPS`: enough to judge the link between them); the
# whole cluster's step runs all four (`--whole`).
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
PAIR_OPS = ("all_reduce", "all_gather")
# nccl-tests' own default sweep for a node's network, and a CPU's smaller one: gloo over
# loopback moves about 1 GB/s on a 2-core host, so 1 GiB would take minutes.
DEFAULT_SIZES = {"nccl": (16 << 20, 256 << 20, 1 << 30), "gloo": (1 << 20, 16 << 20)}
# The whole cluster's sweep: on to 16 GiB under NCCL, the buffer Azure's node health
# checks run their all-reduce at, since a fabric of several nodes reaches its rate only
# at large buffers (nccl-tests' users sweep -b 8 -e 8G and beyond). A size runs only where
# every rank's GPU holds it and its predicted time stays in `SIZE_BUDGET_S` (`_skip`).
WHOLE_SIZES = {"nccl": (16 << 20, 256 << 20, 1 << 30, 4 << 30, 16 << 30),
               "gloo": DEFAULT_SIZES["gloo"]}
# The most seconds one op at one size may be predicted to take (its warm-up and timed
# iterations, from the size before it): a degraded fabric (a socket fallback at 3 GB/s
# would take 10 s an iteration of 16 GiB) stops its sweep there, said, instead of running
# the step past its timeout and losing every figure.
SIZE_BUDGET_S = 30.0
# Of the GPU's free memory, the share the largest buffers may take.
MEMORY_SHARE = 0.8
# float32 on both paths: nccl-tests' default type (`-d float`), so that a busbw here is
# the figure a user's nccl-tests run gives; a sum of small integers is exact in it, which
# the first result's check relies on. bf16 would halve the bytes per element, not the
# bandwidth, and gloo sums bf16 on the CPU element by element, slower than the wire.
DTYPE = "float32"
EXIT_FAILED = 3


class Failure(Exception):
    """What the rank reports as its error: the stage and the message are the event's."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


def human_size(size: int) -> str:
    """16 MiB, 1 GiB, 4 KiB or 100 B: how the progress lines name a size."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def first_line(exc: BaseException) -> str:
    """An exception as one short line: torch's distributed errors carry C++ frames after
    the first line, and the host's text is bounded before it leaves."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:400]


class Reporter:
    """The rank's JSON lines to the node's command."""

    def __init__(self, out: IO[str], rank: int, local_rank: int) -> None:
        self.out = out
        self.rank = rank
        self.local_rank = local_rank
        self.ticked = 0.0

    def say(self, kind: str, **fields: Any) -> None:
        self.out.write(json.dumps({"kind": kind, "rank": self.rank,
                                   "local_rank": self.local_rank, **fields}) + "\n")
        self.out.flush()

    def tick(self) -> None:
        """An iteration went through: the node's command hears the rank is alive (once a
        second at most), so that only silence past the timeout counts as a hang, however
        long a phase of 25 iterations of 1 GiB takes."""
        now = time.monotonic()
        if now - self.ticked >= 1.0:
            self.ticked = now
            self.say("tick")


def _exit_with_parent() -> None:
    # The node's command holds our stdin open for as long as it runs: EOF means it is gone
    # (killed, even with SIGKILL, or stopping us), and a rank must never outlive it.
    def watch() -> None:
        # os.read on the descriptor, not sys.stdin: a daemon thread blocked inside a
        # buffered reader aborts the interpreter's exit ("could not acquire lock").
        try:
            while os.read(0, 4096):
                pass
        except (OSError, ValueError):
            pass
        os._exit(EXIT_FAILED)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _parse(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fleet-cluster-rank")
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--local-rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--ranks-per-node", type=int, required=True)
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), required=True)
    parser.add_argument("--sizes", default="", help="bytes, comma-separated; empty: default")
    parser.add_argument("--ops", default=",".join(PAIR_OPS), help="collectives, in order")
    parser.add_argument("--whole", action="store_true",
                        help="the whole cluster's sweep (WHOLE_SIZES) where --sizes is empty")
    parser.add_argument("--timeout-s", type=float, required=True)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--messages", required=True, help="the file of JSON lines")
    return parser.parse_args(argv)


def rank_main(argv: List[str]) -> int:
    """A rank's entry point, started by step.py as `python -c` of the agent's own Python."""
    args = _parse(argv)
    _exit_with_parent()
    with open(args.messages, "a", encoding="utf-8") as out:
        report = Reporter(out, args.rank, args.local_rank)
        try:
            _run(args, report)
        except Failure as failure:
            report.say("error", stage=failure.stage, message=str(failure)[:600])
            # Not through the interpreter's exit: a process group whose peer is gone may
            # hang in its destructor.
            sys.stdout.flush()
            os._exit(EXIT_FAILED)
        except Exception as exc:  # the node's command must hear of any
            report.say("error", stage="rank", message=f"rank {args.rank}: {first_line(exc)}")
            sys.stdout.flush()
            os._exit(EXIT_FAILED)
    return 0


def _run(args: argparse.Namespace, report: Reporter) -> None:
    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        visible = torch.cuda.device_count()
        if args.local_rank >= visible:
            raise Failure("ranks", f"--ranks-per-node {args.ranks_per_node} needs "
                                   f"{args.ranks_per_node} GPUs, and CUDA sees {visible} "
                                   "here (CUDA_VISIBLE_DEVICES="
                                   f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
        torch.cuda.set_device(args.local_rank)
        device = torch.device("cuda", args.local_rank)
        report.say("gpu", **_gpu(torch, args.local_rank))
    report.say("backend", backend=backend)
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
             else list((WHOLE_SIZES if args.whole else DEFAULT_SIZES)[backend]))
    ops = [op for op in args.ops.split(",") if op]
    address = f"{args.address}:{args.port}"
    started = time.monotonic()
    report.say("progress", message=f"joining {address} as rank {args.rank} of {args.world}")
    try:
        dist.init_process_group(backend, init_method=f"tcp://{address}", rank=args.rank,
                                world_size=args.world,
                                timeout=datetime.timedelta(seconds=args.timeout_s))
        # NCCL starts its communicator at the first collective, not at init: the world has
        # met only once one went through.
        met = torch.ones(1, device=device)
        dist.all_reduce(met)
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # DistStoreError, DistNetworkError, ...
        raise Failure("rendezvous", f"could not join the rendezvous {address} within "
                                    f"{args.timeout_s:g} s: rank {args.rank} of {args.world}: "
                                    f"{first_line(exc)}") from None
    if int(met.item()) != args.world:
        raise Failure("rendezvous", f"the world's first sum was {met.item():g}, not "
                                    f"{args.world}: ranks disagree on the world")
    report.say("joined", message=f"joined {address}: {args.world} ranks in "
                                 f"{time.monotonic() - started:.1f} s")
    for op in ops:
        last: Optional[Dict[str, Any]] = None
        for size in sorted(sizes):
            why = _skip(torch, dist, op, size, last, args, device)
            if why is not None:
                if args.local_rank == 0:
                    report.say("progress", message=f"{op}: {why}")
                break
            try:
                row = _measure(torch, dist, op, size, args, device, report)
            except Failure:
                raise
            except Exception as exc:  # a peer gone: gloo raises, NCCL aborts
                if last is None and _unsupported(exc):
                    # Every rank runs the same torch, so every rank lands here at once.
                    if args.local_rank == 0:
                        report.say("progress", message=f"{op}: not run: {backend} in this "
                                                       f"torch lacks it ({first_line(exc)})")
                    break
                raise Failure(op, f"{op} of {human_size(size)} failed on rank {args.rank}: "
                                  f"{first_line(exc)}") from None
            last = row
            if args.local_rank == 0:
                report.say("figure", **row)
    dist.destroy_process_group()


def _unsupported(exc: BaseException) -> bool:
    """Whether a collective's first call failed because the backend does not have it
    (gloo before torch 2.6 had no reduce-scatter), not because a peer went."""
    text = str(exc).lower()
    return "not support" in text or "unsupported" in text


def _skip(torch: Any, dist: Any, op: str, size: int, last: Optional[Dict[str, Any]],
          args: argparse.Namespace, device: Any) -> Optional[str]:
    """Why `op` stops before `size`, the same on every rank (both reasons rest on figures
    every rank holds alike: the max-reduced times, the min-reduced free memory); None
    where it runs."""
    if last is not None:
        scale = size / float(last["size_bytes"])
        predicted = sorted(last["ms"])[len(last["ms"]) // 2] * scale / 1e3 \
            * (args.warmup + args.iterations)
        if predicted > SIZE_BUDGET_S:
            return (f"stopped before {human_size(size)}: predicted {predicted:.0f} s at "
                    f"{human_size(int(last['size_bytes']))}'s pace, over the "
                    f"{SIZE_BUDGET_S:g}-s budget of one size")
    if device.type != "cuda":
        return None
    # The smaller sizes' buffers back to the driver first: what the caching allocator
    # keeps counts as used in the driver's free figure.
    torch.cuda.empty_cache()
    free = float(torch.cuda.mem_get_info(device)[0])
    least = torch.tensor([free], dtype=torch.float64, device=device)
    dist.all_reduce(least, op=dist.ReduceOp.MIN)
    # The buffers a size holds at once: the op's in and out (all_reduce: the buffer and
    # its source copy), from 2 x size.
    if 2.0 * size > MEMORY_SHARE * float(least.item()):
        return (f"stopped before {human_size(size)}: the GPU with the least free memory "
                f"has {float(least.item()) / (1 << 30):.1f} GiB, and the buffers need "
                f"{2.0 * size / (1 << 30):.1f}")
    return None


def _gpu(torch: Any, index: int) -> Dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    uuid: Optional[str] = None
    try:
        uuid = str(props.uuid)
        # torch prints the bare UUID; NVML and nvidia-smi, which the fingerprint holds,
        # prefix it "GPU-".
        if not uuid.startswith(("GPU-", "MIG-")):
            uuid = "GPU-" + uuid
    except AttributeError:  # torch before 2.1
        uuid = None
    return {"index": index, "uuid": uuid, "name": str(props.name)[:64]}


def _measure(torch: Any, dist: Any, op: str, size: int, args: argparse.Namespace,
             device: Any, report: Reporter) -> Dict[str, Any]:
    """One op at one size: check the first result, warm up, time, max-reduce the times."""
    world = args.world
    element = 4  # float32
    dtype = torch.float32
    if op == "all_reduce":
        count = max(1, size // element)
        # Each iteration sums a copy of the same random buffer, outside the timed span:
        # summed in place the values would grow world-fold an iteration, past float32's
        # range on a large world (nccl-tests keeps its send buffer apart the same way).
        source = torch.empty(count, dtype=dtype, device=device).uniform_(-1.0, 1.0)
        tensor = torch.full((count,), float(args.rank + 1), dtype=dtype, device=device)
        dist.all_reduce(tensor)
        expected = world * (world + 1) / 2
        wrong = not bool(torch.all(tensor == expected))

        def prepare() -> None:
            tensor.copy_(source)

        def once() -> None:
            dist.all_reduce(tensor)
    elif op == "reduce_scatter":
        # nccl-tests' reduce_scatter size is the whole buffer scattered from; each rank
        # receives its share of the sum.
        chunk = max(1, size // element // world)
        count = chunk * world
        whole = torch.full((count,), float(args.rank + 1), dtype=dtype, device=device)
        part = torch.empty(chunk, dtype=dtype, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        scatter(part, whole)
        wrong = not bool(torch.all(part == world * (world + 1) / 2))
        whole.uniform_(-1.0, 1.0)  # read, never written: the sums do not grow

        def prepare() -> None:
            pass

        def once() -> None:
            scatter(part, whole)
    elif op == "all_to_all":
        # nccl-tests' alltoall size is each rank's send buffer; block j of rank i goes
        # to rank j, so rank r's block i holds i x world + r + 1 (exact in float32 up to
        # 4,096 ranks).
        chunk = max(1, size // element // world)
        count = chunk * world
        sent = (torch.arange(world, dtype=dtype, device=device) + args.rank * world + 1
                ).repeat_interleave(chunk)
        got = torch.empty(count, dtype=dtype, device=device)
        dist.all_to_all_single(got, sent)
        places = (torch.arange(world, dtype=dtype, device=device) * world + args.rank + 1
                  ).unsqueeze(1)
        wrong = not bool(torch.all(got.view(world, chunk) == places))
        sent.uniform_(-1.0, 1.0)

        def prepare() -> None:
            pass

        def once() -> None:
            dist.all_to_all_single(got, sent)
    else:
        # nccl-tests' all_gather size is the whole gathered buffer; each rank sends its
        # share of it.
        chunk = max(1, size // element // world)
        count = chunk * world
        mine = torch.full((chunk,), float(args.rank + 1), dtype=dtype, device=device)
        gathered = torch.empty(count, dtype=dtype, device=device)
        dist.all_gather_into_tensor(gathered, mine)
        places = torch.arange(1, world + 1, dtype=dtype, device=device).unsqueeze(1)
        wrong = not bool(torch.all(gathered.view(world, chunk) == places))
        mine.uniform_(-1.0, 1.0)

        def prepare() -> None:
            pass

        def once() -> None:
            dist.all_gather_into_tensor(gathered, mine)
    used = count * element
    name = f"{op} of {human_size(used)} over {world} ranks"
    # Every rank learns how many ranks got a wrong first result, so that all stop together
    # instead of the right ones waiting on the wrong ones until the timeout.
    flags = torch.tensor([1.0 if wrong else 0.0], dtype=torch.float64, device=device)
    dist.all_reduce(flags)
    if flags.item() > 0:
        raise Failure(op, f"the first {name} gave a wrong result on {int(flags.item())} of "
                          f"{world} ranks" + (f" (rank {args.rank} among them)" if wrong else ""))
    if args.local_rank == 0:
        report.say("progress", message=f"{name}: checked; {args.warmup} warm-up, "
                                       f"{args.iterations} timed")
    for _ in range(args.warmup):
        prepare()
        once()
        if device.type != "cuda":
            report.tick()
    times = _timed(torch, device, prepare, once, args.iterations, report)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return {"op": op, "size_bytes": used, "dtype": DTYPE, "ranks": world,
            "warmup": args.warmup, "iterations": args.iterations, "checked": True,
            "ms": [float(t) for t in slowest.tolist()]}


def _timed(torch: Any, device: Any, prepare: Any, once: Any, iterations: int,
           report: Reporter) -> List[float]:
    """Each iteration's milliseconds on this rank."""
    if device.type != "cuda":
        times = []
        for _ in range(iterations):
            prepare()
            start = time.perf_counter()
            once()
            times.append((time.perf_counter() - start) * 1e3)
            report.tick()
        return times
    stream = torch.cuda.current_stream()
    marks = []
    for _ in range(iterations):
        prepare()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        once()
        stop.record(stream)
        marks.append((start, stop))
    # Polled rather than one synchronize: each iteration done is a tick. The GPU runs the
    # queue on its own meanwhile, back to back, as nccl-tests runs its iterations.
    for _, stop in marks:
        while not stop.query():
            time.sleep(0.002)
        report.tick()
    torch.cuda.synchronize()
    return [float(a.elapsed_time(b)) for a, b in marks]


def boot_command(python: str, root: str, args: Sequence[str]) -> List[str]:
    """The command that starts a rank: the agent's own Python importing the agent from
    where it was loaded (the zipapp or the source tree), as the node's all-reduce does."""
    boot = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from agent.cluster.rank import rank_main; sys.exit(rank_main(sys.argv[2:]))")
    return [python, "-c", boot, root, *args]

"""An independent check of the node suite's figures, on the device tool: the same copies
and all-reduce through CuPy's bindings of the CUDA runtime and NCCL, with none of the
agent's code or torch in the way.

Per GPU a 1 GiB device copy (cudaMemcpyAsync, bytes read plus written) and 256 MiB host
to device and back from pinned memory (cudaMallocHost); per pair 512 MiB one way
(cudaMemcpyPeerAsync, peer access enabled); and an out-of-place NCCL all-reduce of fp16
(nccl-tests' default placement, one process driving every GPU in an NCCL group) at 16 MiB
to 1 GiB, busbw = algbw x 2(n-1)/n. Each copy repeated ten times after two untimed, each
bracketed by CUDA events on its stream; the all-reduce five warm-up and 20 timed, each
iteration as long as its slowest GPU. Medians printed beside the agent's own figures when
a suite document is given. Reads only; changes no GPU setting.

    python3 bench/node_crosscheck.py --suite $OUT/suite.jsonl --out $OUT/crosscheck.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cupy as cp
from cupy.cuda import nccl, runtime

MiB, GiB = 1 << 20, 1 << 30
H2D, D2H, D2D = 1, 2, 3


def timed(stream: Any, op: Callable[[], None], counted: int, repeats: int = 10) -> float:
    """The median GB/s of `repeats` runs of `op` on `stream`, after two untimed."""
    for _ in range(2):
        op()
    marks = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(repeats)]
    for start, stop in marks:
        start.record(stream)
        op()
        stop.record(stream)
    marks[-1][1].synchronize()
    return statistics.median(counted / (cp.cuda.get_elapsed_time(a, b) / 1e3) / 1e9
                             for a, b in marks)


def per_gpu(gpu: int) -> dict[str, float]:
    with cp.cuda.Device(gpu):
        stream = cp.cuda.Stream(non_blocking=True)
        src = cp.random.randint(0, 255, GiB, dtype=cp.uint8)
        dst = cp.empty_like(src)
        hbm = timed(stream, lambda: runtime.memcpyAsync(dst.data.ptr, src.data.ptr, GiB, D2D,
                                                        stream.ptr), 2 * GiB)
        size = 256 * MiB
        pinned = cp.cuda.alloc_pinned_memory(size)
        on_device = cp.empty(size, dtype=cp.uint8)
        h2d = timed(stream, lambda: runtime.memcpyAsync(on_device.data.ptr, pinned.ptr, size,
                                                        H2D, stream.ptr), size)
        d2h = timed(stream, lambda: runtime.memcpyAsync(pinned.ptr, on_device.data.ptr, size,
                                                        D2H, stream.ptr), size)
    return {"memory_copy": hbm, "host_to_device": h2d, "device_to_host": d2h}


def pair(a: int, b: int) -> float:
    size = 512 * MiB
    for first, second in ((a, b), (b, a)):
        with cp.cuda.Device(first):
            if runtime.deviceCanAccessPeer(first, second):
                with contextlib.suppress(runtime.CUDARuntimeError):  # already enabled
                    runtime.deviceEnablePeerAccess(second)
    with cp.cuda.Device(b):
        dst = cp.empty(size, dtype=cp.uint8)
    with cp.cuda.Device(a):
        src = cp.random.randint(0, 255, size, dtype=cp.uint8)
        stream = cp.cuda.Stream(non_blocking=True)
        return timed(stream, lambda: runtime.memcpyPeerAsync(
            dst.data.ptr, b, src.data.ptr, a, size, stream.ptr), size)


def allreduce(gpus: int, size: int) -> float:
    """Median busbw of an out-of-place fp16 all-reduce of `size` bytes over `gpus` GPUs."""
    comms = nccl.NcclCommunicator.initAll(list(range(gpus)))
    count = size // 2
    bufs, streams = [], []
    for gpu in range(gpus):
        with cp.cuda.Device(gpu):
            bufs.append((cp.random.random(count).astype(cp.float16),
                         cp.empty(count, dtype=cp.float16)))
            streams.append(cp.cuda.Stream(non_blocking=True))

    def launch() -> None:
        nccl.groupStart()
        for gpu in range(gpus):
            send, recv = bufs[gpu]
            comms[gpu].allReduce(send.data.ptr, recv.data.ptr, count, nccl.NCCL_FLOAT16,
                                 nccl.NCCL_SUM, streams[gpu].ptr)
        nccl.groupEnd()

    for _ in range(5):
        launch()
    times = []
    for _ in range(20):
        marks = []
        for gpu in range(gpus):
            with cp.cuda.Device(gpu):
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                start.record(streams[gpu])
                marks.append((start, stop))
        launch()
        for gpu in range(gpus):
            with cp.cuda.Device(gpu):
                marks[gpu][1].record(streams[gpu])
        for gpu in range(gpus):
            marks[gpu][1].synchronize()
        times.append(max(cp.cuda.get_elapsed_time(a, b) for a, b in marks) / 1e3)
    for comm in comms:
        comm.destroy()
    factor = 2 * (gpus - 1) / gpus
    return statistics.median(size / t / 1e9 * factor for t in times)


def suite_figures(path: Path) -> dict[tuple[Any, ...], float]:
    """The agent's figures of a document (the last JSON line of `agent bench`)."""
    document = json.loads(path.read_text().splitlines()[-1])["document"]
    return {(r["kind"], r.get("gpu_index"), r.get("peer_index"), r.get("direction"),
             r.get("memory"), r["size_bytes"]): r["gbs"] for r in document["node"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", type=Path, help="the agent's document, to compare with")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    gpus = runtime.getDeviceCount()
    ours = suite_figures(args.suite) if args.suite else {}
    rows = []
    for gpu in range(gpus):
        for kind, gbs in per_gpu(gpu).items():
            size = GiB if kind == "memory_copy" else 256 * MiB
            memory = None if kind == "memory_copy" else "pinned"
            rows.append((f"GPU {gpu} {kind}", gbs, ours.get((kind, gpu, None, None, memory,
                                                             size))))
    for a in range(gpus):
        for b in range(a + 1, gpus):
            rows.append((f"GPU {a}->{b} one way", pair(a, b),
                         ours.get(("peer_copy", a, b, "one_way", None, 512 * MiB))))
    if gpus >= 2:
        for size in (16 * MiB, 64 * MiB, 256 * MiB, GiB):
            rows.append((f"all-reduce {size >> 20} MiB busbw", allreduce(gpus, size),
                         ours.get(("allreduce", None, None, None, None, size))))
    print(f"{'figure':32} {'CuPy':>9} {'agent':>9} {'agent/CuPy':>10}")
    for name, theirs, mine in rows:
        ratio = f"{mine / theirs - 1:+.2%}" if mine else "-"
        print(f"{name:32} {theirs:9.1f} {mine if mine else float('nan'):9.1f} {ratio:>10}")
    args.out.write_text(json.dumps([{"figure": n, "cupy_gbs": t, "agent_gbs": m}
                                    for n, t, m in rows], indent=1))


if __name__ == "__main__":
    main()

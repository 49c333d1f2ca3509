"""NVIDIA's nvbench (PyPI `cuda-bench`) on the harness's own product: one run, one process.

docs/design.md holds fleet to nvbench's repeat spread: `bench/harness_fidelity.py --nvbench`
starts this script once per repeat, as a user runs nvbench, and compares the spreads.
nvbench gives two figures. Its headline, the cold GPU mean: each sample after an L2
flush, queued behind a blocking kernel, and samples taken below 75% of the maximum SM
clock thrown away with a 50 ms pause for the card to recover, so on a power-capped card
it reports the burst level, not the sustained one (docs/design.md). And its batch figure:
back-to-back launches, no flush, for about a second after the cold samples. Everything
here is nvbench's default except, with --criterion, its stopping criterion. Writes one
JSON object to --out.

    python3 bench/nvbench_matmul.py --out nvbench.json [--criterion entropy]

The device has no network: carry `cuda-bench` as a wheel (its `cuda-bindings` is there).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from harness_fidelity import flops, inputs

COLD_MEAN = "nv/cold/time/gpu/mean"
BATCH_MEAN = "nv/batch/time/gpu/mean"


def summaries(state: dict[str, Any]) -> dict[str, str]:
    """nvbench's summaries of one state, by tag: {"nv/cold/time/gpu/mean": "0.00139", ...}."""
    return {item["tag"]: d["value"] for item in state["summaries"] for d in item["data"]
            if d["name"] == "value"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--criterion", default=None,
                        help="nvbench's stopping criterion (default: nvbench's own, stdrel)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import cuda.bench as nvbench
    import torch

    a, b, c = inputs(torch, args.size)
    torch.cuda.synchronize()

    def matmul(state: Any) -> None:
        if state.get_device() != 0:
            state.skip("the fidelity bench measures GPU 0")
            return

        def launch(launcher: Any) -> None:
            stream = torch.cuda.ExternalStream(launcher.get_stream().addressof())
            with torch.cuda.stream(stream):
                torch.matmul(a, b, out=c)

        state.exec(launch)

    registered = nvbench.register(matmul)
    if args.criterion:
        registered.set_stopping_criterion(args.criterion)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nvbench.json"
        t0 = time.perf_counter()
        nvbench.run_all_benchmarks(["nvbench_matmul", "--json", str(path)])
        wall = time.perf_counter() - t0
        doc = json.loads(path.read_text())
    [state] = [s for s in doc["benchmarks"][0]["states"] if not s.get("is_skipped")]
    found = summaries(state)
    if COLD_MEAN not in found:
        raise SystemExit(f"nvbench wrote no {COLD_MEAN}; it wrote {sorted(found)}")
    seconds = float(found[COLD_MEAN])
    batch = float(found[BATCH_MEAN]) if BATCH_MEAN in found else None
    args.out.write_text(json.dumps({
        "tflops": flops(args.size) / seconds / 1e12, "cold_mean_s": seconds,
        "batch_tflops": flops(args.size) / batch / 1e12 if batch else None,
        "criterion": args.criterion or "default", "nvbench_wall_s": wall,
        "cuda_bench": nvbench.__version__, "summaries": found}))


if __name__ == "__main__":
    main()

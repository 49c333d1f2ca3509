"""The fidelity bench's continuous reference on every GPU of a node at once: what each GPU
sustains when the whole node works, for as long as it takes to settle.

One process per GPU (CUDA_VISIBLE_DEVICES set to it, PCI order, so NVML's index and the
process's cuda:0 are one GPU), each replaying a graph of 8192³ bf16 products back to back
for --seconds (bench/harness_fidelity.py --reference-only), the level of the last
--late-s: total FLOP over total GPU time. Started together, so every GPU heats beside its
neighbours as in `fleet bench`'s soak. Reads only; changes no GPU setting.

    python3 bench/node_reference.py --seconds 180 --late-s 90 --out $OUT/reference.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, required=True, help="how many GPUs the node has")
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--late-s", type=float, default=90.0)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for gpu in range(args.gpus):
            env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                   "CUDA_VISIBLE_DEVICES": str(gpu)}
            out = Path(tmp) / f"gpu{gpu}.json"
            procs.append((gpu, out, subprocess.Popen(
                [sys.executable, str(here / "harness_fidelity.py"), "--reference-only",
                 "--gpu", str(gpu), "--size", str(args.size), "--reference-s",
                 str(args.seconds), "--late-s", str(args.late_s), "--out", str(out)],
                env=env)))
        results = {}
        for gpu, out, proc in procs:
            proc.wait(timeout=args.seconds + 300)
            results[gpu] = json.loads(out.read_text()) if proc.returncode == 0 else None
    for gpu, ref in results.items():
        if ref is None:
            print(f"GPU {gpu}: failed")
            continue
        tele = ref["telemetry"]
        print(f"GPU {gpu}: {ref['tflops']:.1f} TFLOP/s over the last {args.late_s:g} s of "
              f"{args.seconds:g} (median replay {ref['tflops_median']:.1f}), "
              f"SM {tele['sm_clock_mhz_median']} MHz, {tele['power_w_median']} W, "
              f"max {tele['temperature_c_max']} °C; per 5 s {ref['per_5s']}")
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

"""The storage suite's sequential figures against fio's on the same disk (issue 58).

For each of `--runs` rounds, on one folder: the agent's own sequential write and read
(agent/storage/sequential.py: one stream, O_DIRECT, `--block` writes, the write's time
with its fsync) and fio with the same file size, block size and direct I/O, one
synchronous job as the agent is (`--ioengine=psync --direct=1 --end_fsync=1`), write then
read of a new file; `--fallocate=none`, since the agent (as a job writing a checkpoint)
does not reserve the file's blocks first. The two take turns going first, so that a
disk whose load drifts (a shared one) weighs on both alike. Prints each round and the
medians, and whether the agent's medians are within `--tolerance` of fio's; exits 1
where they are not.

    python bench/storage_fio.py /var/tmp --size-mib 1024 --block-mib 4 --runs 5

fio (Debian's `fio`) must be on PATH: the comparison is the point, so without it the
script says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.storage.sequential import write_then_read


def fio(path: str, mode: str, size_mib: int, block_mib: int) -> tuple[float, list[str]]:
    """fio's bandwidth in GB/s (1e9 bytes) for one job, and its command line."""
    argv = ["fio", f"--name=fleet-{mode}", f"--filename={path}", f"--rw={mode}",
            f"--bs={block_mib}M", f"--size={size_mib}M", "--direct=1", "--ioengine=psync",
            "--numjobs=1", "--iodepth=1", "--fallocate=none", "--output-format=json"]
    if mode == "write":
        argv.append("--end_fsync=1")
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    job = json.loads(done.stdout)["jobs"][0][mode]
    return float(job["bw_bytes"]) / 1e9, argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a folder on the disk to measure")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--block-mib", type=int, default=4)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--tolerance", type=float, default=0.10)
    args = parser.parse_args(argv)
    if shutil.which("fio") is None:
        print("fio is not on PATH: install Debian's fio (apt-get install fio)", file=sys.stderr)
        return 2
    size, block = args.size_mib << 20, args.block_mib << 20
    figures: dict[str, list[float]] = {"agent write": [], "agent read": [],
                                       "fio write": [], "fio read": []}
    commands: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix=".fleet-fio-", dir=args.folder) as folder:
        for run in range(args.runs):
            order = ("agent", "fio") if run % 2 == 0 else ("fio", "agent")
            for who in order:
                if who == "agent":
                    ours = write_then_read(os.path.join(folder, "agent.dat"), size, block,
                                           write_s=1e9, read_s=1e9)
                    os.unlink(os.path.join(folder, "agent.dat"))
                    if not ours["direct"]:
                        print("O_DIRECT refused on this filesystem: no like-for-like "
                              "comparison", file=sys.stderr)
                        return 2
                    figures["agent write"].append(ours["write_bytes"] / ours["write_s"] / 1e9)
                    figures["agent read"].append(ours["read_bytes"] / ours["read_s"] / 1e9)
                    continue
                target = os.path.join(folder, "fio.dat")
                for mode in ("write", "read"):
                    value, command = fio(target, mode, args.size_mib, args.block_mib)
                    figures[f"fio {mode}"].append(value)
                    if run == 0:
                        commands.append(command)
                os.unlink(target)
            print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in figures.items())
                  + " GB/s", flush=True)
    print("fio commands (each run):")
    for command in commands:
        print("  " + " ".join(command).replace(folder, "$DIR"))
    medians = {k: statistics.median(v) for k, v in figures.items()}
    within = True
    for mode in ("write", "read"):
        agent_median, theirs = medians[f"agent {mode}"], medians[f"fio {mode}"]
        apart = agent_median / theirs - 1
        ok = abs(apart) <= args.tolerance
        within = within and ok
        print(f"{mode}: agent {agent_median:.3f} GB/s, fio {theirs:.3f} GB/s, {apart:+.1%} "
              f"({'within' if ok else 'NOT within'} {args.tolerance:.0%}); runs "
              f"agent {min(figures[f'agent {mode}']):.3f}-{max(figures[f'agent {mode}']):.3f}, "
              f"fio {min(figures[f'fio {mode}']):.3f}-{max(figures[f'fio {mode}']):.3f}")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())

"""`fleet sweep` over 32 loopback hosts: the local fan-out against `--via celery` with two
workers, in one run, on one PostgreSQL store.

Hosts are real sshd servers on 127.0.0.1, as in bench/probe_fanout.py (each replaying a
recording from tests/fixtures/gpus; fingerprint only). Host keys are accepted and the agent
cached on every host first, and both workers are started (and have built their payload)
before anything is timed, so each figure is a steady nightly sweep. The two ways alternate,
--repeat times each, with --no-report (the report's cost is the same either way and is
measured in the Report section). Two ratios: wall, the whole `fleet sweep` command
(interpreter start, store, summary), and fan-out only, the sweep's own `wall_s` (from the
first host sent to the last settled).

    python bench/sweep_fanout.py --repeat 3 --out bench/sweep_fanout.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import yaml  # noqa: E402

from bench.probe_fanout import Bench  # noqa: E402

ADMIN = os.environ.get("FLEET_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
BROKER = os.environ.get("FLEET_TEST_REDIS", "redis://127.0.0.1:6379/0")


def fleet(bench: Bench, *args: str) -> tuple[float, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "FLEET_DB")}
    env["HOME"] = str(bench.home)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fleet.cli", *args], capture_output=True,
                          text=True, env=env, timeout=600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        try:
            failed = [h for h in json.loads(done.stdout)["hosts"] if not h["ok"]]
        except (ValueError, KeyError):
            failed = []
        raise RuntimeError(f"fleet {args[0]} failed ({done.returncode}): {failed[:3]} "
                           f"{done.stderr[-3000:]}")
    return wall, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="fleet-sweep-bench-"))
    bench = Bench(root, args.hosts)
    name = f"fleet_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    db = f"{ADMIN.rsplit('/', 1)[0]}/{name}"
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    inventory = bench.inventory(args.hosts, "sweep.yaml")
    data = yaml.safe_load(inventory.read_text())
    data["providers"]["bench"]["queue"] = queue
    # 32 hosts share 11 recordings and this machine's hostname: give each host's cards UUIDs
    # of their own, or two hosts would send byte-identical documents, which the store keeps
    # once (by content hash) and the second host's run row would be missing.
    for name_, spec in data["providers"]["bench"]["hosts"].items():
        recording = json.loads(Path(spec["env"]["FLEET_NVML_REPLAY"]).read_text())
        for i, device in enumerate(recording["devices"]):
            device["nvmlDeviceGetUUID"] = f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{name_}/{i}')}"
        own = root / f"recording-{name_}.json"
        own.write_text(json.dumps(recording))
        spec["env"]["FLEET_NVML_REPLAY"] = str(own)
    inventory.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "FLEET_DB")}
    env["HOME"] = str(bench.home)
    workers: list[subprocess.Popen[bytes]] = []
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
                               "hosts": args.hosts, "local": [], "celery": []}
    try:
        common = ["--fingerprint-only", "--json", "--no-report", "--db", db]
        fleet(bench, "sweep", str(inventory), "--name", "warm", "--accept-new-host-keys",
              *common)
        for i in range(2):
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "fleet.cli", "worker", str(inventory), "--queue", queue,
                 "--broker", BROKER, "--db", db, "--concurrency", "16",
                 "--accept-new-host-keys",
                 "--name", f"bench-{i}@here"], env=env, stdout=subprocess.DEVNULL,
                stderr=open(root / f"worker-{i}.log", "wb")))  # noqa: SIM115
        celery = ["--via", "celery", "--broker", BROKER]
        time.sleep(15)  # both workers consuming before the first task is sent
        fleet(bench, "sweep", str(inventory), "--name", "warm-celery", *celery, *common)
        for _ in range(args.repeat):
            for way, extra in (("local", []), ("celery", celery)):
                wall, report = fleet(bench, "sweep", str(inventory), "--name", way, *extra,
                                     *common)
                assert all(h["ok"] for h in report["hosts"]), report["hosts"]
                results[way].append({"wall_s": wall, "sweep_s": report["wall_s"]})
                print(f"{way:6s} wall {wall:.2f} s, sweep {report['wall_s']:.2f} s",
                      flush=True)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(30)
        bench.stop()
        import redis

        # The queue and its bindings, so that runs leave nothing behind on a shared Redis.
        client = redis.Redis.from_url(BROKER)
        for key in client.scan_iter(f"*{queue}*"):
            client.delete(key)
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            if not os.environ.get("KEEP_DB"):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print("db", db)
    for way in ("local", "celery"):
        walls = [r["wall_s"] for r in results[way]]
        sweeps = [r["sweep_s"] for r in results[way]]
        results[f"{way}_median_wall_s"] = statistics.median(walls)
        results[f"{way}_range"] = [min(walls), max(walls)]
        results[f"{way}_median_sweep_s"] = statistics.median(sweeps)
        results[f"{way}_sweep_range"] = [min(sweeps), max(sweeps)]
    ratio = results["celery_median_wall_s"] / results["local_median_wall_s"]
    fan_out = results["celery_median_sweep_s"] / results["local_median_sweep_s"]
    results["ratio"] = ratio
    results["fan_out_ratio"] = fan_out
    print(f"median wall: local {results['local_median_wall_s']:.2f} s, celery "
          f"{results['celery_median_wall_s']:.2f} s, ratio {ratio:.2f}; fan-out only: "
          f"local {results['local_median_sweep_s']:.2f} s, celery "
          f"{results['celery_median_sweep_s']:.2f} s, ratio {fan_out:.2f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

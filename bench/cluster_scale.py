"""The controller's side of a cluster at scale, measured rather than assumed (issue 57,
item 6): `fleet cluster check` (SSH sessions to every node, the rendezvous listener, every
node's connection to it, every pair's meeting point) against N real sshd servers on
loopback, each node running its scripts in its own SSH session as on a real cluster; a
node whose python hangs, and what it costs the check; and the schedule's planning at
the node counts docs/cluster.md prices.

What this machine cannot say: the fabric's side (NCCL's bootstrap and collectives over N
nodes), which docs/cluster.md models from a lent 2-node run. Every node here shares one
machine's two cores and one address, so a figure here is an upper bound on the
controller's own cost per node, not a cluster's wall.

    python bench/cluster_scale.py --nodes 8,16,32,64 --out scale.json

Run from the repository root (it starts sshd as the tests do, tests/probe/sshd.py).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet.cluster.reach import ReachOptions, check_cluster
from fleet.cluster.schedule import plan
from fleet.inventory import load_inventory
from tests.probe.sshd import generate_key, start_servers

HANG = "#!/bin/sh\nexec sleep 3600\n"


def _inventory(root: Path, key: Path, ports: list[int], python: dict[int, str]) -> Path:
    hosts = {f"n{i:03d}": {"address": "127.0.0.1", "port": port,
                           **({"python": python[i]} if i in python else {})}
             for i, port in enumerate(ports)}
    document = {"defaults": {"user": getpass.getuser(), "identity_file": str(key),
                             "ssh_config": "none", "python": sys.executable},
                "providers": {"lab": {"cluster": "pod", "hosts": hosts}},
                "clusters": {"pod": {}}}
    path = root / "inventory.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def check(root: Path, key: Path, ports: list[int], hung: bool, timeout_s: float
          ) -> dict[str, Any]:
    """One `fleet cluster check` of len(ports) nodes, timed; with `hung`, the last node's
    python never answers."""
    python = {}
    if hung:
        script = root / "hang.sh"
        script.write_text(HANG)
        script.chmod(0o755)
        python = {len(ports) - 1: str(script)}
    inventory = load_inventory(_inventory(root, key, ports, python))
    [cluster] = inventory.clusters
    options = ReachOptions(timeout_s=timeout_s, connect_timeout_s=30.0, connect_retries=0,
                           accept_new_host_keys=True)
    cpu0 = os.times()
    started = time.monotonic()
    found = check_cluster(inventory, cluster, options)
    wall = time.monotonic() - started
    cpu1 = os.times()
    reached = sum(1 for n in found.nodes if n.reached)
    return {"nodes": len(ports), "hung": hung, "go": found.go, "wall_s": round(wall, 2),
            "check_wall_s": round(found.wall_s, 2),
            "controller_cpu_s": round((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
                                      2),
            "reached": reached, "meeting_points": len(found.points),
            "misses": len(found.misses), "decision": found.decision.message[:300]}


def planning(counts: list[int]) -> list[dict[str, Any]]:
    rows = []
    for count in counts:
        nodes = [f"n{i:05d}" for i in range(count)]
        times = []
        for _ in range(3):
            started = time.perf_counter()
            schedule = plan(nodes, seed=1)
            times.append(time.perf_counter() - started)
        rows.append({"nodes": count, "mode": schedule.mode, "rounds": schedule.rounds,
                     "pair_tests": schedule.pair_tests,
                     "plan_s": round(statistics.median(times), 4)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="8,16,32,64")
    parser.add_argument("--timeout-s", type=float, default=20.0,
                        help="the check's per-node timeout (fleet's default is larger)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fleet-scale-") as tmp:
        root = Path(tmp)
        key = generate_key(root / "client")
        authorized = root / "authorized_keys"
        authorized.write_text(key.with_name("client.pub").read_text())
        os.environ["XDG_CONFIG_HOME"] = str(root / "config")
        servers = start_servers(root / "sshd", max(counts), authorized)
        try:
            ports = [s.port for s in servers]
            for count in counts:
                for hung in (False, True):
                    where = root / f"n{count}-{'hung' if hung else 'healthy'}"
                    where.mkdir()
                    row = check(where, key, ports[:count], hung, args.timeout_s)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            for server in servers:
                server.stop()
    result = {"checks": rows, "planning": planning([8, 64, 256, 1024]),
              "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
              "cpus": os.cpu_count()}
    print(json.dumps(result["planning"]))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

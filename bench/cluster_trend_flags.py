"""How often the rule on a cluster's own past (fleet/analysis/cluster/trend.py) calls a
healthy run below its past, and how often it catches a run that really got slower.

Real runs, as a user runs them: `fleet cluster run --cpu` between three sshd "nodes" on
loopback (gloo over TCP on this machine, every run stored in one SQLite file), first
`--healthy` runs with nothing else on the machine, then `--degraded` runs with busy
processes spinning on every core (the loopback "fabric" here is the CPU, so that is a
real slowdown of every pair, as a congested or degraded link would be). Each run's
verdicts are read from its own output ("against its past: N steps compared ...: M
below"). A healthy run judged against its past (the rule's `min_history` earlier runs
make one) that has a step below it is a false flag; a degraded run with one is a hit.
`--replay` judges every stored run again at other `min_history`s, from the same store.

Not a fabric: the figures are gloo's over loopback, and their run-to-run spread is this
machine's, not InfiniBand's. What it measures is the rule as it runs, end to end, on
real run-to-run noise.

    python bench/cluster_trend_flags.py --healthy 10 --degraded 4
"""

from __future__ import annotations

import argparse
import getpass
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.probe.sshd import free_port, generate_key, sshd_missing, start_servers  # noqa: E402

SUMMARY = re.compile(r"against its past: (.*)")
COMPARED = re.compile(r"(\d+) steps? compared with their own earlier runs \(up to \d+\): "
                      r"(\d+) below")
BUSBW = re.compile(r"│\s*(\S+)\s*│\s*([\w-]+ [\w-]+(?: [\w-]+)?)\s*│\s*gloo\s*│\s*([\d.]+)")


def spin(stop: float) -> None:
    while time.time() < stop:
        pass


def run(home: Path, inventory: Path, db: str) -> tuple[str, float]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SSH_AUTH_SOCK", "FLEET_DB", "XDG_CONFIG_HOME", "XDG_DATA_HOME")}
    env.update(HOME=str(home / "home"), COLUMNS="200", PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fleet.cli", "cluster", "run",
                           str(inventory), "--cpu", "--db", db, "--accept-new-host-keys",
                           "--connect-retries", "0", "--sizes", "1M,4M"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=home)
    if "stored" not in done.stdout:
        raise SystemExit(f"a run stored nothing:\n{done.stdout}\n{done.stderr}")
    return done.stdout, time.perf_counter() - start


def replay(db: str, min_histories: list[int], healthy: int) -> None:
    """Each stored run judged against the runs before it at each `min_history`: runs
    judged and runs with a step below their past, the first `healthy` runs apart."""
    from fleet.analysis.cluster.trend import TrendRule, pair_trends
    from fleet.store.cluster import read_cluster_runs
    from fleet.store.database import open_engine, resolve

    engine = open_engine(resolve(db))
    try:
        runs = read_cluster_runs(engine, "pod", latest=False)[::-1]  # oldest first
    finally:
        engine.dispose()
    for least in min_histories:
        counts = {"healthy": [0, 0, 0], "degraded": [0, 0, 0]}  # runs, flagged, steps
        for i in range(len(runs)):
            trends = pair_trends(runs[:i + 1][::-1], TrendRule(min_history=least))
            if trends.compared:
                row = counts["healthy" if i < healthy else "degraded"]
                row[0] += 1
                row[1] += bool(trends.below)
                row[2] += len(trends.compared)
        (h, hf, hs), (d, df, _) = counts["healthy"], counts["degraded"]
        print(f"min_history {least}: false flags {hf} of {h} healthy runs ({hs} step "
              f"judgements); hits {df} of {d} degraded runs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--healthy", type=int, default=10)
    parser.add_argument("--degraded", type=int, default=4)
    parser.add_argument("--replay", metavar="DB",
                        help="judge the runs stored in DB again (no new run) at each "
                             "--min-history")
    parser.add_argument("--min-history", type=int, nargs="+", default=[3, 5])
    args = parser.parse_args()
    if args.replay:
        replay(args.replay, args.min_history, args.healthy)
        return
    missing = sshd_missing()
    if missing:
        raise SystemExit(missing)
    root = Path(tempfile.mkdtemp(prefix="fleet-trend-"))
    key = generate_key(root / "client")
    authorized = root / "authorized_keys"
    authorized.write_text((root / "client.pub").read_text())
    servers = start_servers(root / "sshd", 3, authorized)
    try:
        hosts = {f"n{i}": {"address": "127.0.0.1", "port": s.port}
                 for i, s in enumerate(servers)}
        inventory = root / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({
            "defaults": {"user": getpass.getuser(), "identity_file": str(key),
                         "ssh_config": "none", "python": sys.executable,
                         "runtime": {"use": "host"}, "cache_dir": str(root / "cache")},
            "providers": {"lab": {"cluster": "pod", "hosts": hosts}},
            "clusters": {"pod": {"rendezvous_port": free_port()}}}, sort_keys=False))
        db = f"sqlite:///{root / 'fleet.db'}"
        print(f"{'run':>3} {'condition':<9} {'wall s':>6}  {'pair all-reduce GB/s':<28} verdict")
        judged = {"healthy": [0, 0], "degraded": [0, 0]}  # runs judged, runs flagged
        plan = ["healthy"] * args.healthy + ["degraded"] * args.degraded
        for i, condition in enumerate(plan, 1):
            hogs: list[multiprocessing.Process] = []
            if condition == "degraded":
                stop = time.time() + 600
                hogs = [multiprocessing.Process(target=spin, args=(stop,))
                        for _ in range(os.cpu_count() or 1)]
                for hog in hogs:
                    hog.start()
            try:
                out, wall = run(root, inventory, db)
            finally:
                for hog in hogs:
                    hog.kill()
            summary = SUMMARY.search(out)
            counts = COMPARED.search(summary.group(1)) if summary else None
            figures = [f"{float(m.group(3)):.3f}" for m in BUSBW.finditer(out)
                       if m.group(1).startswith("pair")]
            verdict = summary.group(1)[:60] if summary else "no comparison said"
            if counts is not None:
                judged[condition][0] += 1
                judged[condition][1] += int(counts.group(2)) > 0
                verdict = f"{counts.group(2)} of {counts.group(1)} steps below"
            print(f"{i:>3} {condition:<9} {wall:>6.1f}  {' '.join(figures):<28} {verdict}")
        print()
        healthy, degraded = judged["healthy"], judged["degraded"]
        print(f"false flags: {healthy[1]} of {healthy[0]} healthy runs judged against "
              "their past")
        print(f"hits: {degraded[1]} of {degraded[0]} degraded runs")
        print(f"(the store: {db}; `--replay` it at other --min-history)")
    finally:
        for server in servers:
            server.stop()


if __name__ == "__main__":
    main()

"""How `fleet probe` scales with hosts, and what the cached payload saves.

Starts up to 32 real sshd servers on 127.0.0.1 (one per host, as tests/probe does), each
"host" replaying one of the recordings in tests/fixtures/gpus, and times the real command:

- fan-out: `fleet probe --fingerprint-only` over 1, 8 and 32 hosts, agent already cached
  and host keys already accepted (the steady nightly state), --repeat times each;
- payload: the zipapp's size, and one host probed with the agent already in its cache
  against the same host with an empty cache (so the probe uploads it).

Wall time is the whole command as a user sees it (Python start, store opening, fan-out,
summary); `probe` is the fan-out alone, from the report's wall_s. CPU is fleet's own (the
command's process) and the simulated hosts' (each sshd with everything its sessions ran),
which on loopback share this machine's cores with fleet.

    python bench/probe_fanout.py --repeat 5 --out bench/probe_fanout.json
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from fleet.payload import build_payload  # noqa: E402
from tests.probe.sshd import SshServer, generate_key, start_servers  # noqa: E402

RECORDINGS = sorted((ROOT / "tests" / "fixtures" / "gpus").glob("*/nvml-recording.json"))
SYSTEM_PYTHON = "/usr/bin/python3"


class Bench:
    def __init__(self, root: Path, hosts: int) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        key = generate_key(root / "client")
        authorized = root / "authorized_keys"
        authorized.write_text((root / "client.pub").read_text())
        self.key = key
        self.servers: list[SshServer] = start_servers(root / "sshd", hosts, authorized)

    def inventory(self, count: int, name: str, cache: str = "cache") -> Path:
        hosts = {}
        for i, server in enumerate(self.servers[:count]):
            hosts[f"gpu-{i:02d}"] = {
                "address": "127.0.0.1", "port": server.port,
                "cache_dir": str(self.root / cache / f"gpu-{i:02d}"),
                "env": {"FLEET_NVML_REPLAY": str(RECORDINGS[i % len(RECORDINGS)])}}
        python = SYSTEM_PYTHON if Path(SYSTEM_PYTHON).exists() else "python3"
        document = {"defaults": {"user": getpass.getuser(),
                                 "identity_file": str(self.key), "ssh_config": "none",
                                 "python": python},
                    "providers": {"bench": {"hosts": hosts}}}
        path = self.root / name
        path.write_text(yaml.safe_dump(document))
        return path

    def probe(self, inventory: Path, *extra: str) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "FLEET_DB")}
        env["HOME"] = str(self.home)
        hosts_before = self.hosts_cpu_s()
        own_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "fleet.cli", "probe", str(inventory), "--fingerprint-only",
             "--json", "--db", str(self.root / "fleet.db"), *extra],
            capture_output=True, text=True, env=env, timeout=600)
        wall = time.perf_counter() - started
        own_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        time.sleep(0.2)  # let each sshd reap its last session
        hosts = self.hosts_cpu_s() - hosts_before
        controller = (own_after.ru_utime - own_before.ru_utime
                      + own_after.ru_stime - own_before.ru_stime)
        if done.returncode != 0:
            raise RuntimeError(f"probe failed ({done.returncode}): {done.stderr[-3000:]}")
        report = json.loads(done.stdout)
        return {"wall_s": wall, "probe_s": report["wall_s"], "controller_cpu_s": controller,
                "hosts_cpu_s": hosts,
                "uploaded": [h["uploaded"] for h in report["hosts"]]}

    def cached_probe(self, inventory: Path) -> dict[str, Any]:
        """A probe that found the agent cached on every host. An edit to agent/ between
        two runs gives a new payload, uploaded once: that run is not the one measured."""
        for _ in range(3):
            run = self.probe(inventory)
            if not any(run["uploaded"]):
                return run
        raise RuntimeError("the agent kept changing between runs: is agent/ being edited?")

    def hosts_cpu_s(self) -> float:
        return sum(_process_tree_cpu_s(s.process.pid) for s in self.servers if s.process)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def _process_tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and of its children that have been reaped: for an sshd
    master, everything its sessions (login shell, sh, the agent) ran."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,8,32", help="host counts to time")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    counts = [int(c) for c in args.hosts.split(",")]
    root = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    bench = Bench(root, max(counts))
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
        "machine": platform.platform(), "python": platform.python_version(),
        "fanout": {}, "payload": {}}
    try:
        for count in counts:
            inventory = bench.inventory(count, f"fanout-{count}.yaml")
            bench.probe(inventory, "--accept-new-host-keys")  # keys and agent in place
            runs = [bench.cached_probe(inventory) for _ in range(args.repeat)]
            figures = {key: _median(runs, key) for key in
                       ("wall_s", "probe_s", "controller_cpu_s", "hosts_cpu_s")}
            results["fanout"][count] = {**figures, "runs": runs}
            print(f"{count:3d} hosts: wall {figures['wall_s']:.2f} s, fan-out "
                  f"{figures['probe_s']:.2f} s; CPU: fleet {figures['controller_cpu_s']:.2f} s,"
                  f" the hosts' sshd, shells and agents {figures['hosts_cpu_s']:.2f} s "
                  "(medians of "
                  f"{args.repeat})", flush=True)
        payload = build_payload()
        cached_inventory = bench.inventory(1, "cached.yaml", cache="payload-cached")
        bench.probe(cached_inventory)
        cached = [bench.cached_probe(cached_inventory) for _ in range(args.repeat)]
        uploads = []
        for i in range(args.repeat):
            inventory = bench.inventory(1, f"upload-{i}.yaml", cache=f"payload-empty-{i}")
            uploads.append(bench.probe(inventory))
        assert all(r["uploaded"] == [True] for r in uploads)
        results["payload"] = {
            "bytes": len(payload.data), "file": payload.filename,
            "cached": {"wall_s": _median(cached, "wall_s"), "probe_s": _median(cached, "probe_s")},
            "upload": {"wall_s": _median(uploads, "wall_s"),
                       "probe_s": _median(uploads, "probe_s")}}
        print(f"payload {len(payload.data) / 1024:.1f} KiB; 1 host cached: fan-out "
              f"{results['payload']['cached']['probe_s']:.3f} s, uploading: "
              f"{results['payload']['upload']['probe_s']:.3f} s")
    finally:
        bench.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

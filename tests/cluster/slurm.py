"""A real Slurm on loopback for the tests: munged with a key of its own, slurmctld and two
slurmd (nodes n1 and n2, Debian's slurm-wlm built with multiple slurmd a host), each on
free ports under a temporary directory, started and stopped by the tests. `.ci/run`
installs the packages (slurm-wlm, munge)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.probe.sshd import free_port

NODES = ("n1", "n2")
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo", "scontrol")
START_S = 60.0


def slurm_missing() -> str | None:
    """Why a real Slurm cannot start here, or None."""
    missing = [b for b in BINARIES if shutil.which(b) is None and
               not Path("/usr/sbin", b).exists()]
    if missing:
        return (f"{', '.join(missing)} not found: install Debian's slurm-wlm and munge "
                "(`.ci/run` does)")
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs as the test's user: run as root"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class Slurm:
    root: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What srun and sinfo need to find this Slurm."""
        return {"SLURM_CONF": str(self.conf)}

    def _spawn(self, *argv: str, log: str) -> None:
        with (self.root / log).open("ab") as out:
            self.processes.append(subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **self.env}))

    def start(self) -> Slurm:
        root = self.root
        for sub in ("state", "spool", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        key = root / "munge.key"
        subprocess.run([_binary("mungekey"), "-c", "-f", "-k", str(key)], check=True,
                       capture_output=True)
        socket = root / "munge.socket"
        self._spawn(_binary("munged"), "-F", "-f", f"--socket={socket}", f"--key-file={key}",
                    f"--pid-file={root / 'munged.pid'}", f"--log-file={root / 'munged.log'}",
                    f"--seed-file={root / 'munged.seed'}", log="munged.out")
        ports = {name: free_port() for name in ("ctld", *NODES)}
        nodes = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[n]} "
            "CPUs=2 State=UNKNOWN" for n in NODES)
        self.conf.write_text(f"""\
ClusterName=fleettest
SlurmctldHost=localhost
SlurmctldPort={ports["ctld"]}
AuthType=auth/munge
AuthInfo=socket={socket}
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root / "spool"}/%n
SlurmctldPidFile={root / "slurmctld.pid"}
SlurmdPidFile={root / "slurmd-%n.pid"}
SlurmctldLogFile={root / "log" / "slurmctld.log"}
SlurmdLogFile={root / "log" / "slurmd-%n.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SchedulerType=sched/builtin
ReturnToService=2
SlurmUser=root
MpiDefault=none
{nodes}
PartitionName=debug Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
""")
        self._wait_for_file(socket)
        self._spawn(_binary("slurmctld"), "-D", "-f", str(self.conf), log="slurmctld.out")
        for name in NODES:
            self._spawn(_binary("slurmd"), "-D", "-N", name, "-f", str(self.conf),
                        log=f"slurmd-{name}.out")
        self._wait_idle()
        return self

    def _wait_for_file(self, path: Path) -> None:
        deadline = time.monotonic() + START_S
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: {self._logs()}")
            time.sleep(0.05)

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + START_S
        said = ""
        while time.monotonic() < deadline:
            done = subprocess.run([_binary("sinfo"), "-h", "-N", "-o", "%N %T"],
                                  capture_output=True, text=True,
                                  env={**os.environ, **self.env}, check=False)
            said = done.stdout + done.stderr
            states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            if all(states.get(n) == "idle" for n in NODES):
                return
            time.sleep(0.3)
        raise RuntimeError(f"Slurm's nodes did not come up idle: {said}; {self._logs()}")

    def _logs(self) -> str:
        tails = []
        for log in sorted(self.root.glob("*.out")) + sorted((self.root / "log").glob("*")):
            tails.append(f"{log.name}: {log.read_text(errors='replace')[-600:]}")
        return " | ".join(tails)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)

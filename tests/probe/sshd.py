"""Real OpenSSH servers on 127.0.0.1 for the probe's tests and benchmarks.

Each server has its own generated host key, port, config and authorized_keys in a
directory of its own, and runs as the current user (`sshd -D -e -f CONFIG`). No SSH is
mocked: the probe meets the same sshd a rented host runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")
START_TIMEOUT_S = 15.0


def sshd_missing() -> str | None:
    """Why real sshd servers cannot run here, or None when they can."""
    if not Path(SSHD).is_file():
        return f"{SSHD} is missing: install openssh-server (bash .ci/run does)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is missing: install openssh-client"
    return None


def generate_key(path: Path, kind: str = "ed25519") -> Path:
    """A key pair without a passphrase at `path` and `path`.pub."""
    for old in (path, path.with_name(path.name + ".pub")):
        old.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "fleet-test", "-f",
                    str(path)], check=True, capture_output=True)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ensure_privsep_dir() -> None:
    # sshd started as root insists on its privilege-separation directory, which a fresh
    # container (no systemd to make it) lacks.
    if os.geteuid() == 0 and not PRIVSEP_DIR.is_dir():
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)


@dataclass
class SshServer:
    root: Path
    authorized_keys: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    def _config(self) -> Path:
        config = self.root / "sshd_config"
        config.write_text(f"""\
Port {self.port}
ListenAddress 127.0.0.1
HostKey {self.host_key}
PidFile {self.root / "sshd.pid"}
AuthorizedKeysFile {self.authorized_keys}
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
MaxStartups 200
MaxSessions 50
LogLevel VERBOSE
SetEnv MKL_NUM_THREADS={os.environ.get("MKL_NUM_THREADS", "1")}
""")
        return config

    def start(self) -> SshServer:
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.host_key.exists():
            generate_key(self.host_key)
        _ensure_privsep_dir()
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self._config())], stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.process.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not listen on {self.port}: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # Its session children (the users' shells) go with it.
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.process = None

    def replace_host_key(self) -> None:
        """Restart with a new host key, as a reinstalled (or impersonated) host would."""
        self.stop()
        generate_key(self.host_key)
        self.start()


def start_servers(root: Path, count: int, authorized_keys: Path) -> list[SshServer]:
    servers = [SshServer(root / f"sshd-{i}", authorized_keys) for i in range(count)]
    try:
        for server in servers:
            server.start()
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers

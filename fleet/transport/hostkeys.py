"""Host keys: strict by default, with fleet's own known-hosts file.

Keys are looked up in the user's OpenSSH files (`~/.ssh/known_hosts`, the system file and
any `UserKnownHostsFile` from ssh_config), which fleet reads and never writes, and in
fleet's own file, `$XDG_CONFIG_HOME/fleet/known_hosts` (~/.config/fleet/known_hosts).

- a known key that matches: connect;
- an unknown host: refuse, saying how to check and accept it; with
  `--accept-new-host-keys` record it in fleet's file (OpenSSH's `accept-new`);
- a key that differs from the recorded one, or of another type than the recorded ones:
  always refuse. That is what an attacker in the middle looks like.

fabric would install paramiko's AutoAddPolicy, which trusts whatever answers; fleet sets
this policy on every client instead.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from fleet.transport.base import HostKeyError

SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")


def fleet_known_hosts() -> Path:
    """fleet's own known-hosts file: $XDG_CONFIG_HOME/fleet/known_hosts."""
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "fleet" / "known_hosts"


def user_known_hosts() -> list[Path]:
    """The user's and the system's known-hosts files."""
    return [Path.home() / ".ssh" / "known_hosts", SYSTEM_KNOWN_HOSTS]


def _display(path: Path) -> str:
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home):] if text.startswith(home + "/") else text


def key_fingerprint(key: paramiko.PKey) -> str:
    """A key as messages show it: its type and fingerprint."""
    return f"{key.get_name()} {key.fingerprint}"


@dataclass
class KnownHosts:
    """Shared by every connection of one probe; writes to fleet's file are serialised."""

    accept_new: bool = False
    path: Path = field(default_factory=fleet_known_hosts)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def configure(self, client: paramiko.SSHClient, extra_files: list[Path], who: str
                  ) -> None:
        """Load every known-hosts file into `client` and install fleet's policy."""
        for path in [*extra_files, *user_known_hosts()]:
            if path.is_file():
                try:
                    client.load_system_host_keys(str(path))
                except (OSError, paramiko.SSHException):
                    continue  # an unreadable user file: fleet's own file still counts
        with self._lock:
            if self.path.is_file():
                client.load_host_keys(str(self.path))
        client.set_missing_host_key_policy(_Policy(self, who))

    def record(self, name: str, key: paramiko.PKey, who: str) -> None:
        """Add `name`'s `key` to fleet's file; HostKeyError when it records another key."""
        with self._lock:
            # Two hosts behind one address meet here at once; the second must find the
            # first one's line, and refuse if that line holds another key.
            if self.path.is_file():
                known = paramiko.HostKeys(str(self.path)).lookup(name)
                if known is not None and key.get_name() in known:
                    if known[key.get_name()] == key:
                        return
                    raise self.changed(name, key, known[key.get_name()], who, [])
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="ascii") as fh:
                fh.write(f"{name} {key.get_name()} {key.get_base64()}\n")

    def recorded_in(self, name: str, extra_files: list[Path]) -> Path | None:
        """Which file holds a key for `name` (for the message about a changed key)."""
        for path in [self.path, *extra_files, *user_known_hosts()]:
            if not path.is_file():
                continue
            keys = paramiko.HostKeys()
            try:
                keys.load(str(path))
            except (OSError, paramiko.SSHException):
                continue
            if keys.lookup(name) is not None:
                return path
        return None

    def unknown(self, name: str, key: paramiko.PKey, who: str) -> HostKeyError:
        """The error for an unknown key of `name`: how to check it, and how to accept it."""
        return HostKeyError(
            f"{who}: unknown host key for {name} ({key_fingerprint(key)}). Check that "
            "fingerprint with the provider (its console, or `ssh-keygen -lf` on the host's "
            "/etc/ssh/ssh_host_*_key.pub), then run again with --accept-new-host-keys to "
            f"record it in {_display(self.path)}")

    def changed(self, name: str, offered: paramiko.PKey, recorded: paramiko.PKey, who: str,
                extra_files: list[Path]) -> HostKeyError:
        """The error for a changed key of `name`: both fingerprints, and the file with the old."""
        where = self.recorded_in(name, extra_files) or self.path
        return HostKeyError(
            f"{who}: the host key of {name} has CHANGED: it offered "
            f"{key_fingerprint(offered)}, but {_display(where)} records "
            f"{key_fingerprint(recorded)}. Someone may be intercepting the connection, or "
            "the host was reinstalled. fleet refuses changed keys, even with "
            "--accept-new-host-keys; if you know why it changed, remove the old key with "
            f"`ssh-keygen -R '{name}' -f {_display(where)}` and run again with "
            "--accept-new-host-keys")


class _Policy(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only for a host with no recorded key of any type."""

    def __init__(self, known: KnownHosts, who: str) -> None:
        self.known = known
        self.who = who

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        if not self.known.accept_new:
            raise self.known.unknown(hostname, key, self.who)
        self.known.record(hostname, key, self.who)
        client.get_host_keys().add(hostname, key.get_name(), key)

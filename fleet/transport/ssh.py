"""SSH with paramiko: ssh_config honoured as OpenSSH does, strict host keys, jump hosts.

Where a setting comes from, first match wins: the inventory (like options on ssh's
command line), then ssh_config (`~/.ssh/config`, then `/etc/ssh/ssh_config`, or the one
file the inventory names, as `ssh -F` does), then OpenSSH's defaults. Jump hosts
(`jump:` or ProxyJump) are reached through direct-tcpip channels of the hop before them,
each with its own host-key check; ProxyCommand is honoured for the first hop. fabric is
not used because its `Connection` installs `AutoAddPolicy`, also on the gateway
Connections it builds for ProxyJump hops, and loads no known_hosts, so it would trust an
unknown or changed jump-host key (fabric 3.2.3, fabric/connection.py:458 and :521).

A remote command runs as `sh -c SCRIPT` after a preamble that reports its process group.
sshd starts every session in a session of its own, so killing that group stops the agent
and anything it started: on a timeout, a bad answer or Ctrl-C, no agent is left running.
"""

from __future__ import annotations

import contextlib
import getpass
import glob
import logging
import os
import re
import shlex
import socket
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import paramiko

from fleet.errors import InputError
from fleet.inventory import Target
from fleet.transport.base import (
    KILL_GRACE_S,
    Cancelled,
    ConnectError,
    HostKeyError,
    StderrTail,
    TransportError,
    append_script,
    put_script,
    read_lines,
)
from fleet.transport.hostkeys import KnownHosts

# paramiko logs every failed connection through Python's last-resort handler, which would
# print tracebacks between the progress lines; fleet reports each failure itself.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

USER_CONFIG = Path("~/.ssh/config")
SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
MAX_INCLUDE_DEPTH = 16
MAX_JUMPS = 8
KEEPALIVE_S = 30
RETRY_BACKOFF_S = (1.0, 2.0, 4.0, 8.0)
PREAMBLE = ('pg=$$; if [ -r /proc/$$/stat ]; then read -r _ _ _ _ pg _ < /proc/$$/stat '
            '|| pg=$$; fi; printf "fleet-pgid %s %s\\n" "$pg" "$$"; ')
PREAMBLE_LINE = re.compile(r"^fleet-pgid (\d+) (\d+)$")
KEYWORD = re.compile(r"^\s*(\w+)\s*(?:=\s*|\s+)(.*?)\s*$")


# --- ssh_config --------------------------------------------------------------------------

def _expand_includes(text: str, origin: Path, depth: int) -> list[str]:
    """paramiko does not follow Include; inline the files, then restore the enclosing
    Host/Match block so that what follows the Include applies as before."""
    if depth > MAX_INCLUDE_DEPTH:
        raise InputError(f"{origin}: Include nests deeper than {MAX_INCLUDE_DEPTH} files: "
                         "is a file including itself?")
    lines: list[str] = []
    block = "Host *"
    for line in text.splitlines():
        match = KEYWORD.match(line)
        keyword = match.group(1).lower() if match else ""
        if keyword in ("host", "match"):
            block = line
        if keyword != "include" or match is None:
            lines.append(line)
            continue
        for pattern in shlex.split(match.group(2)):
            pattern = os.path.expanduser(pattern)
            if not os.path.isabs(pattern):
                # OpenSSH: relative to ~/.ssh in a user's file, /etc/ssh in the system's.
                base = "/etc/ssh" if str(origin).startswith("/etc/") else "~/.ssh"
                pattern = os.path.join(os.path.expanduser(base), pattern)
            for included in sorted(glob.glob(pattern)):
                lines += _expand_includes(_read_config(Path(included)), Path(included),
                                          depth + 1)
        lines.append(block)
    return lines


def _read_config(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"{path}: cannot read this ssh_config file ({exc.strerror})"
                         ) from None


@lru_cache(maxsize=16)
def load_ssh_config(named: str | None) -> paramiko.SSHConfig:
    """The ssh_config to honour: the inventory's file, or the user's then the system's.
    `none` reads nothing."""
    if named is not None and named.lower() == "none":
        return paramiko.SSHConfig.from_text("")
    if named is not None:
        paths = [Path(named).expanduser()]
        if not paths[0].is_file():
            raise InputError(f"ssh_config {named}: no such file. Fix `ssh_config:` in the "
                             "inventory, or write `ssh_config: none`")
    else:
        paths = [p for p in (USER_CONFIG.expanduser(), SYSTEM_CONFIG) if p.is_file()]
    lines: list[str] = []
    for path in paths:
        lines += _expand_includes(_read_config(path), path, 0)
        lines.append("Host *")
    try:
        return paramiko.SSHConfig.from_text("\n".join(lines))
    except (paramiko.ConfigParseError, ValueError) as exc:
        raise InputError(f"{', '.join(map(str, paths))}: cannot parse ssh_config ({exc}). "
                         "Fix it, or set `ssh_config: none` in the inventory") from None


# --- Where to connect ----------------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    """One hop, every setting resolved."""

    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    identities_only: bool
    host_key_alias: str | None
    known_hosts_files: tuple[Path, ...]
    proxy_command: str | None

    @property
    def known_name(self) -> str:
        """The name its key is recorded under, as OpenSSH writes it."""
        name = self.host_key_alias or self.hostname
        return name if self.port == 22 else f"[{name}]:{self.port}"

    def __str__(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


@dataclass(frozen=True)
class SshPlan:
    """How to reach a target: the jump hosts in order, then the target."""

    hops: tuple[Endpoint, ...]  # jump hosts in order, then the target itself

    @property
    def target(self) -> Endpoint:
        """The endpoint at the end of the hops."""
        return self.hops[-1]

    def __str__(self) -> str:
        via = ", ".join(str(hop) for hop in self.hops[:-1])
        return str(self.target) + (f" via {via}" if via else "")


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return os.environ.get("USER", "root")


def _split_jump(spec: str, where: str) -> tuple[str | None, str, int | None]:
    """[user@]host[:port] (host may be [IPv6]), as ProxyJump writes one hop."""
    spec = spec.strip().removeprefix("ssh://")
    user, _, rest = spec.rpartition("@")
    port: int | None = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":"):
            port = _port(tail[1:], spec, where)
    elif rest.count(":") == 1:
        host, _, text = rest.partition(":")
        port = _port(text, spec, where)
    else:
        host = rest
    if not host:
        raise InputError(f"{where}: jump {spec!r}: no host. Write [user@]host[:port]")
    return user or None, host, port


def _port(text: str, spec: str, where: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InputError(f"{where}: jump {spec!r}: {text!r} is not a port number")
    return int(text)


def _endpoint(config: paramiko.SSHConfig, alias: str, user: str | None, port: int | None,
              identity_files: tuple[str, ...], where: str) -> tuple[Endpoint, str | None]:
    found: dict[str, Any] = dict(config.lookup(alias))
    try:
        config_port = int(found.get("port", 22))
    except ValueError:
        raise InputError(f"{where}: ssh_config gives Port {found['port']!r} for {alias}, "
                         "which is not a number") from None
    files = identity_files or tuple(found.get("identityfile", ()))
    known_files = tuple(Path(os.path.expanduser(p))
                        for p in str(found.get("userknownhostsfile", "")).split()
                        if p.lower() != "none")
    proxy_command = found.get("proxycommand")
    jump = found.get("proxyjump")
    return Endpoint(
        hostname=str(found.get("hostname", alias)),
        port=port or config_port,
        user=user or str(found.get("user") or _local_user()),
        identity_files=tuple(os.path.expanduser(f) for f in files),
        identities_only=str(found.get("identitiesonly", "no")).lower() == "yes",
        host_key_alias=found.get("hostkeyalias"),
        known_hosts_files=known_files,
        proxy_command=None if proxy_command in (None, "none") else str(proxy_command),
    ), (None if jump in (None, "none") else str(jump))


def _jump_chain(config: paramiko.SSHConfig, spec: str, fallback_keys: tuple[str, ...],
                where: str, depth: int = 0) -> list[Endpoint]:
    hops: list[Endpoint] = []
    for i, part in enumerate(spec.split(",")):
        user, host, port = _split_jump(part, where)
        hop, own_jump = _endpoint(config, host, user, port, (), where)
        if not hop.identity_files:
            # OpenSSH would try only the jump host's own keys; offering the target's
            # inventory keys as well spares writing them twice.
            hop = Endpoint(**{**hop.__dict__, "identity_files": fallback_keys})
        if i == 0 and own_jump is not None:
            if depth >= MAX_JUMPS:
                raise InputError(f"{where}: ProxyJump chains go deeper than {MAX_JUMPS} "
                                 "hops: is a jump host its own jump host in ssh_config?")
            hops += _jump_chain(config, own_jump, fallback_keys, where, depth + 1)
        hops.append(hop)
    return hops


def plan_ssh(target: Target) -> SshPlan:
    """Resolve how to reach `target`, reading ssh_config; InputError when it cannot be."""
    where = f"{target.where} ({target.key})"
    config = load_ssh_config(target.ssh_config)
    keys = tuple(os.path.expanduser(f) for f in target.identity_files)
    endpoint, config_jump = _endpoint(config, target.address, target.user, target.port, keys,
                                      where)
    jump = target.jump or config_jump
    hops = _jump_chain(config, jump, keys, where) if jump else []
    if len(hops) > MAX_JUMPS:
        raise InputError(f"{where}: more than {MAX_JUMPS} jump hosts")
    return SshPlan((*hops, endpoint))


def preflight(target: Target) -> list[str]:
    """What this machine lacks to reach `target` (a key file, a variable): the inventory
    is valid without them, but this host cannot be reached until they exist."""
    problems = [f"identity_file {path} does not exist on this machine: fix the path, or "
                "leave identity_file out to use ssh_config and the SSH agent"
                for path in (os.path.expanduser(f) for f in target.identity_files)
                if not Path(path).is_file()]
    problems += [f"the inventory names the environment variable {name}, which is not set: "
                 "export it before running fleet"
                 for name in (target.password_env, target.identity_passphrase_env)
                 if name is not None and name not in os.environ]
    return problems


# --- Connection ----------------------------------------------------------------------------

@dataclass
class SshOptions:
    """How to connect: the known hosts, connect timeout and retries, and the cancel signal."""

    known_hosts: KnownHosts
    connect_timeout_s: float = 10.0
    connect_retries: int = 2
    cancel: threading.Event = field(default_factory=threading.Event)


class SshProcess:
    """A script running on the host over one SSH channel."""

    def __init__(self, channel: paramiko.Channel, transport: SshTransport, origin: str
                 ) -> None:
        self._channel = channel
        self._transport = transport
        self._origin = origin
        self._stderr = StderrTail()
        self._group: tuple[int, int] | None = None  # (process group, shell pid)
        self._stream: Iterator[str] | None = None

    def lines(self, deadline: float, cancel: threading.Event) -> Iterator[str]:
        """The script's stdout lines until it ends, `deadline` passes or `cancel` is set."""
        if self._stream is None:
            self._stream = self._read(deadline, cancel)
        return self._stream

    def _drain_stderr(self) -> None:
        while self._channel.recv_stderr_ready():
            self._stderr.feed(self._channel.recv_stderr(65536))

    def _read(self, deadline: float, cancel: threading.Event) -> Iterator[str]:
        yield from self._lines(read_lines(self._origin, self._receive, deadline, cancel))
        self._drain_stderr()

    def _receive(self, wait: float) -> bytes | None:
        """What stdout sent within `wait` seconds, keeping stderr; None once it has ended."""
        # stderr is drained before each wait: the channel's window is shared, and a
        # script writing only to stderr would stall once it filled.
        self._drain_stderr()
        self._channel.settimeout(wait)
        try:
            data = self._channel.recv(65536)
        except TimeoutError:
            return b""
        return data or None

    def _lines(self, lines: Iterable[str]) -> Iterator[str]:
        for line in lines:
            if self._group is None:
                match = PREAMBLE_LINE.match(line)
                # Never group 1 or 0: `kill -- -1` would reach every process of the user.
                if match and int(match.group(1)) > 1 and int(match.group(2)) > 1:
                    self._group = (int(match.group(1)), int(match.group(2)))
                    continue
            yield line

    def exit_status(self, timeout: float) -> int | None:
        """The script's exit status, or None when it has not ended within `timeout` seconds."""
        if not self._channel.status_event.wait(timeout):
            return None
        self._drain_stderr()
        status = self._channel.exit_status
        return None if status < 0 else status

    def stderr_tail(self) -> str:
        """The last of what the script wrote to stderr."""
        self._drain_stderr()
        return self._stderr.text()

    def kill(self) -> None:
        """Signal the script's process group, TERM then KILL, unless it has ended."""
        if self._group is not None and not self._channel.exit_status_ready():
            group, pid = self._group
            for sig in ("TERM", "KILL"):
                self._transport.signal_group(sig, group, pid)
                if self._channel.status_event.wait(KILL_GRACE_S):
                    break
        self._channel.close()


class SshTransport:
    """A connection to one target through its jump hosts, with paramiko."""

    def __init__(self, target: Target, plan: SshPlan, options: SshOptions) -> None:
        self._target = target
        self._plan = plan
        self._options = options
        self._origin = target.key
        self._clients: list[paramiko.SSHClient] = []
        self.description = str(plan)

    @property
    def _transport(self) -> paramiko.Transport:
        transport = self._clients[-1].get_transport() if self._clients else None
        if transport is None or not transport.is_active():
            raise TransportError(f"{self._origin}: the SSH connection to {self.description} "
                                 "was lost")
        return transport

    def connect(self) -> None:
        """Connect through every hop, retrying; TransportError naming the host when it cannot."""
        problems = preflight(self._target)
        if problems:
            raise TransportError(f"{self._origin}: " + "; ".join(problems))
        attempts = 1 + max(0, self._options.connect_retries)
        for attempt in range(attempts):
            try:
                self._connect_once()
                return
            except ConnectError as exc:
                self.close()
                if attempt == attempts - 1:
                    tries = f" ({attempts} attempts)" if attempts > 1 else ""
                    raise ConnectError(f"{exc}{tries}") from None
                pause = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
                if self._options.cancel.wait(pause):
                    raise Cancelled(f"{self._origin}: interrupted") from None
            except BaseException:
                self.close()
                raise

    def _socket(self, hop: Endpoint, index: int) -> Any:
        timeout = self._options.connect_timeout_s
        if index > 0:
            previous = self._clients[-1].get_transport()
            assert previous is not None
            try:
                return previous.open_channel("direct-tcpip", (hop.hostname, hop.port),
                                             ("127.0.0.1", 0), timeout=timeout)
            except paramiko.ChannelException as exc:
                raise ConnectError(
                    f"{self._origin}: the jump host {self._plan.hops[index - 1]} could not "
                    f"reach {hop.hostname}:{hop.port} ({exc.text or exc.code}): check the "
                    "address and port as seen from the jump host") from None
            except paramiko.SSHException as exc:
                raise ConnectError(f"{self._origin}: through the jump host "
                                   f"{self._plan.hops[index - 1]}: {exc}") from None
        if hop.proxy_command is not None:
            return paramiko.ProxyCommand(hop.proxy_command)
        try:
            return socket.create_connection((hop.hostname, hop.port), timeout=timeout)
        except socket.gaierror as exc:
            raise TransportError(f"{self._origin}: cannot resolve the host name "
                                 f"{hop.hostname!r} ({exc.strerror}): check the address "
                                 "in the inventory or ssh_config") from None
        except TimeoutError:
            raise ConnectError(f"{self._origin}: connecting to {hop.hostname}:{hop.port} "
                               f"timed out after {timeout:g} s: is the host up, and the "
                               "address and port right?") from None
        except ConnectionRefusedError:
            raise ConnectError(f"{self._origin}: {hop.hostname}:{hop.port} refused the "
                               "connection: is sshd running there, and is the port right?"
                               ) from None
        except OSError as exc:
            raise ConnectError(f"{self._origin}: cannot connect to {hop.hostname}:"
                               f"{hop.port} ({exc.strerror or exc})") from None

    def _connect_once(self) -> None:
        target = self._target
        timeout = self._options.connect_timeout_s
        for index, hop in enumerate(self._plan.hops):
            last = index == len(self._plan.hops) - 1
            sock = self._socket(hop, index)
            client = paramiko.SSHClient()
            self._options.known_hosts.configure(client, list(hop.known_hosts_files),
                                                self._origin)
            self._clients.append(client)
            password = os.environ.get(target.password_env) if (
                last and target.password_env) else None
            passphrase = os.environ.get(target.identity_passphrase_env) if (
                target.identity_passphrase_env) else None
            try:
                client.connect(
                    hostname=hop.host_key_alias or hop.hostname, port=hop.port,
                    username=hop.user, password=password, passphrase=passphrase,
                    # paramiko takes a list here; types-paramiko says str only.
                    key_filename=list(hop.identity_files) or None,  # type: ignore[arg-type]
                    look_for_keys=not hop.identity_files,
                    allow_agent=not hop.identities_only, sock=sock, timeout=timeout,
                    banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout)
            except HostKeyError:
                raise
            except paramiko.BadHostKeyException as exc:
                raise self._options.known_hosts.changed(
                    hop.known_name, exc.key, exc.expected_key, self._origin,
                    list(hop.known_hosts_files)) from None
            except paramiko.PasswordRequiredException:
                raise TransportError(
                    f"{self._origin}: the key for {hop} is encrypted and fleet has no "
                    "passphrase: add it to ssh-agent, or name an environment variable "
                    "holding it with identity_passphrase_env") from None
            except paramiko.AuthenticationException:
                offered = ", ".join(hop.identity_files) or "the default keys ~/.ssh/id_*"
                agent = "" if hop.identities_only else " and the SSH agent's keys"
                raise TransportError(
                    f"{self._origin}: {hop} refused authentication (fleet offered "
                    f"{offered}{agent}). Add the public key to ~{hop.user}/.ssh/"
                    "authorized_keys on the host, or set identity_file / user in the "
                    "inventory or ~/.ssh/config") from None
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise ConnectError(f"{self._origin}: SSH with {hop} failed: "
                                   f"{exc or type(exc).__name__}") from None
            transport = client.get_transport()
            if transport is not None:
                transport.set_keepalive(KEEPALIVE_S)

    def _open(self, command: str) -> paramiko.Channel:
        try:
            channel = self._transport.open_session(timeout=self._options.connect_timeout_s)
            channel.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(f"{self._origin}: cannot start a command on "
                                 f"{self.description} ({exc or type(exc).__name__})") from None
        return channel

    def run(self, script: str) -> SshProcess:
        """Start `script` under sh on the host."""
        # The login shell may be bash, zsh or fish: hand the script to sh explicitly.
        channel = self._open("sh -c " + shlex.quote(PREAMBLE + script))
        return SshProcess(channel, self, self._origin)

    def signal_group(self, sig: str, group: int, pid: int) -> None:
        """Send `sig` to the process group `group` (else the process `pid`); errors are ignored."""
        with contextlib.suppress(TransportError):
            channel = self._open(f"kill -{sig} -- -{group} 2>/dev/null || "
                                 f"kill -{sig} {pid} 2>/dev/null")
            channel.status_event.wait(KILL_GRACE_S)
            channel.close()

    def put(self, data: bytes, path: str, timeout: float) -> None:
        """Write `data` to `path` on the host, whole or not at all."""
        self._upload(put_script(path, uuid.uuid4().hex[:8]), [data], path, timeout,
                     resumable=False)

    def append(self, path: str, chunks: Iterable[bytes], timeout: float) -> None:
        """Append `chunks` to `path` on the host: a resumable upload."""
        self._upload(append_script(path), chunks, path, timeout, resumable=True)

    def _upload(self, script: str, chunks: Iterable[bytes], path: str, timeout: float,
                resumable: bool) -> None:
        channel = self._open("sh -c " + shlex.quote(script))
        stderr = StderrTail()
        try:
            channel.settimeout(timeout)
            for chunk in chunks:
                channel.sendall(chunk)
                while channel.recv_stderr_ready():
                    stderr.feed(channel.recv_stderr(65536))
            channel.shutdown_write()
            if not channel.status_event.wait(timeout):
                raise TransportError(f"{self._origin}: uploading to {path} did not finish "
                                     f"in {timeout:g} s")
            while channel.recv_stderr_ready():
                stderr.feed(channel.recv_stderr(65536))
        except (TimeoutError, OSError, paramiko.SSHException) as exc:
            kept = "; what arrived is kept and the next run resumes there" if resumable else ""
            raise TransportError(f"{self._origin}: uploading to {path} failed ({exc}){kept}"
                                 ) from None
        finally:
            channel.close()
        if channel.exit_status != 0:
            raise TransportError(
                f"{self._origin}: cannot write {path} on {self.description}: "
                f"{stderr.text() or f'exit status {channel.exit_status}'}. Free space there, "
                "or set `cache_dir:` in the inventory to a directory the user may write")
    def close(self) -> None:
        """Close every client, the target's first; errors are ignored."""
        for client in reversed(self._clients):
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()

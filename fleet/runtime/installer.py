"""Which installer builds a host's environment: the uv binary of this controller's own
installation where the host can run it, else the host's venv module and pip.

uv installed the CPU wheelhouse (202 MB, torch 2.13.0+cpu and its dependencies) into a
fresh environment in 2.5 s where pip took 14.3 s, and `uv venv` needs no ensurepip, which
Debian/Ubuntu images without python3-venv lack. fleet depends on the `uv` wheel, whose
binary is built for the controller's platform; it goes to a host only where that platform
is the host's (the ELF's machine and C library against the host's `inspect` answer), once
per host and uv version, into `cache_dir/runtime/bin/uv-VERSION`. The host still runs
`uv --version` before using it, and falls back to pip where that fails.

FLEET_RUNTIME_INSTALLER=pip in the controller's environment makes every install use pip:
for bench/runtime_provision.py's comparison and the pip path's test, not for users.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.runtime.wheelhouse import HostFile, file_sha256

FORCE_ENV = "FLEET_RUNTIME_INSTALLER"
# ELF e_machine values, by the name `uname -m` (Python's platform.machine()) gives.
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
PT_INTERP = 3


@dataclass(frozen=True)
class UvBinary:
    """A uv binary fleet can upload: its path, version, machine and C library."""

    path: Path
    version: str
    machine: str  # "x86_64", "aarch64"
    libc: str  # "static" (runs on any Linux of its machine), "glibc" or "musl"

    @property
    def remote_name(self) -> str:
        """The binary's file name on a host."""
        return f"uv-{self.version}"

    def host_file(self) -> HostFile:
        """The binary as a file to upload, executable."""
        return HostFile(self.path, self.path.stat().st_size, file_sha256(self.path),
                        remote_name=self.remote_name, executable=True)


@dataclass(frozen=True)
class Choice:
    """The installer for one host: `uv` to upload, or None with why pip builds it."""

    uv: UvBinary | None
    why_pip: str | None = None

    @property
    def name(self) -> str:
        """The installer's name: "uv" or "pip"."""
        return "uv" if self.uv is not None else "pip"


def elf_platform(path: Path) -> tuple[str, str] | None:
    """(machine, libc) of a 64-bit little-endian Linux executable, or None for any other
    file (a Mach-O on a Mac controller): libc "static" without an interpreter, else the
    C library its interpreter belongs to."""
    try:
        with path.open("rb") as fh:
            header = fh.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF" or header[4:6] != b"\x02\x01":
                return None
            machine = ELF_MACHINES.get(struct.unpack_from("<H", header, 18)[0])
            if machine is None:
                return None
            phoff, = struct.unpack_from("<Q", header, 32)
            entry_size, count = struct.unpack_from("<HH", header, 54)
            for index in range(count):
                fh.seek(phoff + index * entry_size)
                entry = fh.read(entry_size)
                kind, = struct.unpack_from("<I", entry, 0)
                if kind != PT_INTERP:
                    continue
                offset, = struct.unpack_from("<Q", entry, 8)
                size, = struct.unpack_from("<Q", entry, 32)
                fh.seek(offset)
                interpreter = fh.read(size).rstrip(b"\0").decode("ascii", "replace")
                return machine, "musl" if "musl" in interpreter else "glibc"
    except (OSError, struct.error):
        return None
    return machine, "static"


@functools.cache
def local_uv() -> UvBinary | str:
    """This installation's uv binary, or why there is none to upload."""
    try:
        import uv

        path = Path(uv.find_uv_bin())
        version = importlib.metadata.version("uv")
    except (ImportError, FileNotFoundError, importlib.metadata.PackageNotFoundError):
        return "fleet's installation has no uv (pip install uv beside fleet)"
    found = elf_platform(path)
    if found is None:
        return f"this controller's uv ({path}) is not a Linux program"
    return UvBinary(path, version, *found)


def choose_installer(facts: dict[str, Any]) -> Choice:
    """uv where this controller's binary runs on the host `facts` (remote.py's inspect)
    describe, else pip with why."""
    if os.environ.get(FORCE_ENV) == "pip":
        return Choice(None, f"{FORCE_ENV}=pip")
    uv = local_uv()
    if isinstance(uv, str):
        return Choice(None, uv)
    system, machine = facts.get("system"), facts.get("machine")
    if system != "Linux" or machine != uv.machine:
        return Choice(None, f"this controller's uv is for {uv.machine} Linux, the host is "
                            f"{machine} {system}")
    # platform.libc_ver() names glibc; on musl (Alpine) it answers with an empty name.
    libc = (facts.get("libc") or ["", ""])[0] or "musl"
    if uv.libc not in ("static", libc):
        return Choice(None, f"this controller's uv needs {uv.libc}, the host has {libc}")
    return Choice(uv)

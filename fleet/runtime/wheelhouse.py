"""A wheelhouse on the controller: the wheels a host without internet installs from.

Which files a host needs: the torch wheel of its build and Python, and every other wheel
that can run there (torch's dependencies). Each is known by its sha256, computed once per
file and process, which is what the host checks an upload against (the uv binary fleet
uploads travels the same way, as a HostFile).
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from fleet.runtime.pin import TORCH_VERSION, RuntimeFailure, RuntimeSpec

# name-version(-build)?-python-abi-platform.whl (PEP 427)
WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<python>[^-]+)-"
                   r"(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$")
_hashes: dict[tuple[str, int, int], str] = {}
_hash_lock = threading.Lock()


@dataclass(frozen=True)
class HostFile:
    """A file of this machine that fleet uploads to a host, resumably, checked by sha256."""

    path: Path
    size: int
    sha256: str
    remote_name: str | None = None  # its name on the host, where not the file's own
    executable: bool = False

    @property
    def name(self) -> str:
        """The file's name on the host."""
        return self.remote_name or self.path.name


def file_sha256(path: Path) -> str:
    """The sha256 of the file at `path`, remembered while its size and mtime stay the same."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _hash_lock:
        known = _hashes.get(key)
        if known is None:
            digest = hashlib.sha256()
            with path.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            known = _hashes[key] = digest.hexdigest()
    return known


def _runs_there(python: str, platform: str, spec: RuntimeSpec) -> bool:
    cpython = f"cp{spec.python.replace('.', '')}"
    pythons = python.split(".")
    if not any(tag in ("py3", "py2.py3", cpython) or tag.startswith("py3") for tag in pythons):
        return False
    return platform == "any" or spec.machine in platform


def download_command(spec: RuntimeSpec, directory: Path) -> str:
    """The `pip download` command that fills a wheelhouse for `spec`."""
    version = spec.python
    return (f"pip download torch=={TORCH_VERSION} --only-binary=:all: --python-version "
            f"{version} --platform manylinux_2_28_{spec.machine} --index-url "
            f"{spec.build.index_url} --extra-index-url https://pypi.org/simple -d {directory}")


def select_wheels(directory: Path, spec: RuntimeSpec, host: str) -> list[HostFile]:
    """The wheels of `directory` that `spec`'s host needs; RuntimeFailure naming the
    command that fills a gap."""
    if not directory.is_dir():
        raise RuntimeFailure(f"{host}: the wheelhouse {directory} does not exist on "
                             "this machine. Fill it with: "
                             f"{download_command(spec, directory)}")
    torch: list[Path] = []
    others: list[Path] = []
    for path in sorted(directory.glob("*.whl")):
        match = WHEEL.match(path.name)
        if match is None or not _runs_there(match["python"], match["platform"], spec):
            continue
        if match["name"].lower() == "torch":
            version, _, local = match["version"].partition("+")
            if version == spec.torch and local in (spec.build.tag, ""):
                torch.append(path)
        elif not (spec.build.cuda is None and match["name"].lower().startswith("nvidia")):
            others.append(path)
    # The build's own label first; a wheel without one is PyPI's default build.
    torch.sort(key=lambda p: "+" not in p.name)
    if not torch:
        raise RuntimeFailure(
            f"{host}: the wheelhouse {directory} has no torch {spec.torch} wheel "
            f"of build {spec.build.tag} for Python {spec.python} on {spec.machine}, which this "
            f"host needs. Add it (with its dependencies): {download_command(spec, directory)}")
    return [HostFile(p, p.stat().st_size, file_sha256(p)) for p in [torch[0], *others]]

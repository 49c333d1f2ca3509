"""What a user installs, built and installed once for every test here: the wheel that
`pip install .` builds from the files git would commit, installed non-editable into a new
virtualenv away from this checkout, its dependencies from the package index (or pip's
cache), the source copy removed before anything runs (issue 54: the wheel once lacked a
file the agent reads, and editable installs never noticed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Installed:
    """fleet as a user installed it: the wheel, the virtualenv, its `fleet`."""

    wheel: Path
    venv: Path
    env: dict[str, str]  # no PYTHONPATH, no $FLEET_DB: nothing of this checkout

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def fleet(self) -> Path:
        return self.venv / "bin" / "fleet"

    def names(self) -> set[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return set(archive.namelist())

    def run(self, *args: str, cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.fleet), *args], cwd=cwd, capture_output=True,
                              text=True, env={**self.env, **(env or {})}, timeout=timeout,
                              check=False)


def tracked(*, others: bool = True) -> list[str]:
    """The files git would commit (`others`: untracked ones it does not ignore too)."""
    flags = ["-co", "--exclude-standard"] if others else []
    listed = subprocess.run(["git", "ls-files", *flags, "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (ROOT / name).exists()]


def _source_tree(target: Path) -> Path:
    """The files git would commit (no .venv, no build output), links kept as links."""
    for name in tracked():
        source, copy = ROOT / name, target / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, copy)
    return target


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("installed")
    source = _source_tree(root / "src")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "FLEET_DB", "VIRTUAL_ENV", "FLEET_NVML_REPLAY")}
    env["XDG_DATA_HOME"] = str(root / "data")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                            str(root / "dist"), str(source)], capture_output=True, text=True,
                           env=env, timeout=INSTALL_TIMEOUT_S, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (root / "dist").glob("fleet-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # --no-compile: the same files installed, without compiling every module of fleet's
    # dependencies to bytecode first (Python compiles what it imports).
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           "--no-compile", str(wheel)], capture_output=True, text=True,
                          env=env, timeout=INSTALL_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(source)  # nothing may come from the source tree any more
    return Installed(wheel, venv, env)

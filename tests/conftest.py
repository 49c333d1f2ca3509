from __future__ import annotations

import faulthandler
import glob
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import pytest

# One thread for torch's CPU kernels, here and in every process the tests start (the
# loopback sshd hosts set it for their sessions too, tests/probe/sshd.py): a small product
# split over two threads ran ~100x slower whenever another process held a core, as the
# other pytest-xdist worker does, which made the CPU benchmarks slow and their first
# seconds far from the rest. MKL_NUM_THREADS, which torch reads, rather than
# OMP_NUM_THREADS: the agent records OMP_NUM_THREADS among a host's settings.
os.environ.setdefault("MKL_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
GPU_CASES = FIXTURES / "gpus"
PY38_ENV = "FLEET_TEST_PY38"


UNGROUPED = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that pytest-xdist's loadgroup failed to group: it marks a grouped
    test by a suffix on its node id, which pytest 9.2 ignores, and the tests that share a
    broker or one expensive set-up would then run on several workers without a word."""
    if not getattr(config.option, "loadgroup", False):
        return  # not an xdist worker, or not --dist loadgroup
    for item in items:
        nodeid = item.nodeid
        if item.get_closest_marker("xdist_group") and nodeid.rfind("@") <= nodeid.rfind("]"):
            item.stash[UNGROUPED] = (
                "pytest-xdist's --dist loadgroup did not keep this test's xdist_group on one "
                f"worker: pytest {pytest.__version__} and this pytest-xdist do not work "
                "together (pytest-dev/pytest-xdist#1386). Install the dev extra's pytest: "
                "pip install -e '.[dev]'")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if UNGROUPED in item.stash:
        pytest.fail(item.stash[UNGROUPED], pytrace=False)


def fleet_in_process(args: Sequence[str], env: Mapping[str, str], cwd: Path,
                     timeout: float = 600.0) -> tuple[int, str, str]:
    """`fleet ARGS` run by click's test runner in this process, with exactly `env` as its
    environment and `cwd` as its directory: exit code, stdout, stderr. For commands whose
    own process is not what is tested: each `python -m fleet.cli` spent 4-5 s of CPU
    importing fleet on a 2-core machine. A command still running after `timeout` seconds
    ends the worker with every thread's stack (faulthandler), as a hung subprocess would
    fail its test, instead of holding CI to its cut."""
    from click.testing import CliRunner

    from fleet.cli import main

    whole: dict[str, str | None] = {name: None for name in os.environ}
    whole.update(env)
    before = Path.cwd()
    os.chdir(cwd)
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        done = CliRunner().invoke(main, list(args), env=whole)
    finally:
        faulthandler.cancel_dump_traceback_later()
        os.chdir(before)
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    return done.exit_code, done.stdout, done.stderr


@pytest.fixture
def h100_recording() -> Path:
    return GPU_CASES / "h100-sxm5-passthrough" / "nvml-recording.json"


def _is_python38(path: str) -> bool:
    # A pyenv shim or a stale link can exist and still not run 3.8: ask the interpreter.
    try:
        done = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == "(3, 8)"


@lru_cache(maxsize=1)
def find_python38() -> tuple[str | None, tuple[str, ...]]:
    """A Python 3.8 interpreter, and every place looked at, in the order looked."""
    named = os.environ.get(PY38_ENV)
    if named:
        # Named explicitly: that one or nothing, so that CI never tests another by mistake.
        return (named if _is_python38(named) else None), (
            f"${PY38_ENV}={named} (not a Python 3.8 that runs)",)
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [shutil.which("python3.8"),
                  *sorted(glob.glob(str(pyenv / "versions" / "3.8*" / "bin" / "python3.8")))]
    looked = (f"${PY38_ENV} (unset)", "python3.8 on PATH",
              str(pyenv / "versions" / "3.8*" / "bin" / "python3.8"))
    found = next((path for path in candidates if path and _is_python38(path)), None)
    return found, looked


@pytest.fixture(scope="session")
def python38() -> str:
    """Path of a Python 3.8, the oldest the agent supports; fails, never skips, without one."""
    found, looked = find_python38()
    if found is None:
        pytest.fail(
            "no Python 3.8 to check that the agent still runs on the oldest Python it "
            f"supports; looked at: {', '.join(looked)}. Install one (`uv python install "
            "3.8`, `pyenv install 3.8`) and set FLEET_TEST_PY38=/path/to/python3.8",
            pytrace=False)
    return found

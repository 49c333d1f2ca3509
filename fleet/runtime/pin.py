"""The runtime fleet pins: one torch per fleet release, its build chosen by the host's driver.

cuBLAS picks its GEMM kernels by version, and each provider's image brings its own torch,
CUDA runtime and cuBLAS: two providers' figures could differ by software alone. So fleet
installs the same torch everywhere, and only the CUDA build varies, the newest one the
host's driver can run (the driver's CUDA version as NVML reports it,
`nvmlSystemGetCudaDriverVersion`, the same figure the fingerprint stores).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from fleet.errors import FleetError

TORCH_VERSION = "2.13.0"
RUNTIME_FORMAT = "fleet-runtime/1"
# torch 2.13 wheels exist for CPython 3.10 and newer.
MIN_PYTHON = (3, 10)
PYTORCH_INDEX = "https://download.pytorch.org/whl"
PYPI_INDEX = "https://pypi.org/simple"


class RuntimeFailure(FleetError):
    """The pinned runtime cannot be provided on a host: the message says why and what to
    do. The host fails at stage `runtime`; the others carry on."""

    exit_code = 3


@dataclass(frozen=True)
class Build:
    """A PyTorch build: its local version label and the CUDA version it was built with."""

    tag: str  # PyTorch's local version label: "cu128", or "cpu"
    cuda: tuple[int, int] | None  # the CUDA version it was built with; None for the CPU build

    @property
    def index_url(self) -> str:
        """The PyTorch index that serves this build."""
        return f"{PYTORCH_INDEX}/{self.tag}"

    @property
    def label(self) -> str:
        """The build in words: "CUDA 12.8", or "CPU"."""
        return "CPU" if self.cuda is None else f"CUDA {self.cuda[0]}.{self.cuda[1]}"


# Newest first. A build needs a driver that supports at least its CUDA version; minor
# version compatibility would stretch that, but not for every kernel, and a measurement
# that fails half-way is worse than one on an older build.
CUDA_BUILDS = (Build("cu130", (13, 0)), Build("cu128", (12, 8)), Build("cu126", (12, 6)))
CPU_BUILD = Build("cpu", None)


def parse_cuda(text: str) -> tuple[int, int] | None:
    """(major, minor) of a CUDA version such as "12.8"; None when `text` is not one."""
    major, _, minor = text.partition(".")
    if not (major.isdigit() and minor.split(".")[0].isdigit()):
        return None
    return int(major), int(minor.split(".")[0])


def choose_build(host: str, cuda_driver_version: str | None, gpu_count: int) -> Build:
    """The build for a host whose driver supports `cuda_driver_version` ("12.8"; None
    without a driver). Without a GPU (a --cpu smoke run) the CPU build: it is the same
    torch, and a CUDA build would download gigabytes of libraries nothing uses."""
    if gpu_count == 0 or cuda_driver_version is None:
        return CPU_BUILD
    supported = parse_cuda(cuda_driver_version)
    if supported is None:
        raise RuntimeFailure(f"{host}: the driver reports CUDA version "
                             f"{cuda_driver_version!r}, which fleet cannot read. Set "
                             "`runtime: {use: host}` for this host to use its own torch")
    for build in CUDA_BUILDS:
        assert build.cuda is not None
        if build.cuda <= supported:
            return build
    oldest = CUDA_BUILDS[-1].label
    raise RuntimeFailure(
        f"{host}: the driver supports CUDA {cuda_driver_version}, older than every "
        f"build of torch {TORCH_VERSION} (the oldest needs {oldest}). Update the NVIDIA "
        "driver, or set `runtime: {use: host}` for this host to measure with its own torch "
        "(its results then name a different software stack)")


@dataclass(frozen=True)
class RuntimeSpec:
    """What goes into one environment; its name is a hash of exactly this."""

    torch: str
    build: Build
    python: str  # "3.11": the host interpreter's major.minor, which the wheels are built for
    machine: str  # "x86_64", "aarch64"

    @property
    def requirement(self) -> str:
        """pip's requirement for this torch: any build of the version."""
        # PEP 440: `==2.13.0` matches 2.13.0+cu128 too; the index or wheelhouse decides
        # which build that is, and the install checks what it got.
        return f"torch=={self.torch}"

    def as_dict(self) -> dict[str, str]:
        """The spec as the plain data its name hashes."""
        return {"format": RUNTIME_FORMAT, "torch": self.torch, "build": self.build.tag,
                "python": self.python, "machine": self.machine}

    @property
    def name(self) -> str:
        """The environment's directory name: the versions, and a hash of the whole spec."""
        digest = hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode())
        return (f"torch-{self.torch}-{self.build.tag}-py{self.python}-"
                f"{digest.hexdigest()[:12]}")


def runtime_spec(host: str, python_version: str, machine: str, cuda_driver_version: str | None,
                 gpu_count: int) -> RuntimeSpec:
    """The pinned runtime for a host, or RuntimeFailure saying why it has none."""
    parts = python_version.split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        raise RuntimeFailure(f"{host}: its Python reports version "
                             f"{python_version!r}, which fleet cannot read")
    if (int(parts[0]), int(parts[1])) < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        raise RuntimeFailure(
            f"{host}: its Python is {python_version}, and torch {TORCH_VERSION} "
            f"needs {need} or newer. Set `python:` for it in the inventory to a newer "
            "interpreter, or `runtime: {use: host}` to measure with the host's own torch")
    return RuntimeSpec(TORCH_VERSION, choose_build(host, cuda_driver_version, gpu_count),
                       f"{parts[0]}.{parts[1]}", machine)

"""The host's limits in the agent document (agent/host/, "host_limits"): what a job
meets beside the GPUs. Validated as the rest of the document is (fleet/model/base.py):
a host is not trusted, so strings and lists are bounded and unknown fields refused.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from fleet.model.base import Strict, Text, Verdict

Short = Annotated[str, StringConstraints(max_length=64)]
Bytes = Annotated[int, Field(ge=0, le=1 << 62)]
Cpus = Annotated[int, Field(ge=0, le=1 << 20)]
Mib = Annotated[int, Field(ge=0, le=1 << 40)]
PciAddress = Annotated[str, StringConstraints(
    max_length=16, pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")]


class Cgroup(Strict):
    """The tightest cgroup limits on the agent's process that its namespace shows."""

    version: Literal[1, 2] | None
    cpu_limit: Annotated[float, Field(gt=0, le=1 << 20)] | None  # CPUs
    memory_limit_bytes: Bytes | None


class NumaNode(Strict):
    node: Annotated[int, Field(ge=0, le=4096)]
    cpus: Cpus
    memory_mib: Mib | None


class Iommu(Strict):
    """IOMMU groups, the domain types of the NVIDIA GPUs' groups ("identity" is
    passthrough; "DMA", "DMA-FQ" translate every transfer), and the kernel's arguments."""

    groups: Annotated[int, Field(ge=0, le=1 << 20)]
    gpu_domains: dict[Short, Annotated[int, Field(ge=0, le=4096)]] = Field(max_length=8)
    cmdline: list[Short] = Field(max_length=8)


class AcsBridge(Strict):
    """A PCI bridge above a GPU or fabric NIC, and whether ACS redirects peer traffic
    there (None: its extended configuration space was not readable)."""

    address: PciAddress
    above: list[PciAddress] = Field(max_length=16)
    redirect: bool | None
    bits: list[Literal["SV", "TB", "RR", "CR", "UF", "EC", "DT"]] | None = Field(max_length=7)


class Acs(Strict):
    endpoints: Annotated[int, Field(ge=0, le=4096)]
    bridges: list[AcsBridge] = Field(max_length=64)
    readable: bool

    @property
    def redirecting(self) -> list[AcsBridge]:
        return [b for b in self.bridges if b.redirect]


class Version(Strict):
    version: Short | None
    source: Short | None


class Vboost(Strict):
    listed: dict[Annotated[str, StringConstraints(pattern=r"^\d{1,3}$")],
                 dict[Literal["current", "max"], Annotated[int, Field(ge=0, le=1000)]]] = Field(
        max_length=64)
    tenant_may_change: Verdict
    method: Literal["inferred"]


class Software(Strict):
    container_toolkit: Version
    fabric_manager: Version
    vboost: Vboost


class HostLimits(Strict):
    """What `agent.host.document.host_limits()` returns, under the document's
    "host_limits" key."""

    format: Literal["fleet-host-limits/1"]
    cpus_usable: Cpus | None
    cgroup: Cgroup
    memory_total_mib: Mib | None
    numa: list[NumaNode] = Field(max_length=64)
    governors: dict[Short, Cpus] = Field(max_length=16)
    cpufreq_driver: Short | None
    shm_bytes: Bytes | None
    shm_mounted: bool
    memlock_soft_bytes: Bytes | None
    memlock_hard_bytes: Bytes | None
    memlock_unlimited: bool
    hugepages_total: Annotated[int, Field(ge=0, le=1 << 40)] | None
    hugepage_size_kib: Annotated[int, Field(ge=0, le=1 << 40)] | None
    transparent_hugepages: Short | None
    iommu: Iommu
    profiling_admin_only: bool | None
    acs: Acs
    software: Software | None
    import_torch_s: Annotated[float, Field(ge=0, le=1e4)] | None
    import_torch_error: Text | None
    read_s: Annotated[float, Field(ge=0, le=1e4)]

    @model_validator(mode="after")
    def _memlock_agrees(self) -> HostLimits:
        if self.memlock_unlimited and self.memlock_soft_bytes is not None:
            raise ValueError("memlock_unlimited with a soft limit in bytes")
        return self

    def cpus_available(self) -> float | None:
        """The CPUs a job may use: its affinity, under its cgroup's quota."""
        found = [v for v in (self.cpus_usable, self.cgroup.cpu_limit) if v is not None]
        return float(min(found)) if found else None

    def memory_available_mib(self) -> int | None:
        """The memory a job may use: the host's, under its cgroup's limit."""
        found = [v for v in (self.memory_total_mib,
                             None if self.cgroup.memory_limit_bytes is None
                             else self.cgroup.memory_limit_bytes >> 20) if v is not None]
        return min(found) if found else None

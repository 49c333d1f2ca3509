"""The node's network fingerprint in the agent document (agent/network/fingerprint.py,
`network()`): each RDMA port and network interface, the GPUs their distance is given to,
and GPUDirect RDMA. Validated as the rest of the document is (fleet/model/base.py): a
host is not trusted, so strings and lists are bounded and unknown fields refused.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from fleet.model.base import Name, Strict, Text

Kind = Literal["infiniband", "roce", "efa", "software-roce", "ethernet", "virtual", "unknown"]
Level = Literal["PIX", "PXB", "PHB", "NODE", "SYS"]
Short = Annotated[str, StringConstraints(max_length=64)]
PciAddress = Annotated[str, StringConstraints(
    max_length=16, pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")]
GpuIndex = Annotated[str, StringConstraints(pattern=r"^\d{1,3}$")]
Numa = Annotated[int, Field(ge=0, le=4096)]
FABRIC_KINDS = ("infiniband", "roce", "efa")
SourceName = Literal["sysfs", "ibstat", "ibv_devinfo", "rdma link", "fi_info"]
ToolName = Literal["ibstat", "ibv_devinfo", "rdma_link", "fi_info", "fi_info_efa", "topo",
                   "modules", "uname", "nvidia_version"]


class NetworkDevice(Strict):
    """One RDMA port (named for its device, "mlx5_0", or "mlx5_0/2" past port 1) or one
    network interface with no RDMA device ("eth0"). `up` is None where the state says
    neither (loopback's "unknown"); `rate_gbps` None where nothing reliable says it."""

    name: Name
    device: Name | None
    port: Annotated[int, Field(ge=1, le=255)] | None
    netdev: Name | None
    kind: Kind
    fabric: bool
    link_layer: Short | None
    state: Short | None
    physical_state: Short | None
    up: bool | None
    rate_gbps: Annotated[float, Field(gt=0, le=100_000)] | None
    width: Short | None
    speed: Short | None
    firmware: Short | None
    model: Short | None
    driver: Short | None
    pci_address: PciAddress | None
    numa_node: Numa | None
    mtu: Annotated[int, Field(ge=0, le=1 << 20)] | None
    gpu_distance: dict[GpuIndex, Level] = Field(max_length=64)
    distance_source: Literal["nvidia-smi topo -m", "sysfs"] | None
    sources: list[SourceName] = Field(max_length=8)

    @model_validator(mode="after")
    def _fabric_follows_kind(self) -> NetworkDevice:
        if self.fabric != (self.kind in FABRIC_KINDS):
            raise ValueError(f"{self.name}: fabric must be true exactly for "
                             f"{', '.join(FABRIC_KINDS)}, not for kind {self.kind}")
        if self.gpu_distance and self.distance_source is None:
            raise ValueError(f"{self.name}: a GPU distance needs its source")
        return self


class NetworkGpu(Strict):
    """A GPU the distances are given to, by nvidia-smi's index."""

    index: Annotated[int, Field(ge=0, le=255)]
    pci_address: PciAddress | None
    numa_node: Numa | None


class GpuDirectRdma(Strict):
    """GPUDirect RDMA: possible through the peer-memory module or DMA-BUF (agent/network/
    gdr.py says what each rests on), with the reason in words."""

    state: Literal["on", "off", "unknown"]
    peermem: Literal["loaded", "absent", "unknown"]
    dmabuf: Literal["possible", "no", "unknown"]
    basis: Text


class NetworkFingerprint(Strict):
    """What `agent.network.fingerprint.network()` returns, under the document's
    "network" key."""

    format: Literal["fleet-network/1"]
    devices: list[NetworkDevice] = Field(max_length=512)
    gpus: list[NetworkGpu] = Field(max_length=64)
    gdr: GpuDirectRdma
    fabric_nics: Annotated[int, Field(ge=0, le=512)]
    sources: list[ToolName] = Field(max_length=16)
    notes: list[Text] = Field(max_length=16)

    @model_validator(mode="after")
    def _count(self) -> NetworkFingerprint:
        counted = sum(1 for d in self.devices if d.fabric)
        if counted != self.fabric_nics:
            raise ValueError(f"fabric_nics says {self.fabric_nics}, the devices list "
                             f"{counted} fabric NICs")
        return self

    @property
    def fabric(self) -> list[NetworkDevice]:
        """The fabric NICs: InfiniBand, RoCE and EFA ports."""
        return [d for d in self.devices if d.fabric]

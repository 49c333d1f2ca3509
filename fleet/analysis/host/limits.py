"""Findings on the host's limits (fleet/model/host_limits.py): what a job meets beside
the GPUs, each with what it costs a job when wrong and whose it is to fix.

Whose, by the rule the rest of fleet keeps (docs/findings.md: a setting the renter's
run set is the renter's): a limit of the container the agent ran in (its /dev/shm, its
locked-memory ulimit, its cgroup's CPU and memory) is the renter's where the inventory
says the renter starts the container (`expect: {container: renter}`), the provider's
where it says the provider does, and not settled where it says neither; a limit of the
host itself (its kernel's IOMMU and ACS, the CPU governor, a bare machine's /dev/shm and
ulimits, the CPUs and memory it was sold with) is the provider's.

Rules, one node on its own:
- **/dev/shm under 1 GiB** (`shm`): NCCL's shared-memory transport between a node's
  GPUs and torch's DataLoader workers both live there; Docker's default is 64 MiB, and
  NCCL's troubleshooting guide asks for `--shm-size=1g` (NCCL fails with "Error while
  creating shared memory segment"; a DataLoader worker dies with a bus error).
- **locked memory limited on a node with fabric NICs** (`memlock`): RDMA registers
  (pins) its buffers; NCCL's troubleshooting guide asks for `--ulimit memlock=-1`, and
  InfiniBand verbs fail to register memory past the limit.
- **fewer CPUs or less memory than listed, or than a job needs** (`cpus`, `memory`):
  under the listing's `cpu_cores_per_gpu` / `memory_gb_per_gpu` by more than 5%, the
  provider's; without a listing, under 2 CPUs a GPU (a rank's own thread and one
  data-loading worker) or less memory a GPU than the GPU holds (a checkpoint of its
  state cannot be staged) where a cgroup below the host's own cut it, whoever set the
  limit (the container's rule). A machine that simply has that little, with nothing
  listed, is what was rented: said beside the host, not disputed (the lent 1x H200 VM:
  126 GiB for a 141 GB GPU).
- **CPU governor not performance** (`governor`): CPUs that clock down between launches
  slow a launch-bound step and data loading; ClusterMAX's health checks read it. Under
  intel_pstate and amd-pstate-epp "powersave" lets the hardware choose and is not called.
- **IOMMU translating the GPUs' DMA on bare metal** (`iommu`): every host copy and
  GPUDirect RDMA transfer goes through the IOMMU's page tables (the host-link finding
  sees host copies halved); `iommu=pt` (passthrough) is the usual setting of GPU servers.
- **ACS redirecting peer traffic on bare metal** (`acs`): NCCL's troubleshooting guide:
  PCI ACS must be disabled on bare metal, or GPU-to-NIC and GPU-to-GPU traffic under one
  switch goes up to the root complex (slower, or hangs). In a VM it is needed, not called.

Information, in the section and never disputed: the time to import torch, whether
profiling is for admins only (the driver's default since NVIDIA's fix for CVE-2018-6260)
and whether the tenant may change vboost.

Core functions take and return data; nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fleet.model.host_limits import HostLimits

Party = Literal["provider", "renter", "unsettled"]
Rule = Literal["shm", "memlock", "cpus", "memory", "governor", "iommu", "acs"]
GIB = 1 << 30
SHM_FLOOR = GIB
CPUS_PER_GPU_FLOOR = 2.0
LISTED_TOLERANCE = 0.05
# Governors under which "powersave" hands the choice to the CPU (HWP / EPP).
HARDWARE_PSTATES = ("intel_pstate", "amd-pstate-epp")

SOURCE_SHM = ("NCCL troubleshooting (Docker: --shm-size=1g; 'Error while creating shared "
              "memory segment'); PyTorch's Docker notes: --ipc=host or --shm-size")
SOURCE_MEMLOCK = ("NCCL troubleshooting: --ulimit memlock=-1 for InfiniBand; RDMA pins "
                  "(registers) its buffers against RLIMIT_MEMLOCK")
SOURCE_ACS = ("NCCL troubleshooting, PCI Access Control Services: disable ACS on bare "
              "metal, else P2P traffic is redirected to the root complex")
SOURCE_IOMMU = ("IOMMU translation on every DMA; iommu=pt (passthrough) is the usual "
                "setting for GPU and RDMA servers")
SOURCE_GOVERNOR = "cpufreq's scaling_governor; SemiAnalysis ClusterMAX health checks"
SOURCE_LISTED = "the listing's expect, against what the run may use"


@dataclass(frozen=True)
class HostNode:
    """One host's limits with what they are judged by."""

    host: str
    provider: str
    platform: str  # "bare-metal", "vm", "container", "vm+container", "unknown"
    gpu_count: int
    gpu_memory_mib: int | None  # the largest GPU's
    limits: HostLimits
    expect: Mapping[str, Any] | None = None
    fabric_nics: int | None = None  # None: the network was not read


@dataclass(frozen=True)
class LimitFinding:
    """One limit wrong on one host: whose, what it costs, what to do."""

    host: str
    rule: Rule
    party: Party
    title: str
    evidence: str
    cost: str
    action: str
    source: str


def in_container(platform: str) -> bool:
    return "container" in platform


def whose_container(node: HostNode) -> tuple[Party, str]:
    """Whose a limit of the container the agent ran in is, and why."""
    if not in_container(node.platform):
        return "provider", "the host's own, no container around the run"
    said = (node.expect or {}).get("container")
    if said == "renter":
        return "renter", "the container's, which the inventory says you start"
    if said == "provider":
        return "provider", "the container's, which the inventory says the provider starts"
    return "unsettled", ("the container's, and the inventory does not say who starts it: "
                         "set expect: {container: renter} or {container: provider}")


def _size(value: int) -> str:
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / (1 << 20):.0f} MiB"


def _shm(node: HostNode) -> list[LimitFinding]:
    limits = node.limits
    if limits.shm_mounted and (limits.shm_bytes is None or limits.shm_bytes >= SHM_FLOOR):
        return []
    party, why = whose_container(node)
    found = "not mounted" if not limits.shm_mounted else _size(limits.shm_bytes or 0)
    fix = ("run the container with --shm-size=16g (or --ipc=host)" if
           in_container(node.platform) else "mount /dev/shm as tmpfs with room")
    return [LimitFinding(
        node.host, "shm", party, f"{node.host}: /dev/shm {found}, under 1 GiB",
        f"/dev/shm {found} ({why})",
        "NCCL's shared-memory transport between the node's GPUs fails or falls back, and "
        "DataLoader workers die with a bus error", fix, SOURCE_SHM)]


def _memlock(node: HostNode) -> list[LimitFinding]:
    limits = node.limits
    if limits.memlock_unlimited or not node.fabric_nics:
        return []
    party, why = whose_container(node)
    soft = "unknown" if limits.memlock_soft_bytes is None else _size(limits.memlock_soft_bytes)
    fix = ("run the container with --ulimit memlock=-1" if in_container(node.platform)
           else "set memlock unlimited in /etc/security/limits.conf")
    return [LimitFinding(
        node.host, "memlock", party,
        f"{node.host}: locked memory limited to {soft} with {node.fabric_nics} fabric NICs",
        f"RLIMIT_MEMLOCK {soft} ({why})",
        "RDMA cannot register NCCL's buffers past the limit: multi-node jobs fail or "
        "fall back to sockets", fix, SOURCE_MEMLOCK)]


@dataclass(frozen=True)
class _Share:
    """CPUs or memory a GPU: as found, as listed, and whether a cgroup below the host's
    own cut it (a limit someone set, not what the machine is)."""

    what: Literal["cpus", "memory"]
    per_gpu: float
    listed: float | None
    floor: float | None
    cut: bool
    evidence: str


def _shares(node: HostNode) -> list[_Share]:
    limits, expect, gpus = node.limits, node.expect or {}, max(node.gpu_count, 1)
    found = []
    cpus, memory = limits.cpus_available(), limits.memory_available_mib()
    if cpus is not None and node.gpu_count:
        listed = expect.get("cpu_cores_per_gpu")
        found.append(_Share(
            "cpus", cpus / gpus, None if listed is None else float(listed),
            CPUS_PER_GPU_FLOOR,
            limits.cgroup.cpu_limit is not None and limits.cpus_usable is not None
            and limits.cgroup.cpu_limit < limits.cpus_usable, f"{cpus:g} CPUs for {gpus} GPUs"))
    if memory is not None and node.gpu_count:
        listed = expect.get("memory_gb_per_gpu")
        gpu_gb = None if node.gpu_memory_mib is None else node.gpu_memory_mib * 1.048576 / 1000
        found.append(_Share(
            "memory", memory * 1.048576 / 1000 / gpus, None if listed is None else float(listed),
            gpu_gb, limits.cgroup.memory_limit_bytes is not None
            and limits.memory_total_mib is not None
            and limits.cgroup.memory_limit_bytes >> 20 < limits.memory_total_mib,
            f"{memory:,} MiB for {gpus} GPUs"))
    return found


def _share_words(share: _Share) -> str:
    if share.what == "cpus":
        return f"{share.per_gpu:.1f} CPUs a GPU"
    return f"{share.per_gpu:.0f} GB of memory a GPU"


COSTS = {"cpus": "each rank's launch thread and its data loading share a CPU: steps wait "
                 "on the host",
         "memory": "a checkpoint of the GPUs' state cannot be staged in host memory, and "
                   "offloading runs out first"}


def _cpus_and_memory(node: HostNode) -> list[LimitFinding]:
    """Under the listing: the provider's. Under a floor because a cgroup cut the host's
    own: whoever set the limit (the container's rule). Under a floor on a machine that
    is so (nothing listed, nothing cut) is what was rented: said in `notes`, not
    disputed."""
    found = []
    for share in _shares(node):
        rule: Rule = share.what
        if share.listed is not None:
            if share.per_gpu < share.listed * (1 - LISTED_TOLERANCE):
                found.append(LimitFinding(
                    node.host, rule, "provider",
                    f"{node.host}: {_share_words(share)}, listed {share.listed:g}",
                    share.evidence, COSTS[share.what],
                    f"ask for the {'CPUs' if share.what == 'cpus' else 'memory'} listed",
                    SOURCE_LISTED))
        elif share.cut and share.floor is not None and share.per_gpu < share.floor:
            party, why = whose_container(node)
            under = (f"under {share.floor:g}" if share.what == "cpus"
                     else f"less than the GPU's {share.floor:.0f}")
            found.append(LimitFinding(
                node.host, rule, party, f"{node.host}: {_share_words(share)}, {under}",
                f"{share.evidence}, cut by the cgroup's limit ({why})", COSTS[share.what],
                f"lift the cgroup's {'CPU quota' if share.what == 'cpus' else 'memory limit'}"
                " (docker run --cpus / --memory)", SOURCE_LISTED))
    return found


def _spec_notes(node: HostNode) -> list[str]:
    said = []
    for share in _shares(node):
        if share.listed is None and not share.cut and share.floor is not None \
                and share.per_gpu < share.floor:
            under = (f"under {share.floor:g}" if share.what == "cpus"
                     else f"less than the GPU's {share.floor:.0f}")
            said.append(f"{_share_words(share)}, {under} ({share.evidence}): what the "
                        f"machine has, nothing listed to dispute; {COSTS[share.what]}")
    return said


def _governor(node: HostNode) -> list[LimitFinding]:
    limits = node.limits
    slow = {g: n for g, n in limits.governors.items() if g != "performance"
            and not (g == "powersave" and limits.cpufreq_driver in HARDWARE_PSTATES)}
    if not slow:
        return []
    said = ", ".join(f"{g} on {n} CPUs" for g, n in sorted(slow.items()))
    return [LimitFinding(
        node.host, "governor", "provider", f"{node.host}: CPU governor {said}",
        f"scaling_governor {said} (driver {limits.cpufreq_driver or 'unknown'})",
        "CPUs clock down between launches: launch-bound steps and data loading slow",
        "ask the provider to set the performance governor", SOURCE_GOVERNOR)]


def _iommu(node: HostNode) -> list[LimitFinding]:
    if node.platform != "bare-metal":
        return []
    translated = {k: n for k, n in node.limits.iommu.gpu_domains.items()
                  if k.upper().startswith("DMA")}
    if not translated:
        return []
    gpus = sum(translated.values())
    args = " ".join(node.limits.iommu.cmdline) or "no IOMMU argument"
    return [LimitFinding(
        node.host, "iommu", "provider",
        f"{node.host}: IOMMU translates the DMA of {gpus} GPUs",
        f"IOMMU domain {', '.join(sorted(translated))} for {gpus} GPUs; kernel: {args}",
        "every host copy and GPUDirect RDMA transfer is translated: host links and "
        "RDMA lose bandwidth", "ask the provider to boot with iommu=pt", SOURCE_IOMMU)]


def _acs(node: HostNode) -> list[LimitFinding]:
    if node.platform != "bare-metal":
        return []
    redirecting = node.limits.acs.redirecting
    if not redirecting:
        return []
    named = ", ".join(b.address for b in redirecting[:6])
    more = f" and {len(redirecting) - 6} more" if len(redirecting) > 6 else ""
    return [LimitFinding(
        node.host, "acs", "provider",
        f"{node.host}: PCIe ACS redirects peer traffic on {len(redirecting)} bridges",
        f"ACS P2P redirect on {named}{more}, above the GPUs and fabric NICs",
        "GPU-to-GPU and GPU-to-NIC traffic under one switch goes through the root "
        "complex: GPUDirect P2P and RDMA slow, or hang", "ask the provider to disable ACS "
        "on the GPU servers' PCIe switches (setpci, or the BIOS)", SOURCE_ACS)]


def judge_limits(node: HostNode) -> list[LimitFinding]:
    """Every finding on one host's limits, in the order a job meets them."""
    return (_shm(node) + _memlock(node) + _cpus_and_memory(node) + _governor(node)
            + _iommu(node) + _acs(node))


def notes(node: HostNode) -> list[str]:
    """What the section says of the host that is no finding: profiling, vboost, ACS
    unread, the import of torch."""
    limits, said = node.limits, _spec_notes(node)
    if limits.import_torch_s is not None:
        said.append(f"import torch: {limits.import_torch_s:.1f} s in a fresh process")
    elif limits.import_torch_error:
        said.append(f"import torch: not timed ({limits.import_torch_error})")
    if limits.profiling_admin_only:
        said.append("profiling (Nsight Compute counters): admins only "
                    "(RmProfilingAdminOnly=1, the driver's default); ask the provider "
                    "if you profile")
    elif limits.profiling_admin_only is False:
        said.append("profiling: open to every user (RmProfilingAdminOnly=0)")
    if limits.software is not None and limits.software.vboost.listed:
        said.append(f"vboost: the tenant may change it: "
                    f"{limits.software.vboost.tenant_may_change} (inferred)")
    if limits.acs.endpoints and limits.acs.bridges and not limits.acs.readable:
        said.append("ACS: not read (the bridges' extended configuration space needs root)")
    return said

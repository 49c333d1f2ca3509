"""The report's section on what a job touches beside the GPUs (issue 58): each host's
limits (CPUs and memory a GPU, /dev/shm, locked memory, governor, IOMMU, ACS, the
import of torch), its storage figures, and the versions a provider patches, with the
findings on them (fleet/analysis/host/limits.py, storage.py, bulletins.py).

    section = host_storage_section(engine, data)

The provider's findings are also in "What to dispute", the renter's in "Yours to fix",
the unsettled in "Not settled" (kinds "host_limit", "storage", "bulletin").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select

from fleet.analysis.dataset import Dataset, HostState
from fleet.analysis.host.bulletins import BulletinFile, NodeVersions, judge_versions, load_bulletins
from fleet.analysis.host.limits import HostNode, judge_limits, notes
from fleet.analysis.host.storage import StorageNode, compare_siblings, judge_storage
from fleet.model.host_limits import HostLimits
from fleet.model.storage import Storage, StorageTarget
from fleet.store import models
from fleet.store.host_storage import read_host_limits, read_storage
from fleet.store.network import read_networks
from fleet.store.query import in_chunks

GIB = 1 << 30
Tuple6 = tuple[str, str, str, str, str | None, tuple[str, ...]]


@dataclass(frozen=True)
class StorageLine:
    """One folder as the section lists it."""

    path: str
    role: str
    fs_type: str
    sequential: str  # "write 2.10, read 3.40 GB/s (O_DIRECT)", or why not measured
    small_files: str
    checkpoint: str


@dataclass(frozen=True)
class HostLine:
    """One host: its limits in words, its storage, its versions, and the findings."""

    provider: str
    host: str
    limits: tuple[tuple[str, str], ...]  # (what, as found)
    storage: tuple[StorageLine, ...]
    versions: str
    notes: tuple[str, ...]
    findings: tuple[tuple[str, Tuple6], ...]  # (side, finding)


@dataclass(frozen=True)
class HostStorageSection:
    hosts: tuple[HostLine, ...] = ()
    unread: tuple[str, ...] = ()  # "provider host" of hosts whose document has neither block

    def on(self, side: str) -> list[Tuple6]:
        """The findings on one side ("provider", "renter", "unsettled")."""
        return [f for h in self.hosts for s, f in h.findings if s == side]


def _size(value: int | None) -> str:
    if value is None:
        return "unknown"
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / (1 << 20):.0f} MiB"


def _limit_words(limits: HostLimits, gpus: int) -> tuple[tuple[str, str], ...]:
    cpus, memory = limits.cpus_available(), limits.memory_available_mib()
    per = max(gpus, 1)
    governor = ", ".join(f"{g} ({n})" for g, n in sorted(limits.governors.items())) or \
        "not exposed (no cpufreq)"
    cgroup = limits.cgroup
    said = [
        ("CPUs", "unknown" if cpus is None else
         f"{cpus:g}" + (f", {cpus / per:.1f} a GPU" if gpus else "")),
        ("memory", "unknown" if memory is None else
         f"{memory / 1024:,.0f} GiB" + (f", {memory / 1024 / per:.0f} a GPU" if gpus else "")),
        ("cgroup", "none seen" if cgroup.version is None else
         f"v{cgroup.version}: CPUs {cgroup.cpu_limit or 'no limit'}, memory "
         f"{_size(cgroup.memory_limit_bytes) if cgroup.memory_limit_bytes else 'no limit'}"),
        ("NUMA", f"{len(limits.numa)} nodes" if limits.numa else "not shown"),
        ("governor", governor),
        ("/dev/shm", _size(limits.shm_bytes) if limits.shm_mounted else "not mounted"),
        ("locked memory", "unlimited" if limits.memlock_unlimited
         else _size(limits.memlock_soft_bytes)),
        ("huge pages", f"{limits.hugepages_total or 0} reserved, THP "
         f"{limits.transparent_hugepages or 'unknown'}"),
        ("IOMMU", ", ".join(f"{k} ({n} GPUs)" for k, n in
                            sorted(limits.iommu.gpu_domains.items())) or
         f"{limits.iommu.groups} groups"),
        ("ACS", "not read (needs root)" if limits.acs.bridges and not limits.acs.readable
         else f"redirect on {len(limits.acs.redirecting)} of "
              f"{len(limits.acs.bridges)} bridges" if limits.acs.bridges else "no bridge seen"),
        ("import torch", "not timed" if limits.import_torch_s is None
         else f"{limits.import_torch_s:.1f} s"),
    ]
    return tuple(said)


def _storage_line(target: StorageTarget) -> StorageLine:
    if target.refused is not None:
        why = f"not measured: {target.refused}"
        return StorageLine(target.path, target.role, target.fs_type or "?", why, "", "")
    cache = "O_DIRECT" if target.direct else "through the page cache"
    sequential = (f"write {target.write_gbps or 0:.2f}, read {target.read_gbps or 0:.2f} "
                  f"GB/s ({cache})")
    small = ("" if target.small_read_per_s is None else
             f"{target.small_read_per_s:,.0f} opened and read a second, "
             f"{target.small_create_per_s or 0:,.0f} created")
    checkpoint = (f"not run: {target.checkpoint_error}" if target.checkpoint_bytes is None
                  else f"{_size(target.checkpoint_bytes)}: written "
                       f"{target.checkpoint_write_gbps or 0:.2f}, read "
                       f"{target.checkpoint_read_gbps or 0:.2f} GB/s")
    return StorageLine(target.path, target.role, target.fs_type or "?", sequential, small,
                       checkpoint)


@dataclass(frozen=True)
class _Facts:
    platform: str
    gpus: int
    gpu_memory_mib: int | None
    driver: str | None
    variant: str


def _facts(engine: Engine, documents: list[int]) -> dict[int, _Facts]:
    d, f = models.Document, models.Fingerprint
    platforms: dict[int, str] = {}
    gpus: dict[int, list[Any]] = {}
    with engine.connect() as conn:
        for chunk in in_chunks(documents):
            platforms.update({int(r.id): str(r.platform) for r in conn.execute(
                select(d.id, d.platform).where(d.id.in_(chunk)))})
            for row in conn.execute(select(f.document_id, f.memory_total_mib,
                                           f.driver_version, f.variant)
                                    .where(f.document_id.in_(chunk))):
                gpus.setdefault(int(row.document_id), []).append(row)
    found = {}
    for document, platform in platforms.items():
        rows = gpus.get(document, [])
        memories = [int(r.memory_total_mib) for r in rows if r.memory_total_mib]
        drivers = sorted({str(r.driver_version) for r in rows if r.driver_version})
        variants = sorted({str(r.variant) for r in rows})
        found[document] = _Facts(platform, len(rows), max(memories) if memories else None,
                                 drivers[0] if drivers else None,
                                 variants[0] if variants else "no GPU")
    return found


def _finding(kind: str, provider: str, title: str, evidence: str, cause: str | None,
             details: tuple[str, ...]) -> Tuple6:
    return (kind, provider, title, evidence, cause, details)


def host_storage_section(engine: Engine, data: Dataset,
                         known: BulletinFile | None = None) -> HostStorageSection:
    """Every host in `data` with its limits, storage and versions, judged."""
    documents = [h.document_id for h in data.hosts]
    limits = read_host_limits(engine, documents=documents)
    storage = read_storage(engine, documents=documents)
    networks = read_networks(engine, documents=documents)
    facts = _facts(engine, documents)
    known = known or load_bulletins()
    storage_nodes = {h.document_id: StorageNode(
        h.host, h.provider, facts[h.document_id].variant if h.document_id in facts
        else "no GPU", storage[h.document_id], h.listing.expect)
        for h in data.hosts if h.document_id in storage}
    siblings: dict[tuple[str, str], list[Any]] = {}
    for provider in sorted({n.provider for n in storage_nodes.values()}):
        for found in compare_siblings([n for n in storage_nodes.values()
                                       if n.provider == provider]):
            siblings.setdefault((provider, found.host), []).append(found)
    hosts = []
    for host in sorted(data.hosts, key=lambda h: (h.provider, h.host)):
        if host.document_id not in limits and host.document_id not in storage:
            continue
        hosts.append(_host_line(host, limits.get(host.document_id),
                                storage.get(host.document_id),
                                facts.get(host.document_id),
                                networks.get(host.document_id), known,
                                siblings.get((host.provider, host.host), [])))
    unread = tuple(sorted(f"{h.provider} {h.host}" for h in data.hosts
                          if h.document_id not in limits and h.document_id not in storage))
    return HostStorageSection(tuple(hosts), unread)


def _host_line(host: HostState, limits: HostLimits | None, storage: Storage | None,
               facts: _Facts | None, network: Any, known: BulletinFile,
               siblings: list[Any]) -> HostLine:
    expect: Mapping[str, Any] | None = host.listing.expect
    platform = facts.platform if facts else "unknown"
    gpus = facts.gpus if facts else 0
    findings: list[tuple[str, Tuple6]] = []
    said: tuple[tuple[str, str], ...] = ()
    host_notes: list[str] = []
    if limits is not None:
        node = HostNode(host.host, host.provider, platform, gpus,
                        facts.gpu_memory_mib if facts else None, limits, expect,
                        network.fabric_nics if network is not None else None)
        for f in judge_limits(node):
            findings.append((f.party, _finding(
                "host_limit", host.provider, f.title, f.evidence, f.cost,
                (f"action: {f.action}", f"rests on: {f.source}"))))
        said = _limit_words(limits, gpus)
        host_notes += notes(node)
    if storage is not None:
        node_s = StorageNode(host.host, host.provider, facts.variant if facts else "no GPU",
                             storage, expect)
        for s in judge_storage(node_s) + siblings:
            findings.append(("provider", _finding(
                "storage", host.provider, s.title, s.evidence, s.cost,
                (f"action: {s.action}", f"rests on: {s.source}"))))
    software = limits.software if limits is not None else None
    versions = NodeVersions(
        host.host, facts.driver if facts else None,
        software.container_toolkit.version if software else None,
        software.fabric_manager.version if software else None)
    for v in judge_versions(versions, known):
        findings.append(("provider", _finding(
            "bulletin", host.provider, v.title, v.evidence, None,
            (f"action: {v.action}", f"rests on: {v.source}"))))
    words = [f"driver {versions.driver or 'not read'}",
             f"container toolkit {versions.container_toolkit or 'not found'}",
             f"fabric manager {versions.fabric_manager or 'not found'}"]
    return HostLine(host.provider, host.host, said,
                    tuple(_storage_line(t) for t in storage.targets) if storage else (),
                    ", ".join(words), tuple(host_notes), tuple(findings))

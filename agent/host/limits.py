"""The limits a job meets on this host, each parsed from the raw text the kernel gives
(so the parsers run on recorded trees: tests/fixtures/host/) and read under a `root`
("/" live).

What each costs a job when wrong is said by the controller's rules
(fleet/analysis/host/limits.py); here only what is.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Tuple

from agent.gpu.numa import parse_cpulist
from agent.network import sysfs

UNLIMITED = "unlimited"
# cgroup v1 says "no limit" as the largest page-aligned signed 64-bit number.
V1_NO_LIMIT = 1 << 62
IOMMU_ARGS = re.compile(r"\b((?:intel_iommu|amd_iommu|iommu|iommu\.passthrough|"
                        r"iommu\.strict)=\S+)")
PROFILING = re.compile(r"^RmProfilingAdminOnly:\s*(\d+)", re.MULTILINE)


def parse_meminfo(text: str) -> Dict[str, int]:
    """/proc/meminfo's fields as numbers, kB fields in KiB as the kernel writes them."""
    found: Dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            found[name.strip()] = int(words[0])
    return found


def parse_status_cpus(status: str) -> Optional[List[int]]:
    """The CPUs this process may run on, from /proc/self/status's Cpus_allowed_list."""
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpulist(line.split(":", 1)[1].strip())
    return None


def parse_memlock(limits: str) -> Optional[Tuple[Optional[int], Optional[int]]]:
    """(soft, hard) RLIMIT_MEMLOCK in bytes from /proc/self/limits; None for
    unlimited; None overall where the line is missing."""
    for line in limits.splitlines():
        if line.startswith("Max locked memory"):
            words = line[len("Max locked memory"):].split()
            if len(words) < 2:
                return None
            return tuple(None if w == UNLIMITED else int(w) if w.isdigit() else None
                         for w in words[:2])  # type: ignore[return-value]
    return None


def parse_mountinfo(text: str) -> List[Dict[str, str]]:
    """Each mount of /proc/self/mountinfo: mount point, filesystem type, source and the
    mount's and superblock's options (octal escapes in paths undone)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        mounts.append({
            "mount_point": _unescape(fields[4]), "options": fields[5],
            "fs_type": tail[0], "source": _unescape(tail[1]),
            "super_options": tail[2] if len(tail) > 2 else ""})
    return mounts


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def tmpfs_size(options: str) -> Optional[int]:
    """A tmpfs's size= option in bytes (k, m, g suffixes; a % of RAM is not resolved)."""
    for option in options.split(","):
        if option.startswith("size="):
            value = option[5:].lower()
            scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(value[-1:], 1)
            digits = value[:-1] if value[-1:] in "kmgt" else value
            return int(digits) * scale if digits.isdigit() else None
    return None


def parse_cpu_max(text: str) -> Optional[float]:
    """cgroup v2 cpu.max ("200000 100000" -> 2.0 CPUs); None for "max"."""
    words = text.split()
    if not words or words[0] == "max":
        return None
    period = int(words[1]) if len(words) > 1 and words[1].isdigit() else 100_000
    return int(words[0]) / period if words[0].isdigit() and period else None


def parse_memory_max(text: str) -> Optional[int]:
    """cgroup v2 memory.max or v1 memory.limit_in_bytes in bytes; None for no limit."""
    text = text.strip()
    if not text.isdigit() or int(text) >= V1_NO_LIMIT:
        return None
    return int(text)


def parse_governors(found: List[str]) -> Dict[str, int]:
    """How many CPUs run each cpufreq governor."""
    counts: Dict[str, int] = {}
    for governor in found:
        counts[governor] = counts.get(governor, 0) + 1
    return counts


def parse_thp(text: str) -> Optional[str]:
    """transparent_hugepage/enabled's chosen word, "always [madvise] never" -> madvise."""
    match = re.search(r"\[(\w+)\]", text)
    return match.group(1) if match else None


def parse_profiling(params: str) -> Optional[bool]:
    """Whether the driver lets only admins profile (RmProfilingAdminOnly: 1)."""
    match = PROFILING.search(params)
    return None if match is None else match.group(1) != "0"


def _cgroup_paths(cgroup: str) -> Tuple[Optional[str], Dict[str, str]]:
    """(the v2 path, {v1 controller: path}) from /proc/self/cgroup."""
    v2: Optional[str] = None
    v1: Dict[str, str] = {}
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        for controller in parts[1].split(","):
            if controller:
                v1[controller] = parts[2]
    return v2, v1


def _ancestors(path: str) -> List[str]:
    """"/a/b" -> ["/a/b", "/a", ""]: a limit set higher up holds the process too."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:n]) if n else "" for n in range(len(parts), -1, -1)]


def read_cgroup(root: str) -> Dict[str, Any]:
    """{"version", "cpu_limit" (CPUs), "memory_limit_bytes"}: the tightest limit on the
    process's cgroup and its ancestors that this namespace shows."""
    v2, v1 = _cgroup_paths(sysfs.read(root, "/proc/self/cgroup") or "")
    cpu: Optional[float] = None
    memory: Optional[int] = None
    version: Optional[int] = None
    if v2 is not None and sysfs.read(root, "/sys/fs/cgroup/cgroup.controllers") is not None:
        version = 2
        for path in _ancestors(v2):
            text = sysfs.read(root, f"/sys/fs/cgroup{path}/cpu.max")
            found = parse_cpu_max(text) if text else None
            cpu = found if cpu is None or (found is not None and found < cpu) else cpu
            text = sysfs.read(root, f"/sys/fs/cgroup{path}/memory.max")
            size = parse_memory_max(text) if text else None
            memory = size if memory is None or (size is not None and size < memory) else memory
    elif v1:
        version = 1
        for name in ("cpu,cpuacct", "cpu"):
            quota = sysfs.read(root, f"/sys/fs/cgroup/{name}/cpu.cfs_quota_us")
            period = sysfs.read(root, f"/sys/fs/cgroup/{name}/cpu.cfs_period_us")
            if quota is not None and period is not None:
                if quota.lstrip("-").isdigit() and int(quota) > 0 and period.isdigit():
                    cpu = int(quota) / int(period)
                break
        text = sysfs.read(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes")
        memory = parse_memory_max(text) if text else None
    return {"version": version, "cpu_limit": cpu, "memory_limit_bytes": memory}


def read_numa(root: str) -> List[Dict[str, Any]]:
    """Each NUMA node with its CPUs and memory."""
    nodes: List[Dict[str, Any]] = []
    for name in sysfs.entries(root, "/sys/devices/system/node"):
        if not re.match(r"^node\d+$", name):
            continue
        cpus = parse_cpulist(sysfs.read(root, f"/sys/devices/system/node/{name}/cpulist") or "")
        meminfo = parse_meminfo((sysfs.read(root, f"/sys/devices/system/node/{name}/meminfo")
                                 or "").replace(f"Node {name[4:]} ", ""))
        total = meminfo.get("MemTotal")
        nodes.append({"node": int(name[4:]), "cpus": len(cpus),
                      "memory_mib": total // 1024 if total is not None else None})
    return sorted(nodes, key=lambda n: str(n["node"]).zfill(6))[:64]


def read_governors(root: str) -> Tuple[Dict[str, int], Optional[str]]:
    """({governor: CPUs}, the cpufreq driver); empty and None where cpufreq is absent
    (most VMs: the hypervisor owns the clocks)."""
    found = []
    for name in sysfs.entries(root, "/sys/devices/system/cpu"):
        if re.match(r"^cpu\d+$", name):
            governor = sysfs.read(root, f"/sys/devices/system/cpu/{name}/cpufreq/scaling_governor")
            if governor:
                found.append(governor[:32])
    driver = sysfs.read(root, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver")
    return parse_governors(found), driver[:32] if driver else None


def read_iommu(root: str) -> Dict[str, Any]:
    """{"groups": how many IOMMU groups, "gpu_domains": {domain type: GPUs} of the NVIDIA
    GPUs' groups ("identity" is passthrough, "DMA"/"DMA-FQ" translated), "cmdline": the
    kernel's IOMMU arguments}."""
    groups = [g for g in sysfs.entries(root, "/sys/kernel/iommu_groups") if g.isdigit()]
    domains: Dict[str, int] = {}
    for address in sysfs.entries(root, "/sys/bus/pci/devices"):
        if sysfs.read(root, f"/sys/bus/pci/devices/{address}/vendor") != "0x10de":
            continue
        if (sysfs.read(root, f"/sys/bus/pci/devices/{address}/class") or "")[:6] not in (
                "0x0302", "0x0300"):
            continue
        group = sysfs.resolve(root, f"/sys/bus/pci/devices/{address}/iommu_group")
        kind = sysfs.read(root, f"{group}/type") if group else None
        key = (kind or "none")[:16]
        domains[key] = domains.get(key, 0) + 1
    cmdline = sysfs.read(root, "/proc/cmdline") or ""
    return {"groups": len(groups), "gpu_domains": domains,
            "cmdline": IOMMU_ARGS.findall(cmdline)[:8]}


def read_limits(root: str = "/") -> Dict[str, Any]:
    """Every limit this module reads, under `root`; a value not readable stays None."""
    meminfo = parse_meminfo(sysfs.read(root, "/proc/meminfo") or "")
    cpus = parse_status_cpus(sysfs.read(root, "/proc/self/status") or "")
    memlock = parse_memlock(sysfs.read(root, "/proc/self/limits") or "")
    shm = [m for m in parse_mountinfo(sysfs.read(root, "/proc/self/mountinfo") or "")
           if m["mount_point"] == "/dev/shm"]
    governors, driver = read_governors(root)
    params = sysfs.read(root, "/proc/driver/nvidia/params")
    total = meminfo.get("MemTotal")
    hugepages = meminfo.get("HugePages_Total")
    return {
        "cpus_usable": len(cpus) if cpus is not None else None,
        "cgroup": read_cgroup(root),
        "memory_total_mib": total // 1024 if total is not None else None,
        "numa": read_numa(root),
        "governors": governors,
        "cpufreq_driver": driver,
        # the last mount of /dev/shm is the one a path reaches
        "shm_bytes": _shm_bytes(root, shm[-1]) if shm else None,
        "shm_mounted": bool(shm),
        "memlock_soft_bytes": memlock[0] if memlock else None,
        "memlock_hard_bytes": memlock[1] if memlock else None,
        "memlock_unlimited": memlock is not None and memlock[0] is None,
        "hugepages_total": hugepages,
        "hugepage_size_kib": meminfo.get("Hugepagesize"),
        "transparent_hugepages": parse_thp(
            sysfs.read(root, "/sys/kernel/mm/transparent_hugepage/enabled") or ""),
        "iommu": read_iommu(root),
        "profiling_admin_only": parse_profiling(params) if params is not None else None,
    }


def _shm_bytes(root: str, mount: Dict[str, str]) -> Optional[int]:
    size = tmpfs_size(mount["super_options"])
    if size is not None:
        return size
    try:  # a tmpfs mounted without size= holds half the RAM; ask it
        found = os.statvfs(os.path.join(root, "dev/shm"))
        return found.f_blocks * found.f_frsize
    except OSError:
        return None

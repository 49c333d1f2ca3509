"""Which filesystem a path is on, which mounts hold shared data, and whether a target
has room for what the suite would write.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from agent.host.limits import parse_mountinfo

# Filesystems that hold data shared between nodes, by the type /proc/self/mountinfo gives.
SHARED_TYPES = ("nfs", "nfs4", "lustre", "wekafs", "gpfs", "beegfs", "cephfs", "ceph",
                "glusterfs", "9p", "virtiofs", "cifs", "smb3", "fuse.s3fs", "fuse.gcsfuse",
                "fuse.goofys", "fuse.mountpoint-s3", "fuse.blobfuse2", "fuse.rclone",
                "fuse.juicefs", "fuse.weka", "fuse.alluxio-fuse")
SYSTEM_PREFIXES = ("/proc", "/sys", "/dev", "/run", "/boot", "/snap", "/var/lib/docker",
                   "/var/lib/kubelet", "/var/lib/containerd")


def mount_of(path: str, mounts: List[Dict[str, str]]) -> Optional[Dict[str, str]]:
    """The mount a path lies on: the longest mount point that holds it (the last mounted
    where two share one)."""
    real = os.path.realpath(path)
    best: Optional[Dict[str, str]] = None
    for mount in mounts:
        point = mount["mount_point"].rstrip("/") or "/"
        holds = real == point or real.startswith(point + "/") or point == "/"
        if holds and (best is None or len(point) >= len(best["mount_point"].rstrip("/") or "/")):
            best = mount
    return best


def shared_mounts(mounts: List[Dict[str, str]]) -> List[Dict[str, str]]:
    """The mounts of a shared filesystem type, outside the system's own folders."""
    return [m for m in mounts if m["fs_type"] in SHARED_TYPES
            and not m["mount_point"].startswith(SYSTEM_PREFIXES)]


def read_mounts() -> List[Dict[str, str]]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            return parse_mountinfo(fh.read(1 << 22))
    except OSError:
        return []


def space(path: str) -> Dict[str, Optional[int]]:
    """{"free_bytes", "total_bytes"} of the filesystem holding `path`, as the agent's
    user may use it."""
    try:
        found = os.statvfs(path)
    except OSError:
        return {"free_bytes": None, "total_bytes": None}
    return {"free_bytes": found.f_bavail * found.f_frsize,
            "total_bytes": found.f_blocks * found.f_frsize}


def room_for(need: int, free: Optional[int], total: Optional[int]) -> Optional[str]:
    """Why a target must be refused for want of space, or None: the suite's files and a
    margin (1 GiB or 5% of the disk, the larger) must fit in what is free, so that the
    run never fills a disk a job writes to."""
    if free is None:
        return "free space not known"
    margin = max(1 << 30, (total or 0) // 20)
    if free < need + margin:
        return (f"{free / (1 << 30):.1f} GiB free, {(need + margin) / (1 << 30):.1f} "
                f"GiB needed ({need / (1 << 30):.1f} written and a margin of "
                f"{margin / (1 << 30):.1f})")
    return None


def describe(mount: Optional[Dict[str, str]]) -> Dict[str, Any]:
    if mount is None:
        return {"mount_point": None, "fs_type": None, "source": None}
    return {"mount_point": mount["mount_point"][:256], "fs_type": mount["fs_type"][:64],
            "source": mount["source"][:256]}

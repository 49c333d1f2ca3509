"""Findings on the storage suite's figures (fleet/model/storage.py): each folder against
what the listing promised (`expect`: scratch_read_gbps, scratch_write_gbps,
shared_read_gbps, shared_fs) and against the same provider's other nodes.

- **below what was listed** (`listed`): a sequential figure more than 10% under the
  listing's; fio's own figures agree with the suite's within 10% on one disk
  (bench/storage_fio.py), so 10% is the method's reach, not a platform's spread.
- **a shared filesystem listed and not there** (`missing`): a folder the listing named
  that is not a folder on the node, or not on a shared filesystem.
- **apart from its siblings** (`siblings`): a node whose scratch read or write is under
  70% of the median of the same provider's other nodes of its variant on the same kind
  of filesystem, three others or more (one slow NVMe among identical nodes is a failing
  drive or a degraded RAID, not a product).

Refused folders (no room, not writable) and figures through the page cache are said in
the report's section, never disputed. All the provider's: the disks and mounts come with
the node.

Core functions take and return data; nothing here prints.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fleet.model.storage import Storage, StorageTarget

Rule = Literal["listed", "missing", "siblings"]
LISTED_TOLERANCE = 0.10
SIBLING_SHARE = 0.70
MIN_SIBLINGS = 3
SHARED_TYPES_WORDS = "NFS, Lustre, Weka, GPFS or a bucket's FUSE mount"
SOURCE_LISTED = ("the listing's expect; the suite agrees with fio within 10% "
                 "(bench/records/2026-11-29-storage-fio.md)")
SOURCE_SIBLINGS = "the median of the provider's other nodes of the variant, 3 or more"


@dataclass(frozen=True)
class StorageNode:
    host: str
    provider: str
    variant: str
    storage: Storage
    expect: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class StorageFinding:
    host: str
    rule: Rule
    title: str
    evidence: str
    cost: str
    action: str
    source: str


def _listed(node: StorageNode) -> list[StorageFinding]:
    expect, found = node.expect or {}, []
    for target in node.storage.targets:
        if not target.measured:
            continue
        promised = (("read", target.read_gbps, expect.get("scratch_read_gbps")),
                    ("write", target.write_gbps, expect.get("scratch_write_gbps"))
                    ) if target.role == "scratch" else (
            ("read", target.read_gbps, expect.get("shared_read_gbps")),)
        for what, figure, listed in promised:
            if listed is None or figure is None:
                continue
            if figure < float(listed) * (1 - LISTED_TOLERANCE):
                found.append(StorageFinding(
                    node.host, "listed",
                    f"{node.host}: {target.role} {target.path} {what} {figure:.2f} GB/s, "
                    f"listed {float(listed):g}",
                    f"sequential {what} {figure:.2f} GB/s on {target.fs_type or '?'} "
                    f"({'O_DIRECT' if target.direct else 'through the page cache'}), "
                    f"{(1 - figure / float(listed)) * 100:.0f}% under the listing's",
                    "data loading and checkpoints take longer than bought",
                    "ask the provider for the storage listed", SOURCE_LISTED))
    return found


def _missing(node: StorageNode) -> list[StorageFinding]:
    wanted = (node.expect or {}).get("shared_fs") or []
    if isinstance(wanted, str):
        wanted = [wanted]
    found = []
    by_path = {t.path: t for t in node.storage.targets}
    for path in wanted:
        target = by_path.get(path)
        if target is None:
            continue  # an older run, or the suite not run: nothing to dispute
        problem = None
        if target.refused == "no such folder":
            problem = "not there: no such folder"
        elif target.role == "shared" and target.fs_type in ("ext4", "xfs", "btrfs",
                                                             "overlay", "tmpfs"):
            problem = f"on {target.fs_type} at {target.mount_point}, no shared filesystem"
        if problem is not None:
            found.append(StorageFinding(
                node.host, "missing", f"{node.host}: shared filesystem {path} {problem}",
                f"the listing names {path} as shared data ({SHARED_TYPES_WORDS})",
                "data and checkpoints cannot be shared between nodes",
                "ask the provider to mount the shared filesystem listed", "the listing's "
                "expect: shared_fs"))
    return found


def judge_storage(node: StorageNode) -> list[StorageFinding]:
    """One node's storage against its listing."""
    return _listed(node) + _missing(node)


def _scratch(node: StorageNode) -> StorageTarget | None:
    for target in node.storage.targets:
        if target.role == "scratch" and target.measured:
            return target
    return None


def compare_siblings(nodes: Sequence[StorageNode]) -> list[StorageFinding]:
    """Nodes of one provider whose scratch is far under their siblings'."""
    groups: dict[tuple[str, str | None], list[tuple[StorageNode, StorageTarget]]] = {}
    for node in nodes:
        target = _scratch(node)
        if target is not None:
            groups.setdefault((node.variant, target.fs_type), []).append((node, target))
    found = []
    for members in groups.values():
        for node, target in members:
            others = [t for n, t in members if n is not node]
            if len(others) < MIN_SIBLINGS:
                continue
            for what in ("read_gbps", "write_gbps"):
                mine = getattr(target, what)
                values = [getattr(t, what) for t in others if getattr(t, what) is not None]
                if mine is None or len(values) < MIN_SIBLINGS:
                    continue
                median = statistics.median(values)
                if mine < SIBLING_SHARE * median:
                    word = what.split("_")[0]
                    found.append(StorageFinding(
                        node.host, "siblings",
                        f"{node.host}: scratch {word} {mine:.2f} GB/s, "
                        f"{mine / median * 100:.0f}% of its siblings' {median:.2f}",
                        f"{target.path} on {target.fs_type or '?'} against "
                        f"{len(values)} other nodes of the provider's {node.variant}",
                        "this node's jobs load and checkpoint slower than the rest",
                        "ask the provider to check the node's drive (SMART, RAID state)",
                        SOURCE_SIBLINGS))
    return found

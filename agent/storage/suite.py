"""The storage suite: each target (the local scratch, each shared filesystem named or
mounted) measured in turn within one time budget, in a folder of its own that is removed
whatever happens, and refused where free space is short.

    block = run(Config(targets=[Target("/scratch", "scratch", "inventory")]))

A target's share of the budget is split between its measurements; each stops at its
share (a whole block or file), so a slow disk gives a smaller sample, never a longer
run. The checkpoint is sized to the time left at the write rate just measured.

Standard library only, Python 3.8; torch for the checkpoint alone.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from agent.storage import mounts as mount_table
from agent.storage.checkpoint import checkpoint
from agent.storage.sequential import write_then_read
from agent.storage.small_files import small_files

FORMAT = "fleet-storage/1"
STAGE = "storage"
GIB = 1 << 30
MAX_TARGETS = 8
# A checkpoint smaller than this says little of a disk (a few writes): not run.
MIN_CHECKPOINT = 64 << 20
MAX_SHARED_MOUNTS = 32
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")
# Shares of a target's time: the sequential write, its read, the small files; the
# checkpoint has what is left.
WRITE_SHARE, READ_SHARE, SMALL_SHARE = 0.25, 0.15, 0.15


@dataclasses.dataclass(frozen=True)
class Target:
    """A folder to measure: its role ("scratch" or "shared") and who named it
    ("inventory", "default", or "mounted": found in the mount table)."""

    path: str
    role: str
    named_by: str


@dataclasses.dataclass
class Config:
    """The suite's bounds: 30 s a node by default (issue 58), 1 GiB sequential files in
    4 MiB writes, 1,000 files of 4 KiB, a 2 GiB checkpoint."""

    targets: List[Target] = dataclasses.field(default_factory=list)
    budget_s: float = 30.0
    file_bytes: int = GIB
    block_bytes: int = 4 << 20
    small_files: int = 1000
    small_file_bytes: int = 4096
    checkpoint_bytes: int = 2 * GIB
    # Shared mounts the inventory did not name are measured too, where writable.
    mounted: bool = True


def default_scratch() -> str:
    """The temporary folder, unless it is memory (tmpfs): then the home folder."""
    found = tempfile.gettempdir()
    mount = mount_table.mount_of(found, mount_table.read_mounts())
    if mount is not None and mount["fs_type"] in MEMORY_FILESYSTEMS:
        return os.path.expanduser("~")
    return found


def targets_for(config: Config, mounts: List[Dict[str, str]]) -> List[Target]:
    """The named targets, the default scratch where none is scratch, then writable
    shared mounts not already named; at most MAX_TARGETS, one per filesystem."""
    chosen = list(config.targets)
    if not any(t.role == "scratch" for t in chosen):
        chosen.insert(0, Target(default_scratch(), "scratch", "default"))
    if config.mounted:
        for mount in mount_table.shared_mounts(mounts):
            chosen.append(Target(mount["mount_point"], "shared", "mounted"))
    seen, kept = set(), []
    for target in chosen:
        where = mount_table.mount_of(target.path, mounts)
        key = where["mount_point"] if where is not None else target.path
        if key in seen and target.named_by == "mounted":
            continue
        seen.add(key)
        kept.append(target)
    return kept[:MAX_TARGETS]


def _need(config: Config) -> int:
    return config.file_bytes + config.checkpoint_bytes + config.small_files * max(
        config.small_file_bytes, 4096)


def blank(target: Target, mounts: List[Dict[str, str]]) -> Dict[str, Any]:
    """A target's entry before anything is measured: where it is and its space."""
    found: Dict[str, Any] = {"path": target.path[:256], "role": target.role,
                             "named_by": target.named_by}
    found.update(mount_table.describe(mount_table.mount_of(target.path, mounts)))
    found.update(mount_table.space(target.path))
    found.update({"refused": None, "direct": None, "block_bytes": None,
                  "write_bytes": None, "write_gbps": None, "read_bytes": None,
                  "read_gbps": None, "small_files": None, "small_file_bytes": None,
                  "small_create_per_s": None, "small_read_per_s": None,
                  "checkpoint_bytes": None, "checkpoint_write_gbps": None,
                  "checkpoint_read_gbps": None, "checkpoint_evicted": None,
                  "checkpoint_error": None, "seconds": 0.0, "notes": []})
    return found


def measure(target: Target, config: Config, seconds: float,
            mounts: List[Dict[str, str]]) -> Dict[str, Any]:
    """One target's figures, or why it was refused."""
    started = time.monotonic()
    found = blank(target, mounts)
    if not os.path.isdir(target.path):
        found["refused"] = "no such folder"
        return found
    short = mount_table.room_for(_need(config), found["free_bytes"], found["total_bytes"])
    if short is not None:
        found["refused"] = f"free space short: {short}"
        return found
    try:
        folder = tempfile.mkdtemp(prefix=".fleet-storage-", dir=target.path)
    except OSError as exc:
        found["refused"] = f"not writable by the agent's user ({exc.strerror or exc})"
        return found
    try:
        _run(found, folder, config, seconds, started)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if os.path.exists(folder):
            found["notes"].append(f"could not remove {folder[:200]}")
    found["seconds"] = round(time.monotonic() - started, 3)
    return found


def _run(found: Dict[str, Any], folder: str, config: Config, seconds: float,
         started: float) -> None:
    seq = write_then_read(os.path.join(folder, "sequential"), config.file_bytes,
                          config.block_bytes, seconds * WRITE_SHARE, seconds * READ_SHARE)
    os.unlink(os.path.join(folder, "sequential"))
    found["direct"], found["block_bytes"] = seq["direct"], config.block_bytes
    found["write_bytes"], found["read_bytes"] = seq["write_bytes"], seq["read_bytes"]
    found["write_gbps"] = _gbps(seq["write_bytes"], seq["write_s"])
    found["read_gbps"] = _gbps(seq["read_bytes"], seq["read_s"])
    if found["fs_type"] in MEMORY_FILESYSTEMS:
        found["notes"].append(f"{found['fs_type']} is memory: these are memory's figures, "
                              "not a disk's")
    if not seq["direct"]:
        found["notes"].append("O_DIRECT refused here: written and read through the page "
                              "cache, none of it dropped; the read may be memory's")
    small = os.path.join(folder, "small")
    os.mkdir(small)
    files = small_files(small, config.small_files, config.small_file_bytes,
                        seconds * SMALL_SHARE)
    shutil.rmtree(small, ignore_errors=True)
    found["small_files"], found["small_file_bytes"] = files["files"], files["file_bytes"]
    found["small_create_per_s"] = _rate(files["create_per_s"])
    found["small_read_per_s"] = _rate(files["read_per_s"])
    left = seconds - (time.monotonic() - started)
    # Written and read at about the write rate, with torch's own work on top: a
    # quarter of what is left, at that rate, is what fits.
    rate = (found["write_gbps"] or 0.0) * 1e9
    size = min(config.checkpoint_bytes, int(rate * max(left, 0.0) / 4))
    smallest = min(MIN_CHECKPOINT, config.checkpoint_bytes)
    if size < smallest:
        found["checkpoint_error"] = (f"not run: {max(left, 0.0):.1f} s of the budget left "
                                     f"holds no checkpoint of {smallest >> 20} MiB at this "
                                     "write rate")
        return
    try:
        saved = checkpoint(os.path.join(folder, "checkpoint.pt"), size)
    except ImportError as exc:
        found["checkpoint_error"] = f"no torch here ({exc})"[:256]
        return
    except Exception as exc:  # the other figures stand
        found["checkpoint_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return
    found["checkpoint_bytes"] = saved["bytes"]
    found["checkpoint_write_gbps"] = _gbps(saved["bytes"], saved["write_s"])
    found["checkpoint_read_gbps"] = _gbps(saved["bytes"], saved["read_s"])
    found["checkpoint_evicted"] = saved["evicted"]
    if size < config.checkpoint_bytes:
        found["notes"].append(f"checkpoint of {size / GIB:.2f} GiB, not "
                              f"{config.checkpoint_bytes / GIB:.2f}: what the budget held")
    if not saved["evicted"]:
        found["notes"].append("the checkpoint's pages could not be dropped before its load: "
                              "the read may be memory's")


def _gbps(size: int, seconds: float) -> Optional[float]:
    return round(size / seconds / 1e9, 4) if size and seconds > 0 else None


def _rate(value: Optional[float]) -> Optional[float]:
    return round(value, 1) if value is not None else None


def run(config: Config) -> Dict[str, Any]:
    """The document's "storage" block: each target measured within `budget_s` in all."""
    started = time.monotonic()
    mounts = mount_table.read_mounts()
    chosen = targets_for(config, mounts)
    results = []
    for position, target in enumerate(chosen):
        left = config.budget_s - (time.monotonic() - started)
        share = left / (len(chosen) - position)
        if share < 1.0:
            results.append(dict(blank(target, mounts),
                                refused="the storage budget was spent"))
            continue
        results.append(measure(target, config, share, mounts))
    return {"format": FORMAT, "budget_s": config.budget_s,
            "seconds": round(time.monotonic() - started, 3), "targets": results,
            "shared_mounts": [mount_table.describe(m) for m in
                              mount_table.shared_mounts(mounts)][:MAX_SHARED_MOUNTS]}


def document_storage(config: Config
                     ) -> Tuple[Optional[Dict[str, Any]], List[Dict[str, Any]]]:
    """(the block, errors): None and one error (stage "storage") where the suite failed."""
    try:
        return run(config), []
    except Exception as exc:  # the document stands without its storage figures
        return None, [{"stage": STAGE, "message": (
            f"storage not measured ({type(exc).__name__}: {str(exc)[:300]}); the rest "
            "of the document stands")}]

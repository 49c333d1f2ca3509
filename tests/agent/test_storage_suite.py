"""The storage suite (agent/storage/) on this machine's own disk and its /dev/shm: real
writes, reads, small files and a torch checkpoint, bounded in time and space, cleaned up
whatever happens, refused where the room is short, and run by the agent command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.storage import mounts, sequential, suite
from fleet.model.document import parse_document
from fleet.model.storage import Storage
from tests.conftest import ROOT

SMALL = {"file_bytes": 8 << 20, "small_files": 100, "checkpoint_bytes": 16 << 20}


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".fleet-storage-")]


def test_a_folder_is_measured_and_left_as_found(tmp_path: Path) -> None:
    config = suite.Config(targets=[suite.Target(str(tmp_path), "scratch", "inventory")],
                          budget_s=20, mounted=False, **SMALL)
    block = Storage.model_validate(suite.run(config))
    (target,) = block.targets
    assert target.measured and target.refused is None
    assert target.write_bytes == target.read_bytes == 8 << 20
    assert target.small_files == 100 and target.small_read_per_s
    # torch is installed for the tests: the checkpoint ran and its pages were dropped
    assert target.checkpoint_error is None and target.checkpoint_bytes
    assert target.checkpoint_bytes >= 16 << 20 and target.checkpoint_evicted is True
    assert _leftovers(tmp_path) == []


def test_without_o_direct_nothing_is_dropped_and_it_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A filesystem that refuses O_DIRECT (many FUSE mounts, older tmpfs) takes the
    # page cache's path: the same as a host whose os lacks the flag.
    monkeypatch.setattr(sequential, "DIRECT", 0)
    config = suite.Config(targets=[suite.Target(str(tmp_path), "scratch", "inventory")],
                          budget_s=10, mounted=False, **SMALL)
    (target,) = Storage.model_validate(suite.run(config)).targets
    assert target.direct is False and target.read_bytes == 8 << 20
    assert any(n.startswith("O_DIRECT refused here") for n in target.notes)
    assert _leftovers(tmp_path) == []


def test_a_memory_filesystem_says_its_figures_are_memorys() -> None:
    config = suite.Config(targets=[suite.Target("/dev/shm", "scratch", "inventory")],
                          budget_s=10, mounted=False, file_bytes=4 << 20, small_files=20,
                          checkpoint_bytes=16 << 20)
    (target,) = Storage.model_validate(suite.run(config)).targets
    assert target.fs_type == "tmpfs"
    if target.refused is None:
        assert target.notes[0] == "tmpfs is memory: these are memory's figures, not a disk's"
    else:  # a /dev/shm too small for the run and its margin is refused, and says why
        assert target.refused.startswith("free space short:")
    assert _leftovers(Path("/dev/shm")) == []


def test_short_room_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    config = suite.Config(targets=[suite.Target(str(tmp_path), "scratch", "inventory")],
                          file_bytes=1 << 50, mounted=False)
    (target,) = Storage.model_validate(suite.run(config)).targets
    assert target.refused is not None and target.refused.startswith("free space short:")
    assert target.write_gbps is None and _leftovers(tmp_path) == []
    assert mounts.room_for(10 << 30, 20 << 30, 100 << 30) is None
    assert mounts.room_for(10 << 30, 11 << 30, 100 << 30) == (
        "11.0 GiB free, 15.0 GiB needed (10.0 written and a margin of 5.0)")


def test_a_missing_folder_and_a_spent_budget_are_said(tmp_path: Path) -> None:
    config = suite.Config(targets=[
        suite.Target(str(tmp_path / "absent"), "shared", "inventory"),
        suite.Target(str(tmp_path), "scratch", "inventory")], budget_s=0.5, mounted=False)
    found = {t.path: t.refused for t in Storage.model_validate(suite.run(config)).targets}
    assert found == {str(tmp_path / "absent"): "the storage budget was spent",
                     str(tmp_path): "the storage budget was spent"}


def test_a_failure_midway_still_removes_the_folder(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(folder: str, count: int, size: int, seconds: float) -> dict[str, object]:
        (Path(folder) / "half-written").write_bytes(b"x")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(suite, "small_files", broken)
    config = suite.Config(targets=[suite.Target(str(tmp_path), "scratch", "inventory")],
                          budget_s=10, mounted=False, **SMALL)
    block, errors = suite.document_storage(config)
    assert block is None and _leftovers(tmp_path) == []
    assert errors == [{"stage": "storage", "message": (
        "storage not measured (OSError: [Errno 28] No space left on device); the rest of "
        "the document stands")}]


def test_shared_mounts_are_found_and_each_filesystem_measured_once() -> None:
    table = [{"mount_point": "/", "fs_type": "ext4", "source": "/dev/sda1", "options": "rw",
              "super_options": ""},
             {"mount_point": "/mnt/data", "fs_type": "nfs4", "source": "srv:/x",
              "options": "rw", "super_options": ""},
             {"mount_point": "/proc/fs/nfsd", "fs_type": "nfs4", "source": "x",
              "options": "rw", "super_options": ""}]
    assert [m["mount_point"] for m in mounts.shared_mounts(table)] == ["/mnt/data"]
    config = suite.Config(targets=[suite.Target("/mnt/data/me", "shared", "inventory")])
    chosen = suite.targets_for(config, table)
    assert [(t.path, t.named_by) for t in chosen[1:]] == [("/mnt/data/me", "inventory")]


def test_the_agent_command_measures_the_scratch_it_is_given(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agent", "bench", "--suite", "storage", "--cpu", "--no-torch",
         "--scratch", str(tmp_path), "--storage-budget-s", "5", "--checkpoint-gib", "0.02"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
        env=dict(os.environ, TMPDIR=str(tmp_path)))
    document = json.loads(done.stdout.splitlines()[-1])["document"]
    parsed = parse_document(document, "this machine")
    assert parsed.storage is not None and parsed.host_limits is not None
    scratch = [t for t in parsed.storage.targets if t.role == "scratch"]
    assert [(t.path, t.named_by, t.measured) for t in scratch] == [
        (str(tmp_path), "inventory", True)]
    assert parsed.benchmarks == [] and parsed.node == [] and parsed.jobs == []
    assert _leftovers(tmp_path) == []

"""Agent documents with the host's limits and storage (issue 58): the lent 4x H200 node's
own document, its "host_limits" block read by the agent from a case of
tests/fixtures/host_limits/ (agent.host.document.host_limits on the case's tree), its
"storage" block the shape agent/storage/suite.py sends, with the figures given."""

from __future__ import annotations

import copy
import json
from typing import Any

from agent.host.document import host_limits
from tests.conftest import FIXTURES

NODE = FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json"
CASES = FIXTURES / "host_limits"
BASE: dict[str, Any] = json.loads(NODE.read_text())


def limits(case: str, toolkit: str | None = "1.17.8", fabric_manager: str | None = None,
           **changed: Any) -> dict[str, Any]:
    """The block the agent reads of `case`, with the software versions given."""
    block = host_limits(str(CASES / case), {"import_torch_s": 4.2,
                                            "import_torch_error": None}, software=False)
    block["software"] = {
        "container_toolkit": {"version": toolkit, "source": "nvidia-ctk --version"
                              if toolkit else None},
        "fabric_manager": {"version": fabric_manager, "source": "nv-fabricmanager --version"
                           if fabric_manager else None},
        "vboost": {"listed": {}, "tenant_may_change": "unknown", "method": "inferred"}}
    block.update(changed)
    return block


def target(path: str, role: str = "scratch", fs_type: str = "xfs", read: float = 6.5,
           write: float = 3.1, **changed: Any) -> dict[str, Any]:
    """One measured folder."""
    found = {"path": path, "role": role, "named_by": "inventory", "mount_point": path,
             "fs_type": fs_type, "source": "/dev/nvme1n1", "free_bytes": 3 << 40,
             "total_bytes": 7 << 40, "refused": None, "direct": True,
             "block_bytes": 4 << 20, "write_bytes": 1 << 30, "write_gbps": write,
             "read_bytes": 1 << 30, "read_gbps": read, "small_files": 1000,
             "small_file_bytes": 4096, "small_create_per_s": 21000.0,
             "small_read_per_s": 90000.0, "checkpoint_bytes": 2 << 30,
             "checkpoint_write_gbps": 2.4, "checkpoint_read_gbps": 3.9,
             "checkpoint_evicted": True, "checkpoint_error": None, "seconds": 9.8,
             "notes": []}
    found.update(changed)
    return found


def storage(*targets: dict[str, Any]) -> dict[str, Any]:
    return {"format": "fleet-storage/1", "budget_s": 30.0, "seconds": 24.1,
            "targets": list(targets), "shared_mounts": []}


def document(hostname: str, platform: str = "bare-metal",
             host_limits_block: dict[str, Any] | None = None,
             storage_block: dict[str, Any] | None = None) -> dict[str, Any]:
    """The lent node's document as `hostname`, on `platform`, with the blocks given."""
    data = copy.deepcopy(BASE)
    data["host"]["hostname"] = hostname
    data["host"]["platform"] = platform
    data["host"]["container"] = "docker" if "container" in platform else None
    data["host_limits"] = host_limits_block
    data["storage"] = storage_block
    return data

"""The storage suite's figures in the agent document (agent/storage/, "storage"): each
target's sequential write and read, small-file rates and checkpoint, or why it was
refused. Validated as the rest of the document is (fleet/model/base.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from fleet.model.base import Strict, Text

Path = Annotated[str, StringConstraints(max_length=256)]
Bytes = Annotated[int, Field(ge=0, le=1 << 62)]
Gbps = Annotated[float, Field(ge=0, le=1e5)]
Rate = Annotated[float, Field(ge=0, le=1e9)]


class StorageTarget(Strict):
    """One folder measured: where, on what, and its figures (None where not measured)."""

    path: Path
    role: Literal["scratch", "shared"]
    named_by: Literal["inventory", "default", "mounted"]
    mount_point: Path | None
    fs_type: Annotated[str, StringConstraints(max_length=64)] | None
    source: Path | None
    free_bytes: Bytes | None
    total_bytes: Bytes | None
    refused: Text | None
    direct: bool | None
    block_bytes: Bytes | None
    write_bytes: Bytes | None
    write_gbps: Gbps | None
    read_bytes: Bytes | None
    read_gbps: Gbps | None
    small_files: Annotated[int, Field(ge=0, le=1 << 30)] | None
    small_file_bytes: Bytes | None
    small_create_per_s: Rate | None
    small_read_per_s: Rate | None
    checkpoint_bytes: Bytes | None
    checkpoint_write_gbps: Gbps | None
    checkpoint_read_gbps: Gbps | None
    checkpoint_evicted: bool | None
    checkpoint_error: Text | None
    seconds: Annotated[float, Field(ge=0, le=1e5)]
    notes: list[Text] = Field(max_length=8)

    @model_validator(mode="after")
    def _refused_or_measured(self) -> StorageTarget:
        if self.refused is not None and self.write_gbps is not None:
            raise ValueError(f"{self.path}: refused ({self.refused}) yet measured")
        return self

    @property
    def measured(self) -> bool:
        return self.refused is None and self.write_gbps is not None


class SharedMount(Strict):
    mount_point: Path | None
    fs_type: Annotated[str, StringConstraints(max_length=64)] | None
    source: Path | None


class Storage(Strict):
    """What `agent.storage.suite.run()` returns, under the document's "storage" key."""

    format: Literal["fleet-storage/1"]
    budget_s: Annotated[float, Field(ge=0, le=1e4)]
    seconds: Annotated[float, Field(ge=0, le=1e5)]
    targets: list[StorageTarget] = Field(max_length=8)
    shared_mounts: list[SharedMount] = Field(max_length=32)

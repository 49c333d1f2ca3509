"""A checkpoint as a job writes one: a torch state dict saved to a file, flushed and
fsynced, then loaded back on the CPU, in GB/s of the file's size.

Before the load the file's own pages are dropped from the page cache
(posix_fadvise DONTNEED on that file alone, after its fsync, so every page is clean):
the load then reads the disk, as a restart on another node would. Nothing else of the
cache is touched; where the advice fails, `evicted` is False and the read may be memory's.

torch is imported here only; without it the checkpoint is not measured, and says why.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict

TENSOR_BYTES = 64 << 20  # a state dict of 64 MiB tensors, as a large model's layers are


def checkpoint(path: str, size: int) -> Dict[str, Any]:
    """Save a state dict of about `size` bytes (bfloat16 tensors of random values) to
    `path`, fsync, drop its pages, load it: {"bytes", "write_s", "read_s", "evicted"}."""
    import torch

    left, tensors, index = size, {}, 0
    generator = torch.Generator().manual_seed(58)
    while left > 0:
        elements = max(1, min(left, TENSOR_BYTES) // 2)
        tensors[f"layers.{index}.weight"] = torch.randn(
            elements, generator=generator, dtype=torch.float32).to(torch.bfloat16)
        left -= elements * 2
        index += 1
    started = time.perf_counter()
    with open(path, "wb") as fh:
        torch.save(tensors, fh)
        fh.flush()
        os.fsync(fh.fileno())
    write_s = time.perf_counter() - started
    written = os.path.getsize(path)
    del tensors
    evicted = False
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            evicted = True
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    started = time.perf_counter()
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    read_s = time.perf_counter() - started
    del loaded
    return {"bytes": written, "write_s": write_s, "read_s": read_s, "evicted": evicted}

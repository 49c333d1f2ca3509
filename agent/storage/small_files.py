"""Small files: how many a second can be created, and opened and read back, in one
folder, one at a time: what `import torch` from a shared filesystem does (thousands of
small .py and .so files), and a data loader of many small samples.

Read back straight after they are written, the files' pages are in the local cache; on a
network filesystem each open still asks the server (NFS's close-to-open consistency),
so the rate is the round trips'; on a local disk it is the kernel's own.

Standard library only, Python 3.8.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict


def small_files(folder: str, count: int, size: int, seconds: float) -> Dict[str, Any]:
    """Create up to `count` files of `size` bytes in `folder` (stopping past half of
    `seconds`), then open and read each: {"files", "file_bytes", "create_per_s",
    "read_per_s"}."""
    payload = os.urandom(size)
    made = 0
    started = time.perf_counter()
    while made < count:
        with open(os.path.join(folder, f"f{made:06d}"), "wb") as fh:
            fh.write(payload)
        made += 1
        if time.perf_counter() - started > seconds / 2:
            break
    created_s = time.perf_counter() - started
    started = time.perf_counter()
    for index in range(made):
        with open(os.path.join(folder, f"f{index:06d}"), "rb") as fh:
            fh.read()
    read_s = time.perf_counter() - started
    return {"files": made, "file_bytes": size,
            "create_per_s": made / created_s if created_s > 0 else None,
            "read_per_s": made / read_s if read_s > 0 else None}

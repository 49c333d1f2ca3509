"""The storage suite's folders, from the inventory's `expect` (`scratch`, `shared_fs`),
as the agent's options: what the listing promised is measured rather than the default
scratch alone (agent/storage/suite.py).
"""

from __future__ import annotations

from fleet.inventory import Expect
from fleet.probe.local import BenchOptions


def storage_args(expect: Expect | None, bench: BenchOptions | None) -> list[str]:
    """--scratch and --shared-fs for a benchmark that runs the storage suite; none
    otherwise (a fingerprint, or a suite without storage)."""
    if expect is None or bench is None or bench.suite not in ("all", "storage"):
        return []
    args = ["--scratch", expect.scratch] if expect.scratch else []
    for folder in expect.shared_fs or []:
        args += ["--shared-fs", folder]
    return args

"""fleet: what did we actually rent, and how fast is it really?

As a library: `fleet.Store()` opens the store the CLI uses and reads it back as pandas
DataFrames (fleet/api.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleet.version import __version__

__all__ = ["BenchOptions", "ProbeOptions", "Store", "__version__"]

if TYPE_CHECKING:
    from fleet.api import BenchOptions, ProbeOptions, Store


def __getattr__(name: str) -> Any:
    # Imported on first use, so that reading __version__ does not load the store, the
    # report and pandas.
    if name in ("BenchOptions", "ProbeOptions", "Store"):
        from fleet import api

        return getattr(api, name)
    raise AttributeError(f"module 'fleet' has no attribute {name!r}")

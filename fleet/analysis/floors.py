"""The floors the agent judges its own all-reduce by, made from the catalog
(fleet/expected.py) and the shortfall rule's thresholds (fleet/analysis/shortfall.py), so
that the agent and the report call the same figure short (DESIGN.md, "Judging one node":
a short figure under settings that can move it is measured again in the same run).

The agent cannot import the controller (it runs on Python 3.8 with the standard library),
so the floors travel as data: agent/node/floors.json, packed into the zipapp with the
agent's other files (fleet/payload.py packs every .json of agent/) and read from the
source tree as tests and `python -m agent` run it. `python -m fleet.analysis.floors`
prints it; tests/analysis/test_floors.py fails where the file differs from what the
catalog gives, as `bench/expected_catalog.py --check` does for the catalog.

Per all-reduce entry: the expected figure and the floor under which it is called,
expected x (1 - max(allreduce_floor, sigmas x sd)); where no entry matches a node, the
agent calls it under `allreduce_share` of its datasheet figure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fleet.analysis.shortfall import ShortfallOptions
from fleet.expected import CATALOG, Catalog

FORMAT = "fleet-floors/1"
PATH = Path(__file__).resolve().parents[2] / "agent" / "node" / "floors.json"


def floors(catalog: Catalog | None = None, options: ShortfallOptions | None = None
           ) -> dict[str, Any]:
    """The all-reduce floors as the agent reads them."""
    catalog = catalog or CATALOG
    options = options or ShortfallOptions()
    entries = []
    for entry in catalog.figures:
        key = entry.key
        if key.kind != "allreduce":
            continue
        margin = options.margin("allreduce", entry)
        entries.append({
            "variant": key.variant, "gpus_in_run": key.gpus_in_run,
            "size_bytes": key.size_bytes, "dtype": key.dtype, "backend": key.backend,
            "nvlink_fabric": key.nvlink_fabric, "nvlink_links": key.nvlink_links,
            "expected_gbs": entry.gbs, "floor_gbs": round(entry.gbs * (1.0 - margin), 3),
            "records": list(entry.records)})
    return {"format": FORMAT,
            "made_from": "fleet/expected.py CATALOG and fleet/analysis/shortfall.py "
                         "ShortfallOptions (python -m fleet.analysis.floors)",
            "allreduce_share": options.allreduce_share, "allreduce": entries}


def text(data: dict[str, Any] | None = None) -> str:
    """The file's text: sorted keys, one entry a line, so a change reads in a diff."""
    data = data if data is not None else floors()
    head = {k: v for k, v in data.items() if k != "allreduce"}
    lines = [json.dumps(e, sort_keys=True) for e in data["allreduce"]]
    body = json.dumps(head, sort_keys=True, indent=1)[:-2]
    return body + ',\n "allreduce": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"


if __name__ == "__main__":
    sys.stdout.write(text())

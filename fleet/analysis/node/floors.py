"""The floors the agent judges its own node figures and soaked matmul by, made from the
catalog (fleet/expected.py) and the shortfall rule's thresholds
(fleet/analysis/node/shortfall.py), so that the agent and the report call the same figure
short (docs/findings.md, "One node, judged on its own": a short figure under settings that
can move it is measured again in the same run).

The agent cannot import the controller (it runs on Python 3.8 with the standard library),
so the floors travel as data: agent/node/floors.json, packed into the zipapp with the
agent's other files (fleet/payload.py packs every .json of agent/) and read from the
source tree as tests and `python -m agent` run it. `python -m fleet.analysis.node.floors`
prints it; tests/analysis/test_floors.py fails where the file differs from what the
catalog gives, as `bench/expected_catalog.py --check` does for the catalog.

Per all-reduce entry: the expected figure and the floor under which it is called,
expected x (1 - max(allreduce_floor, sigmas x sd)); where no entry matches a node, the
agent calls it under `allreduce_share` of its datasheet figure.

Per memory copy entry (agent/rerun/memory.py): the expected GB/s of the variant at
the size and expected x (1 - max(memory_floor, sigmas x sd)); without one, the agent
calls it under `memory_share` of its datasheet figure, as the report does.

Per pair entry (agent/rerun/links.py): the expected GB/s of the variant, direction
and size at its NVLink fabric and links, and expected x (1 - max(pair_floor, sigmas x
sd)); without one, the agent calls a pair over an NVLink path under `pair_share` of its
datasheet figure, as the report does. Per host copy entry: the expected GB/s at the PCIe
generation and width it ran at, and expected x (1 - max(host_link_floor, sigmas x sd));
no datasheet share, and a copy fleet/analysis/node/hostlink.py calls (its link below its
maximum, or under `host_link_min_share` of what the link carries) is left to it.

Per soaked matmul entry (agent/rerun/matmul.py): the expected TFLOP/s and expected x
(1 - max(floor, z x sd)). The report's margin also holds the GPU's own repeat spread
(fleet/analysis/node/shortfall.py `find_matmul_shortfalls`), so its threshold is never above
this floor: every GPU the report calls short was measured again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fleet.analysis.node.shortfall import MatmulShortfallOptions, ShortfallOptions
from fleet.expected import CATALOG, Catalog

FORMAT = "fleet-floors/1"
# Each list of the file: the catalog kinds it holds, and the fields of the catalog's key
# that pick an entry (as the agent's lookups match them).
LISTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "allreduce": (("allreduce",), ("variant", "gpus_in_run", "size_bytes", "dtype", "backend",
                                   "nvlink_fabric", "nvlink_links")),
    "memory_copy": (("memory_copy",), ("variant", "size_bytes")),
    "peer_copy": (("peer_copy",), ("variant", "direction", "size_bytes", "nvlink_fabric",
                                   "nvlink_links")),
    "host_copy": (("host_to_device", "device_to_host"), ("variant", "kind", "memory",
                                                         "size_bytes", "link_gen",
                                                         "link_width")),
}
PATH = Path(__file__).resolve().parents[3] / "agent" / "node" / "floors.json"


def floors(catalog: Catalog | None = None, options: ShortfallOptions | None = None,
           matmul_options: MatmulShortfallOptions | None = None) -> dict[str, Any]:
    """The all-reduce's, the memory copy's, the pairs', the host copies' and the soaked
    matmul's floors as the agent reads them."""
    catalog = catalog or CATALOG
    options = options or ShortfallOptions()
    matmul_options = matmul_options or MatmulShortfallOptions()
    lists = {name: _entries(catalog, options, kinds, fields)
             for name, (kinds, fields) in LISTS.items()}
    matmul = []
    for soaked in catalog.matmul:
        k = soaked.key
        margin = max(matmul_options.floor, matmul_options.z * soaked.sd)
        matmul.append({
            "variant": k.variant, "dtype": k.dtype, "m": k.m, "n": k.n, "k": k.k,
            "mode": k.mode, "cache": k.cache, "thermal": k.thermal,
            "expected_tflops": soaked.tflops,
            "floor_tflops": round(soaked.tflops * (1.0 - margin), 3),
            "records": list(soaked.records)})
    return {"format": FORMAT,
            "made_from": "fleet/expected.py CATALOG and fleet/analysis/node/shortfall.py "
                         "ShortfallOptions, MatmulShortfallOptions "
                         "(python -m fleet.analysis.node.floors)",
            "allreduce_share": options.allreduce_share, "memory_share": options.memory_share,
            "pair_share": options.pair_share,
            "host_link_min_share": options.host_link.min_share, **lists, "matmul": matmul}


def _entries(catalog: Catalog, options: ShortfallOptions, kinds: tuple[str, ...],
             fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """The catalog's figures of `kinds`, each keyed by `fields` of its key, with its floor
    at the report's own margin."""
    out = []
    for entry in catalog.figures:
        key = entry.key
        if key.kind not in kinds:
            continue
        margin = options.margin(key.kind, entry)
        out.append({**{name: getattr(key, name) for name in fields},
                    "expected_gbs": entry.gbs,
                    "floor_gbs": round(entry.gbs * (1.0 - margin), 3),
                    "records": list(entry.records)})
    return out


def text(data: dict[str, Any] | None = None) -> str:
    """The file's text: sorted keys, one entry a line, so a change reads in a diff."""
    data = data if data is not None else floors()
    lists = ("allreduce", "memory_copy", "peer_copy", "host_copy", "matmul")
    head = {k: v for k, v in data.items() if k not in lists}
    body = json.dumps(head, sort_keys=True, indent=1)[:-2]
    for name in lists:
        lines = [json.dumps(e, sort_keys=True) for e in data.get(name, ())]
        body += f',\n "{name}": [\n  ' + ",\n  ".join(lines) + "\n ]"
    return body + "\n}\n"


if __name__ == "__main__":
    sys.stdout.write(text())

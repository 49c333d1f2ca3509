"""What the agent expects of its own all-reduce: the floor under which the controller
calls it short (agent/node/floors.json, made by fleet/analysis/node/floors.py from the catalog
and the shortfall rule), so that a short figure can be measured again in the same run.

Read with pkgutil, which finds the file in the zipapp as in the source tree. Where no
entry matches the node (variant, ranks, size, data type, backend), the datasheet share
stands (`allreduce_share` of the datasheet figure); without either, nothing is judged.
Where several entries match (the agent does not know its NVLink fabric here), the lowest
floor stands, as the catalog's lookup takes the lowest entry: a rerun only where the
controller would call the figure whatever the fabric.
"""

import json
import pkgutil
from typing import Any, Dict, Optional, Sequence, Tuple

FORMAT = "fleet-floors/1"


class FloorsMissing(Exception):
    """The agent was packed without its floors: a build of fleet that lacks a file."""


def load() -> Dict[str, Any]:
    """The floors packed with the agent.

    A missing file is fleet's own packaging fault, never a node's: the zipapp's loader
    raises a bare OSError (errno 0) for it, and an empty table would instead pass every
    short figure as measured and settled."""
    try:
        data = pkgutil.get_data("agent.node", "floors.json")
    except OSError:
        data = None
    if data is None:
        raise FloorsMissing(
            "agent/node/floors.json is not in this agent: the fleet that packed it was "
            "installed without it; install fleet again from a release or `pip install .` "
            "of a current checkout")
    table: Dict[str, Any] = json.loads(data.decode("utf-8"))
    if table.get("format") != FORMAT:
        raise FloorsMissing(f"agent/node/floors.json is {str(table.get('format'))[:40]!r}, "
                            f"not {FORMAT!r}: the agent and its floors are of different fleets")
    return table


def allreduce_floor(table: Dict[str, Any], variant: Optional[str], ranks: int, size: int,
                    dtype: str, backend: str, datasheet_gbs: Optional[float]
                    ) -> Optional[Tuple[float, str]]:
    """(floor GB/s, what it rests on) for an all-reduce; None where nothing judges it."""
    fitting = [e for e in table.get("allreduce", ())
               if (e.get("variant"), e.get("gpus_in_run"), e.get("size_bytes"),
                   e.get("dtype"), e.get("backend")) == (variant, ranks, size, dtype, backend)]
    if fitting:
        low = min(fitting, key=lambda e: float(e["floor_gbs"]))
        return (float(low["floor_gbs"]),
                f"records: {float(low['expected_gbs']):g} GB/s expected "
                f"({', '.join(low.get('records', ()))}), called under "
                f"{float(low['floor_gbs']):g}")
    share = table.get("allreduce_share")
    if share and datasheet_gbs:
        return (round(float(share) * datasheet_gbs, 3),
                f"datasheet: called under {float(share):.0%} of {datasheet_gbs:g} GB/s")
    return None


def variant_of(gpus: Sequence[Dict[str, Any]]) -> Optional[str]:
    """The node's variant as the controller labels its all-reduce: the first GPU's."""
    if not gpus:
        return None
    label = (gpus[0].get("variant") or {}).get("label")
    return str(label) if label else None

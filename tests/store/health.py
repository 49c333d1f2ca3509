"""Health blocks for factory documents (tests/store/factory.py builds GPUs without one,
as an agent before the health counters did).

    data = factory.document(host="a", gpus=2)
    give_health(data, {1: health("failing", ["2 uncorrectable ECC errors since the driver "
                                             "loaded"], ecc_uncorrected_volatile=2)})
"""

from __future__ import annotations

from typing import Any

RULE = ("failing: a pending remap, a remapping failure, or any uncorrectable ECC error; "
        "degraded: a rising replay counter or a link below its maximum under load "
        "(written for the tests)")


def health(verdict: str = "healthy", reasons: list[str] | None = None, *,
           ecc_corrected_volatile: int = 0, ecc_uncorrected_volatile: int = 0,
           ecc_corrected_aggregate: int = 0, ecc_uncorrected_aggregate: int = 0,
           remapped_correctable: int = 0, remapped_uncorrectable: int = 0,
           remapped_pending: bool = False, pcie_replays: int = 0,
           throttle_ns: dict[str, int] | None = None, energy_mj: int = 1_000_000,
           counters: bool = True) -> dict[str, Any]:
    """One GPU's health as the agent sends it; `counters` False: the driver gave none (a
    vGPU guest), as with an unknown verdict."""
    if not counters:
        return {"verdict": verdict, "reasons": reasons or [], "rule": RULE, "ecc": None,
                "remapped_rows": None, "retired_pages": None, "pcie_replays": None,
                "throttle_ns": {}, "energy_mj": None,
                "xid": {"readable": False, "note": "dmesg: Operation not permitted",
                        "events": []}}
    return {
        "verdict": verdict, "reasons": reasons or [], "rule": RULE,
        "ecc": {"corrected_volatile": ecc_corrected_volatile,
                "uncorrected_volatile": ecc_uncorrected_volatile,
                "corrected_aggregate": ecc_corrected_aggregate,
                "uncorrected_aggregate": ecc_uncorrected_aggregate,
                "by_location": {"DRAM": {"uncorrected_aggregate": ecc_uncorrected_aggregate}}},
        "remapped_rows": {"correctable": remapped_correctable,
                          "uncorrectable": remapped_uncorrectable,
                          "pending": remapped_pending, "failure": False},
        "retired_pages": None, "pcie_replays": pcie_replays, "pcie_replays_during_run": 0,
        "pcie_gen_load": 5, "pcie_width_load": 16,
        "throttle_ns": {"power": 9_000_000_000, "thermal": 0, "reliability": 0,
                        **(throttle_ns or {})},
        "energy_mj": energy_mj,
        "xid": {"readable": True, "note": "/dev/kmsg",
                "events": ["NVRM: Xid (PCI:0000:18:00): 48, pid=1234, name=python3"]},
    }


def give_health(data: dict[str, Any], by_index: dict[int, dict[str, Any]],
                rest: dict[str, Any] | None = None) -> dict[str, Any]:
    """`data` (a factory document) with GPU i's health `by_index[i]`, and `rest` (if
    given) on every other GPU."""
    for gpu in data["gpus"]:
        block = by_index.get(gpu["index"], rest)
        if block is not None:
            gpu["health"] = block
    return data

"""The fleet as found: every host's GPUs as their newest document describes them.

The report's other sections list hosts only where something is wrong; this one answers the
title's question for every host: which variant, how many, on which driver and CUDA, with
which power limit and range, clocks at most and under load, virtualization, MIG, ECC, PCIe
and NVLink, which settings the tenant may change, and each GPU's health verdict ("not
read" where the agent read no counters). A host's GPUs that agree are one row; a GPU set
up differently from the rest of its node is shown apart, with what differs.

    hosts = fleet_as_found(data.gpus, data.measures)

Built from the store's fingerprint columns (`Dataset.gpus`), never from document bodies, so
that it costs the report little on a large store. Serials, UUIDs and bus addresses are not
read: an anonymized report can show it as it is, with providers and hosts aliased.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from fleet.analysis.dataset import GpuMeasure
from fleet.analysis.health.cards import NOT_READ
from fleet.words import power_limit

# The settings a tenant may or may not change, in the order the agent assesses them.
SETTINGS = ("application_clocks", "locked_gpu_clocks", "locked_memory_clocks",
            "power_limit", "persistence_mode", "compute_mode", "ecc")


@dataclass(frozen=True)
class GpuSetup:
    """What some of a host's GPUs have in common; every field is as the driver reported it,
    None where it did not say."""

    gpus: tuple[int, ...]  # the GPU indexes that share this setup
    variant: str
    form_factor: str
    memory_gb: int | None
    driver: str | None
    cuda: str | None
    power_limit_w: float | None  # the limit the driver enforces, else the one set
    power_min_w: float | None  # the range the limit may be set in
    power_max_w: float | None
    power_default_w: float | None
    max_sm_clock_mhz: int | None
    max_mem_clock_mhz: int | None
    virtualization: str | None
    vgpu_profile: str | None
    mig: bool | None
    mig_devices: tuple[str, ...]
    ecc: bool | None
    pcie_gen: int | None  # the link as it runs; the card's maximum beside it
    pcie_width: int | None
    pcie_gen_max: int | None
    pcie_width_max: int | None
    nvlink_active: int | None
    nvlink_total: int | None
    tenant_may: tuple[str, ...]  # settings the tenant may change ("yes")
    tenant_unknown: tuple[str, ...]  # settings nobody could tell
    # The SM clock the GPUs held while measured: the median over them of each GPU's
    # median, and the lowest and highest GPU; None when none of them was measured.
    load_sm_clock_mhz: float | None = None
    load_sm_clock_min_mhz: float | None = None
    load_sm_clock_max_mhz: float | None = None
    # The agent's verdict (fleet/analysis/health/cards.py); None: stored without health counters.
    health: str | None = None

    @property
    def health_text(self) -> str:
        """The verdict, "not read" where the agent read no counters: never healthy by
        default."""
        return self.health or NOT_READ

    @property
    def power(self) -> str:
        return power_limit(self.power_limit_w, self.power_min_w, self.power_max_w,
                           "not visible")

    @property
    def pcie(self) -> str | None:
        if self.pcie_gen is None and self.pcie_width is None:
            return None
        now = f"Gen{_or_q(self.pcie_gen)} x{_or_q(self.pcie_width)}"
        if (self.pcie_gen_max, self.pcie_width_max) not in (
                (None, None), (self.pcie_gen, self.pcie_width)):
            now += f" (max Gen{_or_q(self.pcie_gen_max)} x{_or_q(self.pcie_width_max)})"
        return now

    @property
    def nvlink(self) -> str | None:
        if not self.nvlink_total:
            return None if self.nvlink_total is None else "none"
        return f"{_or_q(self.nvlink_active)} of {self.nvlink_total} links up"

    @property
    def virtualization_text(self) -> str | None:
        if self.vgpu_profile:
            return f"{self.virtualization or 'vgpu'} {self.vgpu_profile}"
        return self.virtualization

    @property
    def mig_text(self) -> str | None:
        if self.mig is None:
            return None
        if not self.mig:
            return "off"
        return "on: " + ", ".join(self.mig_devices) if self.mig_devices else "on, no instance"

    @property
    def load_clock(self) -> str | None:
        if self.load_sm_clock_mhz is None:
            return None
        text = f"{self.load_sm_clock_mhz:.0f} MHz"
        low, high = self.load_sm_clock_min_mhz, self.load_sm_clock_max_mhz
        if low is not None and high is not None and high - low >= 1:
            text += f" ({low:.0f}-{high:.0f})"
        return text

    @property
    def indexes(self) -> str:
        return ", ".join(str(i) for i in self.gpus)


@dataclass(frozen=True)
class FoundHost:
    """One host as its newest document in scope found it."""

    provider: str
    host: str
    collected_at: dt.datetime
    gpu_count: int
    setups: tuple[GpuSetup, ...]  # the node's own setup first, then GPUs that differ from it
    differs: tuple[str, ...]  # what the later setups differ in from the first

    @property
    def agree(self) -> bool:
        return len(self.setups) <= 1


# What two setups are compared on, and how a difference is named. The under-load clock is
# left out: it is measured, differs a little on every card, and is shown as a range.
COMPARED = (
    ("variant", ("variant", "form_factor", "memory_gb")),
    ("driver", ("driver", "cuda")),
    ("power limit", ("power_limit_w", "power_min_w", "power_max_w", "power_default_w")),
    ("clock limits", ("max_sm_clock_mhz", "max_mem_clock_mhz")),
    ("virtualization", ("virtualization", "vgpu_profile")),
    ("MIG", ("mig", "mig_devices")),
    ("ECC", ("ecc",)),
    ("PCIe", ("pcie_gen", "pcie_width", "pcie_gen_max", "pcie_width_max")),
    ("NVLink", ("nvlink_active", "nvlink_total")),
    ("tenant settings", ("tenant_may", "tenant_unknown")),
    # The verdict only: reasons name counts that differ on every unwell card.
    ("health", ("health",)),
)
_KEY_FIELDS = tuple(name for _, names in COMPARED for name in names)


def _or_q(value: Any) -> str:
    return "?" if value is None else str(value)


def _decoded(value: Any) -> Any:
    """A JSON column as the driver returned it: decoded on PostgreSQL, text on SQLite."""
    if isinstance(value, str | bytes):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _present(value: Any) -> Any:
    """None for SQL NULL however pandas spelled it (None, NaN, NA, NaT)."""
    if value is None or (not isinstance(value, list | tuple | dict | str) and pd.isna(value)):
        return None
    return value


def _verdicts(capabilities: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(settings the tenant may change, settings nobody could tell) of one GPU."""
    capabilities = _decoded(_present(capabilities))
    verdicts = ({name: capabilities.get(name) for name in SETTINGS}
                if isinstance(capabilities, dict) else {})
    return (tuple(n for n, v in verdicts.items() if v == "yes"),
            tuple(n for n, v in verdicts.items() if v not in ("yes", "no")))


def _profiles(migs: Any) -> tuple[str, ...]:
    migs = _decoded(_present(migs))
    return tuple(str(m) for m in migs) if isinstance(migs, list) else ()


def _cached(read: Callable[[Any], Any], values: Iterable[Any]) -> list[Any]:
    """`read` of each value, computed once per value: the dataset decodes each distinct JSON
    text once, so GPUs that agree share one object, found here by its identity."""
    seen: dict[Any, Any] = {}
    out = []
    for value in values:
        key = value if isinstance(value, str) or value is None else id(value)
        if key not in seen:
            seen[key] = read(value)
        out.append(seen[key])
    return out


def _plain(column: pd.Series, kind: str) -> list[Any]:
    """A column as Python values of `kind`, None where missing (NaN, NA or None)."""
    present = column.notna()
    if kind == "int":
        typed = column.where(present, 0).astype("int64").astype(object)
    elif kind == "float":
        typed = column.where(present, 0.0).astype("float64").astype(object)
    elif kind == "bool":
        typed = column.where(present, False).astype(bool).astype(object)
    else:
        typed = column.astype(object).map(str)
    # Not Series.where(present, None): pandas puts NaN back for the None.
    return [value if here else None
            for value, here in zip(typed.tolist(), present.tolist(), strict=True)]


# The setup's fields read straight off the frame's columns, and the kind of each.
_DIRECT = (
    ("variant", "variant", "str"), ("form_factor", "form_factor", "str"),
    ("memory_gb", "memory_gb", "int"), ("driver", "driver_version", "str"),
    ("cuda", "cuda_driver_version", "str"), ("power_min_w", "power_limit_min_w", "float"),
    ("power_max_w", "power_limit_max_w", "float"),
    ("power_default_w", "power_limit_default_w", "float"),
    ("max_sm_clock_mhz", "max_sm_clock_mhz", "int"),
    ("max_mem_clock_mhz", "max_mem_clock_mhz", "int"),
    ("virtualization", "virtualization_mode", "str"), ("vgpu_profile", "vgpu_profile", "str"),
    ("mig", "mig_enabled", "bool"), ("ecc", "ecc_enabled", "bool"),
    ("pcie_gen", "pcie_gen_current", "int"), ("pcie_width", "pcie_width_current", "int"),
    ("pcie_gen_max", "pcie_gen_max", "int"), ("pcie_width_max", "pcie_width_max", "int"),
    ("nvlink_active", "nvlink_links_active", "int"),
    ("nvlink_total", "nvlink_links_total", "int"), ("health", "health", "str"),
)


def _setups(gpus: pd.DataFrame) -> dict[str, list[Any]]:
    """Per GPU, every compared field as the setup holds it: plain Python values, None where
    the driver did not say (kept out of pandas, which would turn None into NaN), so that
    equal setups are equal keys."""
    frame: dict[str, list[Any]] = {
        "provider": gpus["provider"].astype(str).tolist(),
        "host": gpus["host"].astype(str).tolist(),
        "gpu_index": gpus["gpu_index"].astype(int).tolist(),
        "gpu_id": gpus["gpu_id"].astype(str).tolist()}
    for name, column, kind in _DIRECT:
        frame[name] = _plain(gpus[column], kind)
    # The limit the driver enforces, else the one set.
    frame["power_limit_w"] = _plain(
        gpus["power_limit_enforced_w"].fillna(gpus["power_limit_w"]), "float")
    frame["mig_devices"] = _cached(_profiles, gpus["mig_devices"].astype(object))
    verdicts = _cached(_verdicts, gpus["capabilities"].astype(object))
    frame["tenant_may"] = [may for may, _ in verdicts]
    frame["tenant_unknown"] = [unknown for _, unknown in verdicts]
    return frame


def _clocks(setup: GpuSetup, clocks: Sequence[float]) -> GpuSetup:
    if not clocks:
        return setup
    return replace(setup, load_sm_clock_mhz=statistics.median(clocks),
                   load_sm_clock_min_mhz=min(clocks), load_sm_clock_max_mhz=max(clocks))


def _differs(first: GpuSetup, others: Iterable[GpuSetup]) -> tuple[str, ...]:
    others = list(others)
    if not others:
        return ()
    return tuple(what for what, names in COMPARED
                 if any(getattr(o, n) != getattr(first, n) for o in others for n in names))


def load_clocks(measures: Iterable[GpuMeasure]) -> dict[str, float]:
    """Each measured GPU's SM clock under load (the median over its configurations)."""
    per_gpu: dict[str, list[float]] = defaultdict(list)
    for m in measures:
        if m.sm_clock_mhz is not None:
            per_gpu[m.gpu].append(m.sm_clock_mhz)
    # Most GPUs ran one configuration: their clock is their one value.
    return {gpu: values[0] if len(values) == 1 else statistics.median(values)
            for gpu, values in per_gpu.items()}


def fleet_as_found(gpus: pd.DataFrame, measures: Iterable[GpuMeasure] = ()
                   ) -> list[FoundHost]:
    """Every host of `gpus` (one row per GPU of each host's newest document: provider, host,
    collected_at and the fingerprint table's columns) with its GPUs folded where they agree,
    sorted by provider and host."""
    if gpus.empty:
        return []
    clocks = load_clocks(measures)
    frame = _setups(gpus)
    # (provider, host) -> setup fields -> [(index, gpu id)], in one pass: a setup's fields
    # are plain values (None where not said), so equal setups are equal keys.
    hosts: dict[tuple[str, str], dict[tuple[Any, ...], list[tuple[int, str]]]] = \
        defaultdict(lambda: defaultdict(list))
    keys = zip(*(frame[name] for name in _KEY_FIELDS), strict=True)
    for provider, host, index, gpu, key in zip(frame["provider"], frame["host"],
                                               frame["gpu_index"], frame["gpu_id"], keys,
                                               strict=True):
        hosts[(provider, host)][key].append((index, gpu))
    newest = gpus.groupby(["provider", "host"], observed=True)["collected_at"].max()
    when = {(str(provider), str(host)): pd.Timestamp(at).to_pydatetime()
            for (provider, host), at in zip(newest.index.tolist(), newest.tolist(),
                                            strict=True)}
    found: list[FoundHost] = []
    for (provider, host), groups in sorted(hosts.items()):
        setups = []
        for key, members in groups.items():
            members.sort()
            setup = GpuSetup(gpus=tuple(i for i, _ in members),
                             **dict(zip(_KEY_FIELDS, key, strict=True)))
            setups.append(_clocks(setup, [clocks[g] for _, g in members if g in clocks]))
        # The node's own setup is the one most of its GPUs share; ties go to the lowest index.
        setups.sort(key=lambda s: (-len(s.gpus), s.gpus[0]))
        found.append(FoundHost(provider, host, when[(provider, host)],
                               sum(len(s.gpus) for s in setups),
                               tuple(setups), _differs(setups[0], setups[1:])))
    return found

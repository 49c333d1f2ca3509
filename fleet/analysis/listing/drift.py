"""Configuration drift: GPUs of one variant set up differently from the rest of it.

A driver, power limit or clock limit that differs between cards of the same variant is a
candidate explanation for a gap before any benchmark runs, and a power limit below the
datasheet's default is one even when every card of a provider shares it. So is the
software stack a card was measured on (torch, CUDA runtime, cuBLAS: each provider's image
brings its own, and cuBLAS picks GEMM kernels by version).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from fleet.analysis.dataset import Dataset
from fleet.words import counted


def power_limit(gpus: pd.DataFrame) -> pd.Series:
    """The limit the driver enforces, else the one set (NaN where neither is known)."""
    enforced = gpus["power_limit_enforced_w"].astype("float64")
    return enforced.where(enforced.notna() & (enforced != 0),
                          gpus["power_limit_w"].astype("float64"))


def _shown(values: pd.Series, show: Callable[[object], str]) -> pd.Series:
    """`values` as the text a report shows, None where unknown; each distinct value is
    formatted once."""
    present = values.dropna()
    texts = {value: show(value) for value in present.unique()}
    return present.map(texts).reindex(values.index).astype(object).where(
        values.notna(), None)


def _on_off(values: pd.Series) -> pd.Series:
    return _shown(values.astype(object), lambda v: "on" if v else "off")


def _watts(values: pd.Series) -> pd.Series:
    return _shown(values, lambda v: f"{float(v):g} W")  # type: ignore[arg-type]


def _mhz(values: pd.Series) -> pd.Series:
    return _shown(values, lambda v: f"{int(v)} MHz")  # type: ignore[call-overload]


def _text(column: str) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda gpus: _shown(gpus[column].astype(object), str)


# (what, how to read it off the fleet as found). Values are compared as the text shown.
# The software stack is the one the GPU's results in its newest document were measured
# on (None when it was not measured: a fingerprint is no evidence of the stack a
# benchmark would use).
ATTRIBUTES: tuple[tuple[str, Callable[[pd.DataFrame], pd.Series]], ...] = (
    ("driver", _text("driver_version")),
    ("CUDA driver version", _text("cuda_driver_version")),
    ("power limit", lambda g: _watts(power_limit(g))),
    ("max SM clock", lambda g: _mhz(g["max_sm_clock_mhz"])),
    ("max memory clock", lambda g: _mhz(g["max_mem_clock_mhz"])),
    ("application SM clock", lambda g: _mhz(g["app_sm_clock_target_mhz"])),
    ("ECC", lambda g: _on_off(g["ecc_enabled"])),
    ("MIG", lambda g: _on_off(g["mig_enabled"])),
    ("persistence mode", lambda g: _on_off(g["persistence_mode"])),
    ("virtualization", _text("virtualization_mode")),
    ("software stack", _text("software_stack")),
)


@dataclass(frozen=True)
class Outlier:
    """GPUs of one provider whose attribute has one value other than the usual."""

    value: str
    provider: str
    hosts: tuple[str, ...]
    gpus: int


@dataclass(frozen=True)
class Drift:
    """GPUs of one variant whose `attribute` differs from what most of the variant has."""

    variant: str
    attribute: str
    usual: str  # the value most GPUs of the variant have, or the datasheet's
    usual_gpus: int  # how many GPUs have it (0 when `usual` is the datasheet's)
    total_gpus: int
    outliers: tuple[Outlier, ...]
    reference: str  # "the rest of the variant" or "the datasheet"

    @property
    def evidence(self) -> str:
        """The usual value and each outlier in words, with GPU counts and up to five hosts."""
        if self.reference == "datasheet":
            base = f"datasheet default {self.usual}"
        else:
            base = (f"{self.usual} on {self.usual_gpus} of "
                    f"{counted(self.total_gpus, 'GPU')}")
        rest = "; ".join(f"{o.value} on {counted(o.gpus, 'GPU')} of {o.provider} "
                         f"({', '.join(o.hosts[:5])}{', ...' if len(o.hosts) > 5 else ''})"
                         for o in self.outliers)
        return f"{base}; {rest}"


def _outliers(seen: pd.DataFrame) -> tuple[Outlier, ...]:
    """GPUs (value, provider, host) -> one outlier per (value, provider)."""
    grouped = seen.groupby(["value", "provider"], sort=True)["host"]
    return tuple(Outlier(str(value), str(provider), tuple(sorted(set(hosts))), len(hosts))
                 for (value, provider), hosts in grouped)


def _attribute(variant: str, attribute: str, members: pd.DataFrame) -> Drift | None:
    """The variant's GPUs (value, provider, host) that differ from most of it."""
    counts = members["value"].value_counts()
    if len(counts) < 2:
        return None
    # Most GPUs' value is the reference; a tie goes to the first in sorted order, so the
    # same store always gives the same report.
    usual = max(sorted(counts.index), key=lambda v: counts[v])
    return Drift(variant, attribute, str(usual), int(counts[usual]), int(counts.sum()),
                 _outliers(members[members["value"] != usual]), "the rest of the variant")


def find_drift(data: Dataset) -> list[Drift]:
    """Per variant and compared attribute, the GPUs that differ from the rest or the datasheet."""
    gpus = data.gpus
    if gpus.empty:
        return []
    base = pd.DataFrame({"variant": gpus["variant"].astype(str),
                         "provider": gpus["provider"].astype(str),
                         "host": gpus["host"].astype(str)})
    by_attribute: dict[str, dict[str, pd.DataFrame]] = {}
    for attribute, read in ATTRIBUTES:
        seen = base.assign(value=read(gpus)).dropna(subset=["value"])
        by_attribute[attribute] = {str(variant): members for variant, members
                                   in seen.groupby("variant", sort=True)}
    found: list[Drift] = []
    for variant, members in base.groupby("variant", sort=True):
        for attribute, _ in ATTRIBUTES:
            values = by_attribute[attribute].get(str(variant))
            drift = None if values is None else _attribute(str(variant), attribute, values)
            if drift is not None:
                found.append(drift)
        found += _below_datasheet(data, str(variant), gpus.loc[members.index])
    return found


def _below_datasheet(data: Dataset, variant: str, members: pd.DataFrame) -> list[Drift]:
    sheet = data.datasheets.get(variant)
    if sheet is None or sheet.default_power_w is None:
        return []
    default = sheet.default_power_w
    physical = members[members["form_factor"] != "vGPU"]
    limits = power_limit(physical)
    low = physical[limits < 0.99 * default]
    if low.empty:
        return []
    seen = pd.DataFrame({"value": _watts(limits[low.index]),
                         "provider": low["provider"].astype(str),
                         "host": low["host"].astype(str)})
    return [Drift(variant, "power limit below datasheet", f"{default:g} W", 0, len(members),
                  _outliers(seen), "datasheet")]

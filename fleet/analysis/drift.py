"""Configuration drift: GPUs of one variant set up differently from the rest of it.

A driver, power limit or clock limit that differs between cards of the same variant is a
candidate explanation for a gap before any benchmark runs, and a power limit below the
datasheet's default is one even when every card of a provider shares it. So is the
software stack a card was measured on (torch, CUDA runtime, cuBLAS: each provider's image
brings its own, and cuBLAS picks GEMM kernels by version).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from fleet.analysis.dataset import HostState
from fleet.document import AgentDocument, Gpu
from fleet.store.ingest import variant_of
from fleet.store.query import software_stack
from fleet.words import counted


def _power_limit(gpu: Gpu) -> float | None:
    return gpu.power_limit_enforced_w or gpu.power_limit_w


def _on_off(value: bool | None) -> str | None:
    return None if value is None else ("on" if value else "off")


def _watts(value: float | None) -> str | None:
    return None if value is None else f"{value:g} W"


def _mhz(value: int | None) -> str | None:
    return None if value is None else f"{value} MHz"


# (what, how to read it off a GPU). Values are compared as the text shown.
ATTRIBUTES: tuple[tuple[str, Callable[[Gpu], str | None]], ...] = (
    ("driver", lambda g: g.driver_version),
    ("CUDA driver version", lambda g: g.cuda_driver_version),
    ("power limit", lambda g: _watts(_power_limit(g))),
    ("max SM clock", lambda g: _mhz(g.max_sm_clock_mhz)),
    ("max memory clock", lambda g: _mhz(g.max_mem_clock_mhz)),
    ("application SM clock", lambda g: _mhz(g.app_sm_clock_target_mhz)),
    ("ECC", lambda g: _on_off(g.ecc_enabled)),
    ("MIG", lambda g: _on_off(g.mig_enabled)),
    ("persistence mode", lambda g: _on_off(g.persistence_mode)),
    ("virtualization", lambda g: g.virtualization_mode),
)


def _stack(document: AgentDocument, gpu: Gpu) -> str | None:
    """The stack the GPU's results in this document were measured on; None when it was
    not measured (a fingerprint is no evidence of the stack a benchmark would use)."""
    stacks = sorted({software_stack(p.torch_version, p.cuda_runtime_version, p.cublas_version)
                     for p in (r.provenance for r in document.benchmarks
                               if r.gpu_index == gpu.index)})
    return "; ".join(stacks) or None


# Read off the GPU's document rather than its fingerprint.
MEASURED: tuple[tuple[str, Callable[[AgentDocument, Gpu], str | None]], ...] = (
    ("software stack", _stack),
)


@dataclass(frozen=True)
class Outlier:
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
        if self.reference == "datasheet":
            base = f"datasheet default {self.usual}"
        else:
            base = (f"{self.usual} on {self.usual_gpus} of "
                    f"{counted(self.total_gpus, 'GPU')}")
        rest = "; ".join(f"{o.value} on {counted(o.gpus, 'GPU')} of {o.provider} "
                         f"({', '.join(o.hosts[:5])}{', ...' if len(o.hosts) > 5 else ''})"
                         for o in self.outliers)
        return f"{base}; {rest}"


def _outliers(seen: list[tuple[str, str, str]]) -> tuple[Outlier, ...]:
    """(value, provider, host) per GPU -> one outlier per (value, provider)."""
    hosts: dict[tuple[str, str], set[str]] = defaultdict(set)
    count: dict[tuple[str, str], int] = defaultdict(int)
    for value, provider, host in seen:
        hosts[(value, provider)].add(host)
        count[(value, provider)] += 1
    return tuple(Outlier(value, provider, tuple(sorted(hosts[(value, provider)])),
                         count[(value, provider)])
                 for value, provider in sorted(hosts))


HostReader = Callable[[HostState, Gpu], str | None]


def _of_gpu(read: Callable[[Gpu], str | None]) -> HostReader:
    return lambda _, gpu: read(gpu)


def _of_document(read: Callable[[AgentDocument, Gpu], str | None]) -> HostReader:
    return lambda host, gpu: read(host.document, gpu)


def find_drift(hosts: tuple[HostState, ...]) -> list[Drift]:
    by_variant: dict[str, list[tuple[HostState, Gpu]]] = defaultdict(list)
    for host in hosts:
        for gpu in host.document.gpus:
            by_variant[variant_of(gpu)].append((host, gpu))
    found: list[Drift] = []
    readers = [(what, _of_gpu(read)) for what, read in ATTRIBUTES] + [
        (what, _of_document(read)) for what, read in MEASURED]
    for variant, members in sorted(by_variant.items()):
        for attribute, read_host in readers:
            values: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
            for host, gpu in members:
                value = read_host(host, gpu)
                if value is not None:
                    values[value].append((value, host.provider, host.host))
            if len(values) < 2:
                continue
            # Most GPUs' value is the reference; a tie goes to the first in sorted order,
            # so the same store always gives the same report.
            usual = max(sorted(values), key=lambda v: len(values[v]))
            others = [seen for value, group in values.items() if value != usual
                      for seen in group]
            found.append(Drift(variant, attribute, usual, len(values[usual]),
                               sum(len(g) for g in values.values()), _outliers(others),
                               "the rest of the variant"))
        found += _below_datasheet(variant, members)
    return found


def _below_datasheet(variant: str, members: list[tuple[HostState, Gpu]]) -> list[Drift]:
    low: list[tuple[str, str, str]] = []
    default: float | None = None
    for host, gpu in members:
        sheet = gpu.variant.datasheet
        if sheet is None or sheet.default_power_w is None or gpu.variant.form_factor == "vGPU":
            continue
        default = sheet.default_power_w
        limit = _power_limit(gpu)
        if limit is not None and limit < 0.99 * default:
            low.append((f"{limit:g} W", host.provider, host.host))
    if not low or default is None:
        return []
    return [Drift(variant, "power limit below datasheet", f"{default:g} W", 0, len(members),
                  _outliers(low), "datasheet")]


"""Did we get what was listed? The inventory's `expect` against the agent's fingerprint."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from fleet.inventory import Expect
from fleet.model.document import AgentDocument, Gpu
from fleet.words import counted, normal_label

# A card sold as "80GB" shows 79.6 GiB to NVML (81559 MiB); a 40GB card would be half.
MEMORY_TOLERANCE = 0.10


@dataclass(frozen=True)
class Verdict:
    """How a host compares with its listing: each difference, and what could not be checked."""

    problems: tuple[str, ...]  # each a way the host differs from its listing
    unchecked: tuple[str, ...]  # what the host did not let us check

    @property
    def matches(self) -> bool:
        """Whether the host has no difference from its listing."""
        return not self.problems

    def summary(self) -> str:
        """"match" (with what went unchecked) or "MISMATCH: " and each problem."""
        if self.problems:
            return "MISMATCH: " + "; ".join(self.problems)
        return "match" + (f" ({'; '.join(self.unchecked)})" if self.unchecked else "")


# The fingerprint table's columns a FoundGpu is made of (besides the GPU's index).
FOUND_COLUMNS = ("variant_label", "family", "form_factor", "memory_gb", "memory_total_mib",
                 "power_limit_enforced_w", "power_limit_w")


@dataclass(frozen=True)
class FoundGpu:
    """What a listing is checked against, per GPU: read off an agent document, or off the
    store's fingerprint columns (the report, which reads no document bodies)."""

    index: int
    variant_label: str | None
    family: str | None
    form_factor: str | None
    memory_gb: float | None  # the catalog's figure for the variant
    memory_total_mib: float | None  # what NVML showed
    power_limit_w: float | None  # the enforced limit, else the one set

    @classmethod
    def of(cls, gpu: Gpu) -> FoundGpu:
        """What the agent document's `gpu` says of the fields a listing is checked against."""
        return cls(gpu.index, gpu.variant.label, gpu.variant.family, gpu.variant.form_factor,
                   gpu.variant.memory_gb, gpu.memory_total_mib,
                   gpu.power_limit_enforced_w or gpu.power_limit_w)


def _indexes(gpus: list[FoundGpu]) -> str:
    numbers = [g.index for g in gpus]
    if len(numbers) > 2 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"GPUs {numbers[0]}-{numbers[-1]}"
    return ("GPU " if len(numbers) == 1 else "GPUs ") + ", ".join(map(str, numbers))


def _differing(gpus: list[FoundGpu], found: dict[int, str | None], listed: str, what: str,
               normal: bool = True) -> list[str]:
    groups: dict[str, list[FoundGpu]] = defaultdict(list)
    for gpu in gpus:
        value = found[gpu.index]
        same = value is not None and (
            normal_label(value) == normal_label(listed) if normal else value == listed)
        if not same:
            groups[value or "unknown"].append(gpu)
    return [f"listed {what} {listed}, found {value} on {_indexes(members)}"
            for value, members in groups.items()]


def _memory_gb(gpu: FoundGpu) -> float | None:
    if gpu.memory_gb is not None:
        return float(gpu.memory_gb)
    if gpu.memory_total_mib is not None:
        return gpu.memory_total_mib / 1024  # listings' GB are GiB in practice
    return None


def stored_expect(data: Mapping[str, Any], seen: dict[str, Expect | None]) -> Expect | None:
    """A listing as a run stored it, as an Expect; None when it no longer validates.

    One stored by an older fleet whose `expect` had other fields judges nothing, rather
    than judging by half a listing. `seen` keeps each listing's answer by its content: a
    fleet repeats a few listings over thousands of hosts and nights.
    """
    key = json.dumps(data, sort_keys=True)
    if key not in seen:
        try:
            seen[key] = Expect.model_validate(data)
        except ValidationError:
            seen[key] = None
    return seen[key]


def check_expectation(expect: Expect | None, document: AgentDocument) -> Verdict | None:
    """None when nothing was listed; else every difference, named by GPU."""
    return check_found(expect, [FoundGpu.of(gpu) for gpu in document.gpus],
                       document.no_gpu_reason)


def check_found(expect: Expect | None, gpus: list[FoundGpu], no_gpu_reason: str | None
                ) -> Verdict | None:
    """`check_expectation` on GPUs as found (`no_gpu_reason`: the agent's words when it
    found none)."""
    if expect is None:
        return None
    problems: list[str] = []
    unchecked: list[str] = []
    if not gpus:
        reason = no_gpu_reason or "none found"
        return Verdict((f"listed GPUs, found no NVIDIA GPU ({reason[:120]})",), ())
    if expect.gpu_count is not None and len(gpus) != expect.gpu_count:
        problems.append(f"listed {counted(expect.gpu_count, 'GPU')}, found {len(gpus)}")
    if expect.variant is not None:
        problems += _differing(gpus, {g.index: g.variant_label for g in gpus},
                               expect.variant, "variant")
    if expect.family is not None:
        problems += _differing(gpus, {g.index: g.family for g in gpus},
                               expect.family, "family")
    if expect.form_factor is not None:
        problems += _differing(gpus, {g.index: g.form_factor for g in gpus},
                               expect.form_factor, "form factor", normal=False)
    if expect.memory_gb is not None:
        wrong: dict[str, list[FoundGpu]] = defaultdict(list)
        for gpu in gpus:
            found = _memory_gb(gpu)
            if found is None:
                unchecked.append(f"GPU {gpu.index} memory not visible")
            elif abs(found - expect.memory_gb) > MEMORY_TOLERANCE * expect.memory_gb:
                wrong[f"{found:.0f} GB"].append(gpu)
        problems += [f"listed {expect.memory_gb} GB per GPU, found {value} on "
                     f"{_indexes(members)}" for value, members in wrong.items()]
    if expect.min_power_limit_w is not None:
        low: dict[str, list[FoundGpu]] = defaultdict(list)
        for gpu in gpus:
            limit = gpu.power_limit_w
            if limit is None:
                unchecked.append(f"GPU {gpu.index} power limit not visible")
            elif limit < expect.min_power_limit_w:
                low[f"{limit:g} W"].append(gpu)
        problems += [f"power limit {value} on {_indexes(members)}, below the listed "
                     f"{expect.min_power_limit_w:g} W" for value, members in low.items()]
    return Verdict(tuple(problems), tuple(unchecked))

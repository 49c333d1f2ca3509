"""Host links: a GPU whose PCIe link runs below what it should, which a data loader feels
at once and a matmul never shows.

Two rules, on the pinned copies of the node suite (pageable ones measure the host's
memory as much as the link) at their largest size:

- **below its maximum**: under load the link ran at a lower generation or width than the
  most the card and the system support together (NVML's maximum is of both, so a Gen5
  card in a Gen4 server is not called trained down: its Gen4 is its maximum). A slot
  that trained down, a riser, a bad contact: Gen4 x8 carries a quarter of Gen5 x16. The
  state is read while the copy ran, because links drop to a lower generation at idle.
- **slow for its link**: a pinned copy, to or from the device, moves less than 70% of
  what the link it negotiated carries each way (15.75, 31.5, 63 GB/s for Gen3, 4 and 5
  at x16). Healthy copies reach 85-90% (the lent nodes: 55.2-55.5 GB/s of 63 on Gen5 x16,
  87.6-88.1%; reference/gpu-variants.md, "Links"); an IOMMU in the way, a vGPU layer or
  a bounce buffer halves them (about 44%). 70% sits between: 15 points under the
  healthy figure, where platform differences (root complexes, PCIe switches) move copies
  by a few points, and far above a halved copy. Simulated with hosts 3 points apart
  around 87.5% (0.5 points between a host's GPUs), no healthy node is called in 2,000
  draws of 8 GPUs (tests/report/test_node_findings.py).

A GPU whose link ran below its maximum is called for that: its copies are shown against
what the lower link carries, so one also slow for that is seen in the same finding.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd

from agent.gpu.links import pcie_gbs
from fleet.analysis.node.figures import (
    HOST_LINK_KINDS,
    host_link_datasheet,
    link_text,
    optional_int,
)


@dataclass(frozen=True)
class HostLinkOptions:
    """When a pinned copy is slow for the link it ran on."""

    min_share: float = 0.70


@dataclass(frozen=True)
class HostCopy:
    """One pinned copy of one GPU, against what its link carries."""

    gpu_index: int
    kind: str  # host_to_device or device_to_host
    gbs: float
    carries_gbs: float | None  # what the link carries each way, GB/s

    @property
    def text(self) -> str:
        """"GPU 0 to device 27.6 GB/s (44% of 63)"."""
        way = "to device" if self.kind == "host_to_device" else "from device"
        text = f"GPU {self.gpu_index} {way} {self.gbs:,.1f} GB/s"
        if self.carries_gbs:
            text += f" ({self.gbs / self.carries_gbs:.0%} of {self.carries_gbs:,.4g})"
        return text


@dataclass(frozen=True)
class HostLinkIssue:
    """Some GPUs of one node whose host link is below its maximum, or slow for it."""

    provider: str
    host: str
    variant: str
    problem: str  # "below maximum" or "slow"
    gpus: tuple[int, ...]
    link: str | None  # under load: "Gen4 x8"
    link_max: str | None  # the most the card and system support: "Gen5 x16"
    carries_gbs: float | None  # what the link under load carries each way
    max_carries_gbs: float | None  # what the maximum would
    copies: tuple[HostCopy, ...]
    min_share: float

    @property
    def gpu_list(self) -> str:
        """"GPU 3", "GPUs 0, 1, 2, 3"."""
        return ("GPU " if len(self.gpus) == 1 else "GPUs ") + ", ".join(map(str, self.gpus))

    @property
    def title(self) -> str:
        """The finding in a line."""
        if self.problem == "below maximum":
            return (f"{self.host} {self.gpu_list}: host link trained down to {self.link} "
                    f"(supports {self.link_max})")
        return f"{self.host} {self.gpu_list}: pinned host copies slow for their link"

    @property
    def copies_text(self) -> str:
        """"to device 13.8 GB/s, from device 13.8 (medians of 4 GPUs; 88% of 15.75)"."""
        parts = []
        for kind, way in (("host_to_device", "to device"), ("device_to_host", "from device")):
            values = [c.gbs for c in self.copies if c.kind == kind]
            if not values:
                continue
            text = f"{way} {statistics.median(values):,.1f} GB/s"
            if max(values) - min(values) >= 0.1:
                text += f" ({min(values):,.1f}-{max(values):,.1f})"
            parts.append(text)
        gpus = len(self.gpus)
        text = ", ".join(parts) + (f" (medians of {gpus} GPUs" if gpus > 1 else " (")
        shares = [c.gbs / c.carries_gbs for c in self.copies if c.carries_gbs]
        carries = [c.carries_gbs for c in self.copies if c.carries_gbs]
        if shares:
            text += ("; " if gpus > 1 else "") + (
                f"{statistics.median(shares):.0%} of {statistics.median(carries):,.4g}")
        return text + ")"

    @property
    def evidence(self) -> str:
        """What the link ran at, what it carries, and the copies measured."""
        if self.problem == "below maximum":
            carries = (f": {self.carries_gbs:,.4g} GB/s each way instead of "
                       f"{self.max_carries_gbs:,.4g}" if self.carries_gbs
                       and self.max_carries_gbs else "")
            return (f"under load the link ran at {self.link}, below the {self.link_max} "
                    f"the card and system support{carries}; pinned copies "
                    f"{self.copies_text}")
        return (f"pinned copies under {self.min_share:.0%} of what "
                f"{self.link or 'the link'} carries each way, where healthy copies reach "
                f"85-90%: {self.copies_text}")


def find_host_link_issues(figures: pd.DataFrame, options: HostLinkOptions | None = None
                          ) -> list[HostLinkIssue]:
    """Every GPU of `figures` (as fleet.analysis.node.figures.prepare returns them) whose host
    link ran below its maximum, or whose pinned copies are slow for it, by node."""
    options = options or HostLinkOptions()
    pinned = figures[figures["kind"].isin(HOST_LINK_KINDS) & (figures["memory"] == "pinned")]
    if pinned.empty:
        return []
    pinned = pinned.assign(carries=host_link_datasheet(pinned))
    gen, width, gen_max, width_max = (pinned[c].astype(float) for c in (
        "link_gen", "link_width", "link_gen_max", "link_width_max"))
    # NaN (not read) compares false: an unknown link is never called below its maximum.
    below = (gen < gen_max) | (width < width_max)
    slow = pinned["gbs"] < options.min_share * pinned["carries"]
    flagged = pinned[below | slow]
    # (provider, host, problem, link state) -> (variant, copies)
    groups: dict[tuple[str, str, str, tuple[int | None, ...]], tuple[str, list[HostCopy]]] = {}
    states = zip(*(flagged[c].tolist() for c in ("link_gen", "link_width", "link_gen_max",
                                                  "link_width_max")), strict=True)
    for provider, host, variant, gpu, kind, gbs, carries, is_below, state in zip(
            flagged["provider"].tolist(), flagged["host"].tolist(),
            flagged["variant"].tolist(), flagged["gpu_index"].tolist(),
            flagged["kind"].tolist(), flagged["gbs"].tolist(), flagged["carries"].tolist(),
            below[flagged.index].tolist(), states, strict=True):
        key = (str(provider), str(host), "below maximum" if is_below else "slow",
               tuple(optional_int(v) for v in state))
        groups.setdefault(key, (str(variant), []))[1].append(
            HostCopy(int(gpu), str(kind), float(gbs), _present(carries)))
    found = []
    for (provider, host, problem, state), (variant, copies) in sorted(
            groups.items(), key=lambda item: (*item[0][:3], str(item[0][3]))):
        link, most = state[:2], state[2:]
        copies.sort(key=lambda c: (c.gpu_index, c.kind != "host_to_device"))
        found.append(HostLinkIssue(
            provider=provider, host=host, variant=variant, problem=problem,
            gpus=tuple(sorted({c.gpu_index for c in copies})),
            link=link_text(*link) if link != (None, None) else None,
            link_max=link_text(*most) if most != (None, None) else None,
            carries_gbs=pcie_gbs(*link), max_carries_gbs=pcie_gbs(*most),
            copies=tuple(copies), min_share=options.min_share))
    return found


def _present(value: object) -> float | None:
    return None if value is None or value != value else float(value)  # type: ignore[arg-type]

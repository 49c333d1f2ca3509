"""Provider gaps on the node suite's figures: is one provider's memory, host link, GPU
pairs or all-reduce really slower, or is it noise?

The matmul gap's rule and statistics (fleet/analysis/matmul/gaps.py, `judge`), on each node
figure at its largest size (fleet/analysis/node/figures.py), within one variant and one
configuration (kind, size, direction, pinned or pageable, GPU count, suite version and
software stack): per-unit figures (a GPU's copy, a pair's copy, a node's all-reduce) with
the host as the cluster, a bootstrap interval on the ratio of medians excluding 1, the
rank test on the units and Welch's t-test on the hosts after Holm, at least the gap
threshold and two hosts a side. The node suite's comparisons are one family for Holm,
apart from the matmul's: adding a figure to the suite must not change whether a matmul
gap is called. An all-reduce is one figure per node, so its comparison needs three nodes
a side (the rule's three units).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import combinations

import pandas as pd

from fleet.analysis.compare import Difference, GapOptions, Sample, Sides, judge
from fleet.analysis.node.figures import HOST_LINK_KINDS, NodeConfig, link_text, optional_int
from fleet.words import counted


@dataclass(frozen=True, kw_only=True)
class NodeComparison(Sides):
    """Two providers' figures of one variant and node configuration, compared."""

    config: NodeConfig
    variant: str
    faster_units: int
    slower_units: int

    @property
    def evidence(self) -> str:
        """Both medians, the ratio's interval and the tests, in words."""
        unit = self.config.unit
        return (f"{self.config.figure}: {self.slower} {self.slower_median:,.1f} GB/s (median "
                f"of {counted(self.slower_units, unit)} on "
                f"{counted(self.slower_hosts, 'host')}) vs {self.faster} "
                f"{self.faster_median:,.1f} ({counted(self.faster_units, unit)} on "
                f"{counted(self.faster_hosts, 'host')}): {self.tests}")


def _common(values: list[str]) -> str:
    counts = Counter(values)
    return ", ".join(v if n == len(values) else f"{v} ({n})" for v, n in counts.most_common())


def _describe(rows: pd.DataFrame, config: NodeConfig) -> dict[str, str]:
    """What may explain a node figure, per side: the link under load, the pairs' path and
    peer access."""
    found: dict[str, str] = {}
    if config.kind in HOST_LINK_KINDS:
        links = [link_text(optional_int(g), optional_int(w)) for g, w in zip(
            rows["link_gen"].tolist(), rows["link_width"].tolist(), strict=True)
            if optional_int(g) is not None or optional_int(w) is not None]
        if links:
            found["host link under load"] = _common(links)
    if config.kind == "peer_copy":
        paths = [str(t) for t in rows["topology"].tolist() if t is not None and t == t]
        if paths:
            found["path between GPUs"] = _common(paths)
        access = [bool(a) for a in rows["peer_access"].tolist() if a is not None and a == a]
        if access:
            found["peer access"] = f"{sum(access)} of {counted(len(access), 'pair figure')}"
    return found


def compare_node_figures(figures: pd.DataFrame, options: GapOptions | None = None
                         ) -> list[NodeComparison]:
    """Every pair of providers with enough units of one variant and node configuration
    (`figures` as fleet.analysis.node.figures.prepare returns them), systematic or not."""
    options = options or GapOptions()
    if figures.empty:
        return []
    pending: list[tuple[NodeConfig, str, str, str, pd.DataFrame, pd.DataFrame]] = []
    samples: list[tuple[Sample, Sample]] = []
    groups = [(config, str(variant), group) for (_, variant), group in
              figures.groupby(["config_id", "variant"], sort=False)
              for config in [group["config"].iloc[0]]]
    for config, variant, group in sorted(groups, key=lambda item: (item[0], item[1])):
        sides: dict[str, tuple[pd.DataFrame, Sample]] = {}
        for provider, rows in group.groupby("provider", sort=True):
            if len(rows) < options.min_gpus:
                continue
            hosts: dict[str, list[float]] = defaultdict(list)
            for host, value in zip(rows["host"].tolist(), rows["gbs"].tolist(), strict=True):
                hosts[str(host)].append(float(value))
            sides[str(provider)] = (rows, Sample(rows["gbs"].astype(float).tolist(),
                                                 [v for _, v in sorted(hosts.items())]))
        for a, b in combinations(sorted(sides), 2):
            if statistics.median(sides[a][1].values) < statistics.median(sides[b][1].values):
                a, b = b, a
            pending.append((config, variant, a, b, sides[a][0], sides[b][0]))
            samples.append((sides[a][1], sides[b][1]))
    found = []
    for (config, variant, fast, slow, fast_rows, slow_rows), (fast_sample, slow_sample), v in \
            zip(pending, samples, judge(samples, options), strict=True):
        fast_facts, slow_facts = _describe(fast_rows, config), _describe(slow_rows, config)
        differences = tuple(Difference(what, fast_facts[what], slow_facts[what])
                            for what in fast_facts
                            if what in slow_facts and fast_facts[what] != slow_facts[what])
        found.append(NodeComparison(
            config=config, variant=variant, faster=fast, slower=slow,
            faster_units=len(fast_sample.values), slower_units=len(slow_sample.values),
            faster_hosts=len(fast_sample.hosts), slower_hosts=len(slow_sample.hosts),
            differences=differences, **v.fields()))
    return found

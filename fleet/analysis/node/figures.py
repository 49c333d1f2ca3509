"""The node suite's figures as the report reads them (docs/node-suite.md): each host's
memory, host link, GPU pairs and all-reduce, beside the datasheet.

    figures = prepare(read_node_results(engine, documents=ids), names)
    hosts = nodes_as_found(figures)

A frame of node results (fleet/store/node.py's `read_node_results`) becomes the
figures every node analysis shares: one size per figure, the largest the suite measured
for it (the bandwidth-bound end: an all-reduce of 16 MiB measures latency as much as
links, and the issue's lent nodes moved from 215 GB/s there to 341 at 2 GiB), and a
`NodeConfig` per row, which figures are compared within.

A host link is judged against what its link carries as NVML read it while the copy ran
(the `link_gbs` column: the PCIe figures of reference/gpu-variants.md, "Links", as
agent/gpu/links.py's `pcie_gbs` computes them), not against the agent's datasheet figure,
which is the link at the most the card and slot support: a card that trained down
carries less, and the rules must know both.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import SupportsInt, cast

import pandas as pd

from agent.gpu.links import pcie_gbs
from fleet.store.node import node_stack

KINDS = ("memory_copy", "host_to_device", "device_to_host", "peer_copy", "allreduce")
HOST_LINK_KINDS = ("host_to_device", "device_to_host")

# The columns a figure is compared within, besides the variant (issue 32, "Stored and
# typed": size, direction, pinned or pageable, GPU count, software stack).
CONFIG_COLUMNS = ("kind", "direction", "memory", "size_bytes", "gpus_in_run", "dtype",
                  "backend", "suite_version", "stack")
# Read as plain Python values, None where missing: pandas' NA has no truth value.
_OPTIONAL = ("gpu_index", "peer_index", "peer_access", "topology", "link_gen", "link_width",
             "link_gen_max", "link_width_max")
# Read where the frame has them (suite 1.1.0's, migration 0013), None where not: what was
# seen around a figure and the causes a finding names.
_CAUSES = ("contention", "transport", "nccl_settings", "numa_node", "nvlink_links",
           "nvlink_fabric", "rerun_gbs", "rerun_without", "rerun_kept", "rerun_floor_gbs",
           "rerun_transport")


def link_text(gen: int | None, width: int | None) -> str:
    """"Gen5 x16", "?" for what NVML did not say."""
    return f"Gen{'?' if gen is None else gen} x{'?' if width is None else width}"


def size_text(size_bytes: int) -> str:
    """"1 GiB", "256 MiB", "4 KiB"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g} {unit}"
    return f"{size_bytes} B"


@dataclass(frozen=True, order=True)
class NodeConfig:
    """What one node figure is compared within: figures of different configurations are
    never compared (a pinned copy and a pageable one, 1 GiB and 16 MiB, 2 GPUs and 8)."""

    kind: str
    direction: str  # peer_copy: "one_way" or "both_ways"; otherwise ""
    memory: str  # host copies: "pinned" or "pageable"; otherwise ""
    size_bytes: int
    gpus_in_run: int
    dtype: str
    backend: str
    suite_version: str
    stack: str

    @property
    def figure(self) -> str:
        """The figure in words: "host to device (pinned)", "GPU pairs, both ways"..."""
        if self.kind == "memory_copy":
            return "memory copy"
        if self.kind in HOST_LINK_KINDS:
            words = self.kind.replace("_", " ")
            return f"{words} ({self.memory})" if self.memory else words
        if self.kind == "peer_copy":
            return "GPU pairs, " + ("both ways" if self.direction == "both_ways" else "one way")
        return f"all-reduce bus bandwidth, {self.gpus_in_run} GPUs"

    @property
    def unit(self) -> str:
        """What one figure is of: a GPU, a pair of GPUs, or the whole node."""
        return {"peer_copy": "pair", "allreduce": "node"}.get(self.kind, "GPU")

    @property
    def label(self) -> str:
        """The configuration in words: figure, size, dtype, suite and stack."""
        dtype = f" {self.dtype}" if self.dtype else ""
        return (f"{self.figure}, {size_text(self.size_bytes)}{dtype} (suite "
                f"{self.suite_version}; {self.stack})")


def _text(column: pd.Series) -> list[str]:
    return [str(v) for v in column.astype(object).where(column.notna(), "").tolist()]


def _plain(column: pd.Series) -> list[object]:
    # On an object column `where` keeps the None (on a numeric one it would be NaN again).
    values: list[object] = column.astype(object).where(column.notna(), None).tolist()
    return values


def optional_int(value: object) -> int | None:
    """An integer column's value, None for SQL NULL however pandas spelled it."""
    if value is None or value is pd.NA or value != value:
        return None
    return int(cast("SupportsInt", value))


def prepare(frame: pd.DataFrame, names: dict[int, tuple[str, str]] | None = None
            ) -> pd.DataFrame:
    """The rows of `frame` (fleet.store.node.read_node_results' columns) at each figure's
    largest size, with a `config` column (NodeConfig; `config_id` numbers them) and
    `link_gbs` (what the link read during the copy carries, GB/s); text as str ("" where
    missing) and the optional columns as Python values (None where missing).

    `names` maps a document id to its (provider, host) as the report names them (aliased
    in an anonymized report); rows of other documents are dropped. The size kept is the
    largest of each figure within its variant and suite version, so that every node of a
    variant is compared at one size."""
    if names is not None:
        frame = frame[frame["document_id"].isin(list(names))]
    plain = pd.DataFrame({"document_id": frame["document_id"].astype("int64").tolist()})
    if names is not None and len(frame):
        owners = [names[int(d)] for d in plain["document_id"].tolist()]
        plain["provider"] = [p for p, _ in owners]
        plain["host"] = [h for _, h in owners]
    else:
        plain["provider"] = _text(frame["provider"])
        plain["host"] = _text(frame["host"])
    for column in ("variant", "kind", "direction", "memory", "dtype", "backend",
                   "suite_version"):
        plain[column] = _text(frame[column])
    plain["stack"] = (_text(frame["stack"]) if "stack" in frame else [
        node_stack(*versions) for versions in zip(
            *(_plain(frame[c]) for c in ("torch_version", "cuda_runtime_version",
                                         "nccl_version")), strict=True)])
    for column in ("size_bytes", "gpus_in_run"):
        plain[column] = frame[column].astype("int64").tolist()
    for column in ("gbs", "datasheet_gbs"):
        plain[column] = frame[column].astype("float64").tolist()
    for column in _OPTIONAL:
        plain[column] = pd.Series(_plain(frame[column]), dtype=object)
    for column in _CAUSES:
        plain[column] = pd.Series(_plain(frame[column]) if column in frame
                                  else [None] * len(plain), dtype=object)
    plain["cv"] = (frame["cv"].astype("float64").tolist() if "cv" in frame
                   else [0.0] * len(plain))
    plain["contended"] = ([bool(v) for v in _plain(frame["contended"])]
                          if "contended" in frame else [False] * len(plain))
    if plain.empty:
        plain["config_id"] = pd.Series(dtype="int64")
        plain["config"] = pd.Series(dtype=object)
        plain["link_gbs"] = pd.Series(dtype=float)
        return plain
    figure = ["variant", "kind", "direction", "memory", "gpus_in_run", "dtype", "backend",
              "suite_version", "stack"]
    largest = plain.groupby(figure)["size_bytes"].transform("max")
    plain = plain[plain["size_bytes"] == largest].reset_index(drop=True)
    codes = plain.groupby(list(CONFIG_COLUMNS), sort=False).ngroup()
    firsts = plain.groupby(codes, sort=False).head(1)
    made = {int(code): NodeConfig(
        kind=str(kind), direction=str(direction), memory=str(memory),
        size_bytes=int(size), gpus_in_run=int(gpus), dtype=str(dtype), backend=str(backend),
        suite_version=str(suite), stack=str(stack))
        for code, kind, direction, memory, size, gpus, dtype, backend, suite, stack in zip(
            codes[firsts.index].tolist(), *(firsts[c].tolist() for c in CONFIG_COLUMNS),
            strict=True)}
    # Grouping by the number is cheaper than by the dataclass it stands for.
    plain["config_id"] = codes.astype("int64")
    plain["config"] = pd.Series([made[int(c)] for c in codes.tolist()], dtype=object)
    links = list(zip(plain["link_gen"].tolist(), plain["link_width"].tolist(), strict=True))
    carries = {link: pcie_gbs(optional_int(link[0]), optional_int(link[1]))
               for link in set(links)}
    plain["link_gbs"] = pd.Series([carries[link] for link in links], dtype=object
                                  ).astype(float)
    return plain


@dataclass(frozen=True)
class Figure:
    """One figure of a node: the median over its GPUs (or pairs), their range, and the
    datasheet figure it stands beside."""

    gbs: float
    low: float
    high: float
    units: int  # GPUs or pairs the median is over; 1 for the all-reduce
    datasheet_gbs: float | None
    size_bytes: int

    @property
    def share(self) -> float | None:
        """The figure as a share of its datasheet figure; None without one."""
        return None if not self.datasheet_gbs else self.gbs / self.datasheet_gbs

    @property
    def size(self) -> str:
        """The size the figure was measured at: "1 GiB"."""
        return size_text(self.size_bytes)

    @property
    def value(self) -> str:
        """"396 GB/s", with the range where it spans 1% or more: "396 GB/s (336-396)"."""
        digits = 1 if self.gbs < 100 else 0
        text = f"{self.gbs:,.{digits}f} GB/s"
        if self.high - self.low >= max(0.01 * self.gbs, 0.1):
            text += f" ({self.low:,.{digits}f}-{self.high:,.{digits}f})"
        return text

    @property
    def of_datasheet(self) -> str | None:
        """"88% of 450": the share of the datasheet figure; None without one."""
        if self.share is None or self.datasheet_gbs is None:
            return None
        return f"{self.share:.0%} of {self.datasheet_gbs:,.4g}"

    @property
    def text(self) -> str:
        """"3,010 GB/s, 90% of 3,350": the median, and its share of the datasheet."""
        return self.value + (f", {self.of_datasheet}" if self.of_datasheet else "")


@dataclass(frozen=True)
class NodeFound:
    """One host's node figures as its newest document in scope found them."""

    provider: str
    host: str
    variant: str
    memory: Figure | None  # device copy, bytes read plus written
    to_device: Figure | None  # pinned, against the link each GPU ran at
    from_device: Figure | None
    link: str | None  # the host link under load: "Gen5 x16", with the GPUs that differ
    link_below_max: bool  # some GPU ran its link below the most it supports
    one_way: Figure | None
    both_ways: Figure | None
    peer_access: str | None  # "yes", "no", "2 of 6 pairs"; None: no pair measured
    paths: str | None  # NVML's topology paths between the pairs: "NVLINK", "SYS"
    allreduce: Figure | None  # bus bandwidth at the largest size, the most GPUs
    allreduce_gpus: int | None

    @property
    def host_link_value(self) -> str | None:
        """"55.2 / 55.3 GB/s": pinned copies to / from the device."""
        if self.to_device is None and self.from_device is None:
            return None
        return " / ".join(f"{f.gbs:,.1f}" if f is not None else "?"
                          for f in (self.to_device, self.from_device)) + " GB/s"

    @property
    def host_link_share(self) -> str | None:
        """"88% of 63.02": to the device, else from it, against what the link carries."""
        shown = self.to_device or self.from_device
        return None if shown is None else shown.of_datasheet

    @property
    def host_link(self) -> str | None:
        """"55.2 / 55.3 GB/s, 88% of 63.02" (to / from the device, pinned)."""
        if self.host_link_value is None:
            return None
        share = self.host_link_share
        return self.host_link_value + (f", {share}" if share else "")


LinkState = tuple[int | None, int | None, int | None, int | None]


def _link_text(states: dict[LinkState, set[int]]) -> tuple[str | None, bool]:
    """The host link under load in words, and whether some GPU ran below its maximum:
    `states` maps (gen, width, gen max, width max) to the GPUs that ran at it."""
    if not states:
        return None, False
    ordered = sorted(states.items(), key=lambda item: (-len(item[1]), min(item[1])))
    below = False
    words = []
    for (gen, width, gen_max, width_max), gpus in ordered:
        text = link_text(gen, width)
        lower = below_max(gen, width, gen_max, width_max)
        below |= lower
        if lower:
            text += f" (max {link_text(gen_max, width_max)})"
        if len(ordered) > 1:
            text += " on GPU " + ", ".join(str(g) for g in sorted(gpus))
        words.append(text)
    return "; ".join(words), below


def below_max(gen: int | None, width: int | None, gen_max: int | None,
              width_max: int | None) -> bool:
    """Whether a link ran below the most it supports, where both are known."""
    return ((gen is not None and gen_max is not None and gen < gen_max)
            or (width is not None and width_max is not None and width < width_max))


def host_link_datasheet(rows: pd.DataFrame) -> pd.Series:
    """Per row, what the link read during the copy carries, else the agent's figure."""
    return rows["link_gbs"].where(rows["link_gbs"].notna(), rows["datasheet_gbs"])


# The figures "as found" shows, and how a row is picked for each.
_SLOTS = ("memory", "to_device", "from_device", "one_way", "both_ways", "allreduce")


def _slots(figures: pd.DataFrame) -> pd.Series:
    kind, memory, direction = figures["kind"], figures["memory"], figures["direction"]
    slot = pd.Series("", index=figures.index, dtype=object)
    slot[kind == "memory_copy"] = "memory"
    slot[(kind == "host_to_device") & (memory == "pinned")] = "to_device"
    slot[(kind == "device_to_host") & (memory == "pinned")] = "from_device"
    slot[(kind == "peer_copy") & (direction == "one_way")] = "one_way"
    slot[(kind == "peer_copy") & (direction == "both_ways")] = "both_ways"
    # The all-reduce of the most GPUs the node ran it on.
    most = figures["gpus_in_run"].groupby(figures["document_id"]).transform("max")
    slot[(kind == "allreduce") & (figures["gpus_in_run"] == most)] = "allreduce"
    return slot


def _pair_access(pairs: pd.DataFrame) -> dict[int, str]:
    """document id -> "yes", "no" or "2 of 6 pairs": each pair (either order, either
    direction) has peer access when every figure of it says so."""
    known = pairs[pairs["peer_access"].notna()]
    if known.empty:
        return {}
    low = known[["gpu_index", "peer_index"]].astype("int64").min(axis=1)
    high = known[["gpu_index", "peer_index"]].astype("int64").max(axis=1)
    each = (known["peer_access"].astype(bool).groupby([known["document_id"], low, high])
            .min().groupby(level=0).agg(["size", "sum"]))
    words = {}
    for document, total, working in zip(each.index.tolist(), each["size"].tolist(),
                                        each["sum"].tolist(), strict=True):
        words[int(document)] = ("yes" if working == total else "no" if not working
                                else f"{int(working)} of {int(total)} pairs")
    return words


def nodes_as_found(figures: pd.DataFrame) -> list[NodeFound]:
    """Each host's node figures (`figures` as `prepare` returns them), by provider and host.
    Aggregated by column, not host by host: a fleet of 10,000 hosts has a million rows."""
    if figures.empty:
        return []
    rows = figures.assign(slot=_slots(figures))
    rows = rows[rows["slot"] != ""]
    host_link = rows["slot"].isin(("to_device", "from_device"))
    rows = rows.assign(sheet=rows["datasheet_gbs"].where(~host_link,
                                                         host_link_datasheet(rows)))
    summary = rows.groupby(["document_id", "slot"]).agg(
        gbs=("gbs", "median"), low=("gbs", "min"), high=("gbs", "max"),
        units=("gbs", "size"), sheet=("sheet", "median"), size=("size_bytes", "max"),
        gpus=("gpus_in_run", "max"))
    made: dict[int, dict[str, Figure]] = defaultdict(dict)
    gpus_of: dict[int, int] = {}
    for (document, slot), gbs, low, high, units, sheet, size, gpus in zip(
            summary.index.tolist(), *(summary[c].tolist() for c in (
                "gbs", "low", "high", "units", "sheet", "size", "gpus")), strict=True):
        made[int(document)][str(slot)] = Figure(
            float(gbs), float(low), float(high), int(units),
            None if sheet != sheet else float(sheet), int(size))
        if slot == "allreduce":
            gpus_of[int(document)] = int(gpus)
    states: dict[int, dict[LinkState, set[int]]] = defaultdict(lambda: defaultdict(set))
    pinned = rows[host_link]
    for document, gpu, *state in zip(*(pinned[c].tolist() for c in (
            "document_id", "gpu_index", "link_gen", "link_width", "link_gen_max",
            "link_width_max")), strict=True):
        key = tuple(optional_int(v) for v in state)
        if key != (None, None, None, None):
            states[int(document)][key].add(int(gpu))  # type: ignore[index]
    pairs = figures[figures["kind"] == "peer_copy"]
    access = _pair_access(pairs)
    seen = pairs[pairs["topology"].notna()].groupby("document_id")["topology"].unique()
    paths = {int(d): ", ".join(sorted(str(t) for t in ts))
             for d, ts in zip(seen.index.tolist(), seen.tolist(), strict=True)}
    owners = figures.groupby("document_id").agg(provider=("provider", "first"),
                                                 host=("host", "first"))
    variants = figures.groupby("document_id")["variant"].unique()
    found = []
    for document, provider, host in zip(owners.index.tolist(), owners["provider"].tolist(),
                                        owners["host"].tolist(), strict=True):
        document = int(document)
        mine = made.get(document, {})
        link, lower = _link_text(states.get(document, {}))
        found.append(NodeFound(
            provider=str(provider), host=str(host),
            variant=", ".join(sorted(str(v) for v in variants[document])),
            memory=mine.get("memory"), to_device=mine.get("to_device"),
            from_device=mine.get("from_device"), link=link, link_below_max=lower,
            one_way=mine.get("one_way"), both_ways=mine.get("both_ways"),
            peer_access=access.get(document), paths=paths.get(document) or None,
            allreduce=mine.get("allreduce"), allreduce_gpus=gpus_of.get(document)))
    found.sort(key=lambda n: (n.provider, n.host))
    return found

"""How often fleet/analysis/node/shortfall.py calls a healthy node, and how often it finds a
constructed fault, on the lent nodes' own records.

Every record of bench/expected_catalog.py (or those given) is judged against a catalog
made from the OTHER records only (leave one out: a record is never judged against
itself). Each run of a record is one node, judged alone, as a buyer's single probe is:

- **false flags**: the healthy run as it measured; a false flag is any shortfall finding
  of that kind of figure on it;
- **hits**: the same run with one fault put in, each as the issue describes it: the
  all-reduce at 7% of its figure (NCCL with peer-to-peer off: 23.9 GB/s where the node
  gives 354), one pair (GPUs 0 and 1, one way and both ways) at 17/18 of its figures with
  17 NVLink links (one NVLink 4 link of 18 lost: 5.6%), the same at 16/18 (two lost: 11%),
  GPU 0's memory copy at 92%; a hit is a finding of that kind naming the faulty unit.

Each rule is measured twice: against the records (the catalog without the record), and
against the datasheet alone (an empty catalog: how a variant without records is judged).
Where the record is the only one of its configuration (the 2x H100's pairs and
all-reduce, the 2x H200's 2-GPU all-reduce), the catalog without it has no entry and the
figure falls to the datasheet: such runs are counted under "datasheet (no other record)".

The soaked matmul likewise: each soaked run of each GPU judged against the catalog
without its record (`find_matmul_shortfalls`, the GPU's repeat sd its variant's spread,
agent/timing/repeat.py, one result), and the same run 5% slow.

`--faulty` takes records of nodes with a fault put in for real (a GPU run with NCCL's
peer-to-peer off, say): each run is judged against the catalog of every healthy record
and against the datasheet alone, and what it raised is printed.

    python bench/shortfall_flags.py --out bench/records/2026-11-26-shortfall/flags.json
    python bench/shortfall_flags.py --faulty bench/records/2026-11-26-h100x2-node-faults
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import expected_catalog as records  # bench/, beside this file

from agent.timing.repeat import variant_spread
from fleet.analysis.dataset import Config, GpuMeasure
from fleet.analysis.node.figures import prepare
from fleet.analysis.node.shortfall import (
    RECORDS,
    MatmulShortfallOptions,
    ShortfallOptions,
    find_matmul_shortfalls,
    find_shortfalls,
    judged_rows,
)
from fleet.expected import Catalog, Observation, build
from fleet.store.query import software_stack

WHEN = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
ONE_LINK, TWO_LINKS = 17 / 18, 16 / 18
FAULT_PAIR = (0, 1)


def _scale(figures: pd.DataFrame, mask: pd.Series, factor: float,
           links: int | None = None) -> pd.DataFrame:
    faulty = figures.copy()
    faulty.loc[mask, "gbs"] = faulty.loc[mask, "gbs"] * factor
    if links is not None and "nvlink_links" in faulty:
        faulty["nvlink_links"] = faulty["nvlink_links"].astype(object)
        faulty.loc[mask, "nvlink_links"] = links
    return faulty


def _pair(figures: pd.DataFrame) -> pd.Series:
    a, b = FAULT_PAIR
    ends = figures[["gpu_index", "peer_index"]].astype(object)
    return ((figures["kind"] == "peer_copy")
            & (((ends["gpu_index"] == a) & (ends["peer_index"] == b))
               | ((ends["gpu_index"] == b) & (ends["peer_index"] == a))))


# name -> (kind of figure it is, the fault, the unit a hit must name)
Fault = Callable[[pd.DataFrame], pd.DataFrame]
FAULTS: dict[str, tuple[str, Fault, tuple[int, ...]]] = {
    "all-reduce at 7%": ("all-reduce", lambda f: _scale(f, f["kind"] == "allreduce", 0.07),
                         ()),
    "one NVLink link of 18 lost on a pair (5.6%)": (
        "pairs", lambda f: _scale(f, _pair(f), ONE_LINK, 17), FAULT_PAIR),
    "two links lost on a pair (11%)": (
        "pairs", lambda f: _scale(f, _pair(f), TWO_LINKS, 16), FAULT_PAIR),
    "GPU 0 memory copy 8% slow": (
        "memory", lambda f: _scale(f, (f["kind"] == "memory_copy")
                                   & (f["gpu_index"].astype(object) == 0), 0.92), (0,)),
}
RULES = ("memory", "host link", "pairs", "all-reduce")


RULE_OF = {"memory_copy": "memory", "host_to_device": "host link",
           "device_to_host": "host link", "peer_copy": "pairs", "allreduce": "all-reduce"}


def _judged(figures: pd.DataFrame, catalog: Catalog, options: ShortfallOptions
            ) -> dict[str, tuple[str, float, float]]:
    """kind of figure -> (the basis it is judged on, the lowest share of expected among
    its figures, and that figure's threshold) for one node."""
    judged = judged_rows(figures, options, catalog)
    found: dict[str, tuple[str, float, float]] = {}
    for kind, basis, gbs, expected, threshold in zip(
            *(judged[c].tolist() for c in ("kind", "basis", "gbs", "expected_gbs",
                                            "threshold")), strict=True):
        rule, share = RULE_OF[str(kind)], float(gbs) / float(expected)
        if rule not in found or share < found[rule][1]:
            found[rule] = (str(basis), share, float(threshold))
    return found


def _label(basis: str, against_records: bool) -> str:
    if basis == RECORDS:
        return "records"
    return "datasheet" if not against_records else "datasheet (no other record)"


class Tally:
    """Nodes counted and found, and the share nearest the threshold on the wrong side."""

    def __init__(self) -> None:
        self.found = 0
        self.nodes = 0
        self.shares: list[tuple[float, float]] = []  # (share, threshold)

    def as_dict(self, healthy: bool) -> dict[str, Any]:
        # Healthy: the lowest share judged (how near a false flag came); faulty: the
        # highest share of a faulty figure (how near a miss came).
        pick = min if healthy else max
        share, threshold = pick(self.shares) if self.shares else (None, None)
        return {"found": self.found, "nodes": self.nodes,
                ("lowest_share" if healthy else "highest_share"): share,
                "threshold": threshold}


def node_flags(runs: Sequence[records.Run], observations: Sequence[Observation],
               options: ShortfallOptions) -> dict[str, Any]:
    """False flags and hits of the node-figure rules, each record left out of its own
    catalog; counts by (rule, basis)."""
    node_runs = [run for run in runs if run.document and run.document.get("node")]
    by_record: dict[str, list[records.Run]] = defaultdict(list)
    for run in node_runs:
        by_record[run.record].append(run)
    flags: dict[tuple[str, str], Tally] = defaultdict(Tally)
    hits: dict[tuple[str, str], Tally] = defaultdict(Tally)
    called: list[dict[str, Any]] = []
    empty = Catalog()
    for record, mine in by_record.items():
        figures_without, matmul_without = build(o for o in observations if o.record != record)
        without = Catalog(figures_without, matmul_without)
        for i, run in enumerate(mine):
            figures = prepare(records.node_frame([run], first_id=i + 1))
            for catalog, against_records in ((without, True), (empty, False)):
                judged = _judged(figures, catalog, options)
                found = find_shortfalls(figures, options, catalog)
                for rule, (basis, share, threshold) in judged.items():
                    tally = flags[(rule, _label(basis, against_records))]
                    tally.nodes += 1
                    tally.shares.append((share, threshold))
                    mine_found = [s for s in found if s.figure == rule]
                    if mine_found:
                        tally.found += 1
                        called.extend({"record": record, "run": run.label,
                                       "catalog": "records" if against_records
                                       else "datasheet", "title": s.title}
                                      for s in mine_found)
                for name, (rule, fault, unit) in FAULTS.items():
                    if rule not in judged:
                        continue
                    faulty = fault(figures)
                    basis, share, threshold = _judged(faulty, catalog, options)[rule]
                    tally = hits[(name, _label(basis, against_records))]
                    tally.nodes += 1
                    tally.shares.append((share, threshold))
                    if any(s.figure == rule and (not unit or unit in s.indexes)
                           for s in find_shortfalls(faulty, options, catalog)):
                        tally.found += 1
    return {"false_flags": [{"rule": rule, "basis": basis, **t.as_dict(True)}
                            for (rule, basis), t in sorted(flags.items())],
            "hits": [{"fault": fault, "basis": basis, **t.as_dict(False)}
                     for (fault, basis), t in sorted(hits.items())],
            "called_healthy": called}


def _measure(record: str, run: records.Run, result: dict[str, Any], variant: str,
             tflops: float) -> GpuMeasure:
    provenance = result.get("provenance") or {}
    config = Config(str(result["dtype"]), int(result["m"]), int(result["n"]),
                    int(result["k"]), str(result.get("mode") or "sustained"),
                    str(result.get("cache") or "cold"),
                    str(result.get("concurrency") or "sequential"),
                    str(result.get("harness_version") or ""), "soaked",
                    software_stack(provenance.get("torch_version"),
                                   provenance.get("cuda_runtime_version"),
                                   provenance.get("cublas_version")))
    return GpuMeasure(
        provider="records", host=f"{record} {run.label}", gpu=str(result.get("gpu_uuid")),
        gpu_index=int(result.get("gpu_index") or 0), variant=variant, config=config,
        tflops=tflops, results=1, sm_clock_mhz=None, power_w=None, power_capped_share=None,
        power_limit_w=None, driver_version=None, virtualization_mode=None, flags=(),
        first=WHEN, last=WHEN, repeat_sd=variant_spread(variant)[0].sd)


def matmul_flags(runs: Sequence[records.Run], observations: Sequence[Observation],
                 options: MatmulShortfallOptions, slower: float = 0.05) -> dict[str, Any]:
    """False flags and hits of the soaked matmul rule, each record left out."""
    counts = {"false_flags": [0, 0], "hits": [0, 0]}
    per_variant: dict[str, dict[str, list[int]]] = defaultdict(
        lambda: {"false_flags": [0, 0], "hits": [0, 0]})
    called = []
    lowest: list[tuple[float, str]] = []  # healthy runs' shares of the expected figure
    catalogs: dict[str, Catalog] = {}
    for run in runs:
        for seen, result, variant in _soaked(run):
            if run.record not in catalogs:
                catalogs[run.record] = Catalog(*build(
                    o for o in observations if o.record != run.record))
            catalog = catalogs[run.record]
            if catalog.lookup_matmul(seen.key) is None:  # type: ignore[arg-type]
                continue
            entry = catalog.lookup_matmul(seen.key)  # type: ignore[arg-type]
            assert entry is not None
            lowest.append((seen.value / entry.tflops, f"{run.record} {run.label} GPU "
                           f"{result.get('gpu_index')}"))
            for case, factor in (("false_flags", 1.0), ("hits", 1.0 - slower)):
                measure = _measure(run.record, run, result, variant, seen.value * factor)
                found = find_matmul_shortfalls([measure], options, catalog)
                for tally in (counts[case], per_variant[variant][case]):
                    tally[1] += 1
                    tally[0] += bool(found)
                if found and case == "false_flags":
                    called.append(found[0].title)
    share, where = min(lowest) if lowest else (None, None)
    return {"overall": counts, "by_variant": dict(per_variant), "called_healthy": called,
            "slower": slower, "lowest_share": share, "lowest_run": where}


def _soaked(run: records.Run) -> list[tuple[Observation, dict[str, Any], str]]:
    if run.document is not None:
        gpus = {int(g["index"]): g for g in run.document.get("gpus") or []}
        results = [(r, records._label(gpus[r["gpu_index"]])) for r in
                   run.document.get("benchmarks") or [] if r["gpu_index"] in gpus]
    else:
        results = [(r, records.DEVICE_VARIANTS.get(str((r.get("provenance") or {})
                                                       .get("device_name")), ""))
                   for r in run.results]
    found = []
    for result, variant in results:
        seen = records._matmul_observation(run.record, result, variant) if variant else None
        if seen is not None:
            found.append((seen, result, variant))
    return found


def faulty(paths: Sequence[Path], catalog: Catalog, options: ShortfallOptions,
           matmul_options: MatmulShortfallOptions) -> list[dict[str, Any]]:
    """Each run of records of nodes with a fault put in for real (NCCL's peer-to-peer
    off, ...), judged against the catalog of every healthy record, and against the
    datasheet alone: what each raised."""
    found = []
    for path in paths:
        for i, run in enumerate(records.runs_in(path)):
            findings: dict[str, list[str]] = {"records": [], "datasheet": []}
            settings: list[str] = []
            if run.document and run.document.get("node"):
                table = records.node_frame([run], first_id=i + 1)
                if "nccl_settings" in table:
                    settings = sorted({str(v) for v in table["nccl_settings"].dropna()})
                figures = prepare(table)
                for name, judged_by in (("records", catalog), ("datasheet", Catalog())):
                    findings[name] = [s.title for s in
                                      find_shortfalls(figures, options, judged_by)]
            measures = [_measure(run.record, run, result, variant, seen.value)
                        for seen, result, variant in _soaked(run)]
            findings["records"] += [s.title for s in
                                    find_matmul_shortfalls(measures, matmul_options, catalog)]
            if run.document and (run.document.get("node") or measures):
                found.append({"record": run.record, "run": run.label,
                              "nccl_settings": settings, **findings})
    return found


def _pct(found: int, total: int) -> str:
    return f"{found} of {total} ({found / total:.0%})" if total else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="*", type=Path,
                        help="record folders or files (default: the catalog's records)")
    parser.add_argument("--faulty", nargs="*", type=Path, default=[],
                        help="records of nodes with a fault put in for real, each run "
                             "judged against the catalog of every healthy record")
    parser.add_argument("--out", type=Path, help="write the counts as JSON here")
    args = parser.parse_args()
    paths = list(args.records or records.DEFAULT_RECORDS)
    runs, _, observations = records.load(paths)
    options, matmul_options = ShortfallOptions(), MatmulShortfallOptions()
    nodes = node_flags(runs, observations, options)
    matmul = matmul_flags(runs, observations, matmul_options)
    real = faulty(args.faulty, Catalog(*build(observations)), options, matmul_options)
    def share(row: dict[str, Any], name: str) -> str:
        if row[name] is None:
            return ""
        return f"{row[name]:.1%} (called under {row['threshold']:.1%})"

    print("false flags: healthy runs (each a node) with a finding of the rule, and the "
          "lowest share of expected judged")
    print(f"  {'rule':<12} {'judged on':<28} {'flagged':>16}  lowest share")
    for row in nodes["false_flags"]:
        print(f"  {row['rule']:<12} {row['basis']:<28} {_pct(row['found'], row['nodes']):>16}"
              f"  {share(row, 'lowest_share')}")
    ff, ft = matmul["overall"]["false_flags"]
    low = matmul["lowest_share"]
    print(f"  {'matmul':<12} {'records':<28} {_pct(ff, ft):>16}  "
          + (f"{low:.1%} ({matmul['lowest_run']}; GPU runs)" if low is not None else ""))
    print("hits: runs with the fault found, naming the faulty unit, and the highest share "
          "of expected a faulty figure kept")
    print(f"  {'fault':<44} {'judged on':<28} {'found':>16}  highest share")
    for row in nodes["hits"]:
        print(f"  {row['fault']:<44} {row['basis']:<28} {_pct(row['found'], row['nodes']):>16}"
              f"  {share(row, 'highest_share')}")
    hf, ht = matmul["overall"]["hits"]
    print(f"  {'matmul 5% slow':<44} {'records':<28} {_pct(hf, ht):>16}  (GPU runs)")
    for title in nodes["called_healthy"] + matmul["called_healthy"]:
        print(f"  called on a healthy run: {title}")
    for run in real:
        print(f"faulty {run['record']} {run['run']}"
              + (f" ({'; '.join(run['nccl_settings'])})" if run["nccl_settings"] else ""))
        for basis in ("records", "datasheet"):
            for title in run[basis] or ["nothing"]:
                print(f"  {basis}: {title}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "command": "python bench/shortfall_flags.py" + "".join(
                f" {p}" for p in args.records) + (" --faulty" + "".join(
                    f" {p}" for p in args.faulty) if args.faulty else "")
                + f" --out {args.out}",
            "records": [p.name for p in paths],
            "options": asdict(options), "matmul_options": asdict(matmul_options),
            "nodes": nodes, "matmul": matmul, "faulty": real}, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""The catalog of what a healthy node gives (fleet/expected.py), recomputed from named
records and printed as that file holds it, so that every entry can be made again.

Each argument is a record: a folder of bench/records/ (or any folder), or one file. Inside
a folder every file that holds agent documents counts, in every form the records use:

- a fleet-agent/1 document as `.json`, or `.jsonl` of the agent's events (its last line
  `{"event": "document", "document": ...}`), either gzipped (`bench/device_repeat.sh`'s
  run-N.jsonl.gz, `--sequential` runs, documents the lead adds after a GPU run);
- `bench/node_suite.py`'s output (`{"runs": [{"document": ...}], "summary": ...}`);
- `harness_fidelity.py --soak-check`'s soak.json(.gz): its runs' `result` are the
  agent's harness results (their variant from the device's name), soaked ones counted;
- a fleet store (`fleet.db`, `fleet.db.gz`: SQLite), each stored document's body;
- a `command.txt` naming a test fixture (`tests/fixtures/nodes/<case>/document.json`):
  the record's probe document, kept in the repository instead of the record.

One device call is one record, however many runs it holds (a document found twice in it,
as a run's events and in the store they went into, counts once). The records given must
be of healthy nodes: a record of constructed faults is bench/shortfall_flags.py's
`--faulty`, never the catalog's. What counts: each node figure
not measured beside another process (`contended`, from suite 1.1.0), and each soaked
matmul result that passed its correctness check and was not contended. From each
document come the figures as fleet/store/ingest.py stores them (the variant of the GPU,
the all-reduce the node's first GPU's), and the links each crossed: a host copy's PCIe
generation and width under load; a pair's NVLink links (the result's own from suite 1.1.0,
else the fewer of its two GPUs' active links where NVML's path is NVLink) and its fabric
(the result's own, else "switch" where the pair's one-way copy moved more than half of
what those links carry: on a direct board a GPU's links are split among its peers, a third
to a pair on a 4-GPU HGX, so only a switch lets one pair use them all); the all-reduce the
fabric and fewest links of its node's pairs.

    python bench/expected_catalog.py                        # the catalog's records
    python bench/expected_catalog.py --check                # exit 1 where fleet/expected.py differs
    python bench/expected_catalog.py bench/records/2026-11-26-h100x2-node-faults  # others
    python bench/expected_catalog.py --add bench/records/NEW   # the catalog's records and NEW
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sqlite3
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from agent.gpu.links import NVLINK_BY_ARCHITECTURE  # noqa: E402
from fleet import expected  # noqa: E402
from fleet.analysis.node.figures import size_text  # noqa: E402
from fleet.expected import (  # noqa: E402
    Expected,
    FigureKey,
    MatmulExpected,
    MatmulKey,
    Observation,
)
from fleet.frames import frame  # noqa: E402
from fleet.store.node import NODE_COLUMNS, node_stack  # noqa: E402
from fleet.store.query import software_stack  # noqa: E402

RECORDS = REPO / "bench" / "records"
# The records fleet/expected.py was made from: every lent node's suite and every soaked
# matmul on a lent card (bench/RESULTS.md, "The whole node", "Soaked", "Repeat
# intervals"), and the two healthy lent 4x H100 job records, whose `--suite all` runs hold
# the node suite (the only 4-GPU H100 all-reduce) and soaked matmuls (job-backends'
# reference.jsonl is bench/job_reference.py's output, no agent document). Left out:
# 2026-11-26-h200x4-node-crosscheck, whose agent figures are an extract without the
# document (no variant, links or stack; they agree with the others within 0.5%:
# bench/RESULTS.md, "An independent check"), and harness 1.2.0's repeats (cool-start, or a
# bench's own soak with other methods between).
DEFAULT_RECORDS = tuple(RECORDS / name for name in (
    expected.H200X4_SUITE, expected.H200X4_PROBE, expected.H200X2_SUITE,
    expected.H200_REPEAT, expected.H200_SOAK,
    expected.H100_HEALTH, expected.H100X2_PROBE, expected.H100X2_HEALTHY,
    expected.H100_PROBE_BENCH, expected.H100_REPEAT, expected.H100_SOAK, expected.H100_PROBE,
    expected.H100X4_JOB_BACKENDS, expected.H100X4_JOBS_WARM))

# A harness result without its document names its device only.
DEVICE_VARIANTS = {"NVIDIA H100 80GB HBM3": "H100-SXM5-80GB", "NVIDIA H200": "H200-SXM-141GB"}
FIXTURE_DOCUMENT = re.compile(r"tests/fixtures/nodes/[\w.-]+/document\.json")
FORMAT = "fleet-agent/1"


@dataclass(frozen=True)
class Run:
    """One agent run of a record: its document, or (soak.json) its harness results."""

    record: str
    label: str  # where in the record: "node-suite.json run 3"
    document: dict[str, Any] | None = None
    results: tuple[dict[str, Any], ...] = field(default=())  # harness results, no document


def _text(path: Path) -> str:
    if path.suffix == ".gz":
        with gzip.open(path, "rt") as handle:
            return handle.read()
    return path.read_text()


def _documents_in_json(data: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, document) in a JSON value of one of the module docstring's forms."""
    if isinstance(data, dict) and data.get("format") == FORMAT:
        yield "", data
    elif isinstance(data, dict) and isinstance(data.get("document"), dict):
        yield from _documents_in_json(data["document"])
    elif isinstance(data, dict) and isinstance(data.get("runs"), list):
        for i, run in enumerate(data["runs"]):
            for where, document in _documents_in_json(run):
                yield f"run {i + 1}{where}", document


def _store_documents(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with tempfile.TemporaryDirectory() as scratch:
        database = path
        if path.suffix == ".gz":
            database = Path(scratch) / path.stem
            with gzip.open(path, "rb") as source:
                database.write_bytes(source.read())
        connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        try:
            rows = connection.execute("SELECT id, body FROM document ORDER BY id").fetchall()
        finally:
            connection.close()
    for document_id, body in rows:
        yield f"document {document_id}", json.loads(body)


def _soak_results(data: Any) -> tuple[dict[str, Any], ...]:
    if not (isinstance(data, dict) and isinstance(data.get("runs"), list)):
        return ()
    return tuple(run["result"] for run in data["runs"]
                 if isinstance(run, dict) and isinstance(run.get("result"), dict)
                 and "tflops" in run["result"])


def runs_in_file(path: Path, record: str) -> list[Run]:
    """The runs one file of a record holds (none where it holds no agent output)."""
    name = path.name
    suffixes = [s for s in path.suffixes if s != ".gz"]
    kind = suffixes[-1] if suffixes else ""
    if kind == ".db":
        return [Run(record, f"{name} {where}", document)
                for where, document in _store_documents(path)]
    if name == "command.txt":
        return [Run(record, f"{name}: {match}", json.loads((REPO / match).read_text()))
                for match in dict.fromkeys(FIXTURE_DOCUMENT.findall(path.read_text()))
                if (REPO / match).is_file()]
    if kind == ".jsonl":
        runs = []
        for i, line in enumerate(_text(path).splitlines()):
            line = line.strip()
            if not line.startswith("{"):
                continue
            for where, document in _documents_in_json(json.loads(line)):
                runs.append(Run(record, f"{name} line {i + 1}{where}", document))
        return runs
    if kind == ".json":
        try:
            data = json.loads(_text(path))
        except json.JSONDecodeError:
            return []
        found = [Run(record, f"{name} {where}".strip(), document)
                 for where, document in _documents_in_json(data)]
        results = () if found else _soak_results(data)
        return found or ([Run(record, name, results=results)] if results else [])
    return []


def runs_in(path: Path) -> list[Run]:
    """Every run of a record: a folder (its files, sorted) or one file."""
    path = path.resolve()
    if path.is_file():
        return runs_in_file(path, path.parent.name)
    if not path.is_dir():
        raise SystemExit(f"{path}: no such record (a folder or file of agent documents)")
    runs, seen = [], set()
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        for run in runs_in_file(file, path.name):
            # One document kept in two forms (a run's .jsonl and the store it went into)
            # is one run.
            document = run.document or {}
            identity = (json.dumps(document.get("host"), sort_keys=True),
                        document.get("collected_at")) if run.document else (run.label,)
            if identity not in seen:
                seen.add(identity)
                runs.append(run)
    return runs


def _label(gpu: dict[str, Any]) -> str:
    # As fleet/store/ingest.py's variant_of names it.
    variant = gpu.get("variant") or {}
    if variant.get("label"):
        return str(variant["label"])
    if variant.get("form_factor") not in (None, "unknown") and variant.get("family"):
        return f"{variant['family']} {variant['form_factor']}"
    return f"unknown: {gpu.get('name') or variant.get('pci_device_id') or 'no name'}"


def _pair_links(result: dict[str, Any], gpus: dict[int, dict[str, Any]]
                ) -> tuple[int | None, str | None]:
    """A pair's NVLink links and fabric: the result's own, else the module docstring's
    inference from its GPUs' active links and its one-way copy."""
    links, fabric = result.get("nvlink_links"), result.get("nvlink_fabric")
    if links is not None or fabric is not None:
        return links, fabric
    if not str(result.get("topology") or "").upper().startswith("NV"):
        return None, None
    ends = [gpus.get(result["gpu_index"]), gpus.get(result["peer_index"])]
    active = [int(g.get("nvlink_links_active") or 0) for g in ends if g]
    if len(active) != 2 or min(active) <= 0:
        return None, None
    known = NVLINK_BY_ARCHITECTURE.get(str((ends[0] or {}).get("architecture") or ""))
    if known is None:
        return min(active), None
    one_way = result["gbs"] / (2.0 if result.get("direction") == "both_ways" else 1.0)
    return min(active), ("switch" if one_way > 0.5 * min(active) * known[1] else "direct")


def node_rows(run: Run, document_id: int) -> list[dict[str, Any]]:
    """The run's node figures as read_node_results' rows (NODE_COLUMNS, provider
    "records", host the record), with `nvlink_links` and `nvlink_fabric` beside."""
    document = run.document or {}
    gpus = {int(g["index"]): g for g in document.get("gpus") or []}
    first = gpus[min(gpus)] if gpus else None
    rows = []
    pair_links: list[tuple[int | None, str | None]] = []
    for result in document.get("node") or []:
        gpu = gpus.get(result["gpu_index"]) if result.get("gpu_index") is not None else first
        link = result.get("link") or {}
        stats = result.get("stats") or {}
        low, high = stats.get("ci95_gbs") or (None, None)
        links, fabric = (_pair_links(result, gpus) if result["kind"] == "peer_copy"
                         else (result.get("nvlink_links"), result.get("nvlink_fabric")))
        if result["kind"] == "peer_copy":
            pair_links.append((links, fabric))
        row = {c.name: None for c in NODE_COLUMNS}
        row.update({
            "id": len(rows) + 1, "document_id": document_id, "run": document_id,
            "collected_at": document.get("collected_at"), "provider": "records",
            "provider_id": 1, "host": run.record, "host_id": document_id,
            "variant": "unknown: not fingerprinted" if gpu is None else _label(gpu),
            "gpu_uuid": result.get("gpu_uuid"), "peer_uuid": result.get("peer_uuid"),
            **{key: result.get(key) for key in (
                "kind", "gpu_index", "peer_index", "direction", "memory", "size_bytes",
                "gpus_in_run", "backend", "dtype", "gbs", "algbw_gbs", "peer_access",
                "topology", "datasheet_gbs", "datasheet_source", "suite_version",
                "torch_version", "cuda_runtime_version", "nccl_version", "wall_s",
                "numa_node")},
            "runs": stats.get("runs"), "min_gbs": stats.get("min_gbs"),
            "max_gbs": stats.get("max_gbs"), "cv": stats.get("cv"),
            "ci95_low_gbs": low, "ci95_high_gbs": high,
            "link_gen": link.get("gen"), "link_width": link.get("width"),
            "link_gen_max": link.get("gen_max"), "link_width_max": link.get("width_max"),
            "contended": bool(result.get("contention")),
            "stack": node_stack(result.get("torch_version"),
                                result.get("cuda_runtime_version"),
                                result.get("nccl_version")),
            "nvlink_links": links, "nvlink_fabric": fabric,
        })
        rows.append(row)
    # The all-reduce crossed its node's pairs: their fabric, where they agree, and the
    # fewest links any of them has.
    fabrics = {fabric for _, fabric in pair_links}
    counts = [links for links, _ in pair_links if links is not None]
    for row in rows:
        if row["kind"] == "allreduce" and row["nvlink_links"] is None:
            row["nvlink_fabric"] = fabrics.pop() if len(fabrics) == 1 else None
            fabrics = {fabric for _, fabric in pair_links}
            row["nvlink_links"] = min(counts) if counts else None
    return rows


EXTRA_COLUMNS = ("contended", "transport", "nvlink_links", "nvlink_fabric")


def node_frame(runs: Sequence[Run], first_id: int = 1) -> pd.DataFrame:
    """Every node figure of `runs`, one document id a run (in order from `first_id`), as
    read_node_results hands them out, `nvlink_links`, `nvlink_fabric` and `contended`
    among the columns whether or not the store's columns have them yet."""
    rows = [row for i, run in enumerate(runs) for row in node_rows(run, first_id + i)]
    table = frame(NODE_COLUMNS, [[row[c.name] for c in NODE_COLUMNS] for row in rows])
    for name in EXTRA_COLUMNS:
        if name not in table:
            table[name] = pd.Series([row.get(name) for row in rows], dtype=object)
    return table


def figure_key(row: dict[str, Any]) -> FigureKey:
    """The catalog key of one figure (a row of node_frame or of prepare's frame)."""

    def text(name: str) -> str:
        value = row.get(name)
        return "" if value is None or value != value else str(value)

    def number(name: str) -> int | None:
        value = row.get(name)
        return None if value is None or value is pd.NA or value != value else int(value)

    kind = text("kind")
    host_copy = kind in ("host_to_device", "device_to_host")
    linked = kind in ("peer_copy", "allreduce")
    return FigureKey(
        variant=text("variant"), kind=kind, direction=text("direction"),
        memory=text("memory"), size_bytes=int(row["size_bytes"]),
        gpus_in_run=int(row["gpus_in_run"]), dtype=text("dtype"), backend=text("backend"),
        link_gen=number("link_gen") if host_copy else None,
        link_width=number("link_width") if host_copy else None,
        nvlink_fabric=(text("nvlink_fabric") or None) if linked else None,
        nvlink_links=number("nvlink_links") if linked else None)


def node_observations(table: pd.DataFrame) -> list[Observation]:
    """Each uncontended node figure of `table` (node_frame's) as a catalog observation,
    at every size. Pageable host copies are left out: they measure the host's memory and
    allocator as much as the link (9-25% apart from run to run on one node)."""
    seen = []
    for row in table.to_dict("records"):
        if row.get("contended") is True or row.get("memory") == "pageable":
            continue
        seen.append(Observation(str(row["host"]), figure_key(row), float(row["gbs"]),
                                str(row["stack"])))
    return seen


def _matmul_observation(record: str, result: dict[str, Any], variant: str
                        ) -> Observation | None:
    flags = result.get("flags") or {}
    if (result.get("thermal") != "soaked" or flags.get("contended")
            or flags.get("correctness_failed")):
        return None
    provenance = result.get("provenance") or {}
    key = MatmulKey(variant, str(result["dtype"]), int(result["m"]), int(result["n"]),
                    int(result["k"]), str(result.get("mode") or "sustained"),
                    str(result.get("cache") or "cold"), "soaked")
    return Observation(record, key, float(result["tflops"]),
                       software_stack(provenance.get("torch_version"),
                                      provenance.get("cuda_runtime_version"),
                                      provenance.get("cublas_version")),
                       str(result.get("harness_version") or ""))


def matmul_observations(runs: Iterable[Run]) -> list[Observation]:
    """Every soaked matmul result of `runs` as a catalog observation (one a GPU and run)."""
    seen = []
    for run in runs:
        if run.document is not None:
            gpus = {int(g["index"]): g for g in run.document.get("gpus") or []}
            results = [(r, _label(gpus[r["gpu_index"]]) if r["gpu_index"] in gpus else None)
                       for r in run.document.get("benchmarks") or []]
        else:
            results = [(r, DEVICE_VARIANTS.get(str((r.get("provenance") or {})
                                                   .get("device_name"))))
                       for r in run.results]
        for result, variant in results:
            if variant is None:
                continue
            found = _matmul_observation(run.record, result, variant)
            if found is not None:
                seen.append(found)
    return seen


def load(paths: Sequence[Path]) -> tuple[list[Run], pd.DataFrame, list[Observation]]:
    """The runs of the records at `paths`, their node figures and every observation."""
    runs = [run for path in paths for run in runs_in(path)]
    node_runs = [run for run in runs if run.document and run.document.get("node")]
    table = node_frame(node_runs)
    return runs, table, node_observations(table) + matmul_observations(runs)


def _size(size: int) -> str:
    for unit, scale in (("GiB", expected.GiB), ("MiB", expected.MiB)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} * {unit}" if size != scale else unit
    return str(size)


def _names(records: Iterable[str]) -> str:
    constants = {getattr(expected, name): name for name in dir(expected)
                 if name.isupper() and isinstance(getattr(expected, name), str)}
    names = [constants.get(r, _literal(r)) for r in records]
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def _call(name: str, arguments: Sequence[str], indent: int, tail: str = "",
          width: int = 100) -> list[str]:
    """`name(arguments...)` + tail, wrapped at `width` under its opening parenthesis."""
    lines, line = [], " " * indent + name + "("
    hang = " " * len(line)
    for i, argument in enumerate(arguments):
        text = argument + (", " if i < len(arguments) - 1 else ")" + tail)
        if len(line) + len(text.rstrip()) > width and line != hang and not line.endswith("("):
            lines.append(line.rstrip())
            line = hang
        line += text
    lines.append(line.rstrip())
    return lines


def _flow(arguments: Sequence[str], indent: int, tail: str, width: int = 100) -> list[str]:
    """Arguments as lines at `indent`, as many a line as fit, the last followed by tail."""
    lines, line = [], " " * indent
    for i, argument in enumerate(arguments):
        text = argument + (", " if i < len(arguments) - 1 else tail)
        if len(line) + len(text.rstrip()) > width and line.strip():
            lines.append(line.rstrip())
            line = " " * indent
        line += text
    lines.append(line.rstrip())
    return lines


def _literal(value: object) -> str:
    """A value as the repository writes it: strings in double quotes."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _tuple(values: Sequence[str]) -> str:
    return ("(" + ", ".join(_literal(v) for v in values) + ("," if len(values) == 1 else "")
            + ")")


def source(figures: Sequence[Expected], matmul: Sequence[MatmulExpected]) -> str:
    """The entries as fleet/expected.py holds them."""
    lines = ["FIGURES: tuple[Expected, ...] = ("]
    defaults = FigureKey("", "")
    for entry in figures:
        key = entry.key
        fields = [_literal(key.variant), _literal(key.kind)]
        for name in ("direction", "memory", "size_bytes", "gpus_in_run", "dtype", "backend",
                     "link_gen", "link_width", "nvlink_fabric", "nvlink_links"):
            value = getattr(key, name)
            if name == "size_bytes":
                fields.append(f"size_bytes={_size(value)}")
            elif value != getattr(defaults, name):
                fields.append(f"{name}={_literal(value)}")
        lines.append("    Expected(")
        lines += _call("FigureKey", fields, 8, ",")
        lines += _flow([f"gbs={entry.gbs!r}", f"spread={entry.spread!r}",
                        f"within={entry.within!r}", f"n={entry.n}",
                        f"figures={entry.figures}", f"records={_names(entry.records)}",
                        f"stacks={_tuple(entry.stacks)}"], 8, "),")
    lines.append(")")
    lines.append("MATMUL: tuple[MatmulExpected, ...] = (")
    for m in matmul:
        key = m.key
        shape = ([] if (key.dtype, key.m, key.n, key.k, key.mode, key.cache)
                 == ("bf16", 8192, 8192, 8192, "sustained", "cold") else
                 [_literal(key.dtype), str(key.m), str(key.n), str(key.k),
                  _literal(key.mode), _literal(key.cache)])
        lines.append("    MatmulExpected(")
        lines += _flow([f"MatmulKey({', '.join([_literal(key.variant), *shape])})",
                        f"tflops={m.tflops!r}", f"spread={m.spread!r}", f"within={m.within!r}",
                        f"n={m.n}", f"figures={m.figures}", f"records={_names(m.records)}",
                        f"harness_versions={_tuple(m.harness_versions)}",
                        f"stacks={_tuple(m.stacks)}"], 8, "),")
    lines.append(")")
    return "\n".join(lines)


def table_text(figures: Sequence[Expected], matmul: Sequence[MatmulExpected]) -> str:
    """The entries as a table to read."""

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.2%}"

    lines = [f"{'variant':<16} {'figure':<44} {'expected':>9} {'spread':>7} {'within':>7} "
             f"{'n':>2} {'figs':>4}  records"]
    for e in figures:
        k = e.key
        what = k.kind + (f" {k.direction}" if k.direction else "") + (
            f" {k.memory}" if k.memory else "") + f" {size_text(k.size_bytes)}"
        if k.kind == "allreduce":
            what += f" {k.gpus_in_run} GPUs {k.dtype}"
        if k.link_gen:
            what += f" Gen{k.link_gen} x{k.link_width}"
        if k.nvlink_fabric or k.nvlink_links:
            what += f" {k.nvlink_fabric or '?'} {k.nvlink_links or '?'}"
        lines.append(f"{k.variant:<16} {what:<44} {e.gbs:>9,.1f} {pct(e.spread):>7} "
                     f"{pct(e.within):>7} {e.n:>2} {e.figures:>4}  {', '.join(e.records)}")
    for m in matmul:
        what = f"matmul {m.key.m}^3 {m.key.dtype} {m.key.thermal} TFLOP/s"
        lines.append(f"{m.key.variant:<16} {what:<44} {m.tflops:>9,.1f} {pct(m.spread):>7} "
                     f"{pct(m.within):>7} {m.n:>2} {m.figures:>4}  {', '.join(m.records)}")
    return "\n".join(lines)


def differences(figures: Sequence[Expected], matmul: Sequence[MatmulExpected]) -> list[str]:
    """Where fleet/expected.py's catalog differs from `figures` and `matmul`."""
    made: dict[Any, Any] = {e.key: e for e in (*figures, *matmul)}
    held: dict[Any, Any] = {e.key: e for e in (*expected.FIGURES, *expected.MATMUL)}
    found = [f"missing from fleet/expected.py: {key}" for key in made if key not in held]
    found += [f"not in the records: {key}" for key in held if key not in made]
    found += [f"differs: {made[key]}\n   held: {held[key]}" for key in made
              if key in held and made[key] != held[key]]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="*", type=Path,
                        help="record folders or files (default: the catalog's records)")
    parser.add_argument("--add", action="store_true",
                        help="the catalog's records and those given")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 where fleet/expected.py differs from the records")
    parser.add_argument("--source", action="store_true",
                        help="print the entries as fleet/expected.py holds them")
    args = parser.parse_args()
    paths = list(args.records or DEFAULT_RECORDS)
    if args.add:
        paths = [*DEFAULT_RECORDS, *args.records]
    runs, _, observations = load(paths)
    figures, matmul = expected.build(observations)
    by_record: dict[str, int] = {}
    for run in runs:
        by_record[run.record] = by_record.get(run.record, 0) + 1
    print("runs read: " + ", ".join(f"{r} {n}" for r, n in by_record.items()))
    print(table_text(figures, matmul))
    if args.source:
        print()
        print(source(figures, matmul))
    if args.check:
        found = differences(figures, matmul)
        print("\n".join(found) if found else "fleet/expected.py holds these entries.")
        raise SystemExit(1 if found else 0)


if __name__ == "__main__":
    main()

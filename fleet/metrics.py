"""The store's newest figures and verdicts as Prometheus metrics (issue 47): for a scrape or
a pushgateway (`fleet metrics`), and for node_exporter's textfile collector (`fleet sweep
--textfile`).

Names follow Prometheus' conventions: the `fleet_` prefix, base units in the name (FLOP/s
and bytes a second, where the store keeps TFLOP/s and GB/s), `_info` for identity, gauges
throughout (a figure, a verdict, a count of open findings: each can go down). A GPU's
series carry NVIDIA dcgm-exporter's labels, `gpu` (the NVML index), `UUID`, `modelName`
(NVML's name) and `Hostname` (the hostname the agent reported, else the inventory's name),
so that a dashboard joins them with `DCGM_FI_*` series on `UUID`; and fleet's own
`provider`, `host` (the inventory's name) and `variant`.

Cardinality, all bounded by the fleet's size and fleet's own vocabularies:
  per GPU, one series per metric, except the matmul (one per dtype and shape measured
  soaked: 1 for the default harness), host copies (4: pinned and pageable, each way),
  jobs (one per workload and decode point: 3 for suite 1.1), health (5 verdicts) and
  health action (5 states), all states emitted 0 or 1 as kube-state-metrics does;
  per pair of GPUs in a node, 2 (one way, both ways); per node, 1 all-reduce per rank count;
  findings: every kind the registry counts (fleet/findings/kinds.py) x 3 sides x
  providers, zeros included, so that `sum` and alerts see a finding go away.
  per host, 5 limits, 1 software info; per storage folder (at most 8), 4 figures and 1
  small-file rate (issue 58).
Label values a host or an inventory sent are cut to MAX_LABEL characters and escaped by
prometheus_client, never by hand. Nothing secret goes out: no serials, prices, process
lists, users or contention texts, no store URL.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import CollectorRegistry
from prometheus_client import generate_latest as text_format
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_format
from prometheus_client.registry import Collector
from sqlalchemy import select

from agent.health.card import ACTIONS
from fleet.errors import InputError
from fleet.findings.kinds import FINDING_KINDS
from fleet.store.models import Document, HostLimitsRow, StorageTargetRow
from fleet.writable import writable_file

if TYPE_CHECKING:
    import pandas as pd

    from fleet.api import Store

Format = Literal["openmetrics", "text"]
FORMATS: tuple[Format, ...] = ("openmetrics", "text")
MAX_LABEL = 128
GPU_LABELS = ("provider", "host", "Hostname", "gpu", "UUID", "modelName", "variant")
HOST_LABELS = ("provider", "host", "Hostname")
VERDICTS = ("healthy", "degraded", "failing", "unknown", "not_read")
SIDES = ("provider", "renter", "unsettled")
TERA, GIGA = 1e12, 1e9

Record = dict[Hashable, Any]


@dataclass
class Family:
    """One gauge: its name (unit suffix included), help, label names and series; a label
    set seen twice keeps its first value (the frames are newest first)."""

    name: str
    help: str
    labels: tuple[str, ...]
    unit: str = ""
    series: dict[tuple[str, ...], float] = field(default_factory=dict)

    def add(self, labels: Mapping[str, str], value: object) -> None:
        """One series; a missing or non-finite value is left out, not exported as NaN."""
        number = _number(value)
        if number is None:
            return
        self.series.setdefault(tuple(bounded(labels[name]) for name in self.labels), number)


@dataclass(frozen=True)
class Snapshot:
    """What the metrics are made of, read from a store: each frame newest first."""

    fingerprints: pd.DataFrame  # Store.fingerprints(latest=True)
    results: pd.DataFrame  # Store.results(latest=True)
    node: pd.DataFrame  # Store.node_results(latest=True)
    jobs: pd.DataFrame  # Store.jobs(latest=True)
    hostnames: dict[tuple[str, str], str]  # (provider, host) -> the hostname it reported
    findings: tuple[tuple[str, str, str], ...]  # (kind, side, provider) of each finding
    providers: tuple[str, ...]
    # Store.not_measured(): what each host's newest document could not measure.
    not_measured: pd.DataFrame | None = None
    # Each host's newest limits and storage folders (issue 58, `_host_rows`): records of
    # host_limits and storage_target with their provider and host.
    host_limits: tuple[Record, ...] = ()
    storage: tuple[Record, ...] = ()


def bounded(value: str) -> str:
    """A label value cut to MAX_LABEL characters (escaping is the library's)."""
    return value[:MAX_LABEL]


def _number(value: object) -> float | None:
    if value is None or isinstance(value, str):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None  # pandas' NA
    return number if math.isfinite(number) else None


def _text(value: object) -> str:
    """A label value from a frame's cell; missing (None, NaN, pandas' NA) is ""."""
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT or (
            isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def _records(frame: pd.DataFrame) -> list[Record]:
    return frame.to_dict("records")


# --- reading --------------------------------------------------------------------------------

def _sweeps(store: Store) -> list[str]:
    """The names of the sweeps stored, for an error that says what to give."""
    runs = store.runs()  # a sweep's nights, and documents ingested under its name
    return sorted({str(name) for name in runs["sweep"].dropna()}) if not runs.empty else []


def snapshot(store: Store, sweep: str | None = None) -> Snapshot:
    """The newest figures of every host and GPU in `store` (of the sweep `sweep` only, when
    given), and the open findings: the report's over the whole store, or over the sweep's
    newest night."""
    fingerprints = store.fingerprints(sweep=sweep, latest=True)
    runs: tuple[int, ...] = ()
    if sweep is not None:
        nights = store.runs(sweep=sweep)
        if nights.empty:
            raise InputError(f"--sweep {sweep}: no run of that sweep is stored; the stored "
                             f"sweeps are {', '.join(_sweeps(store)) or 'none yet'}, or "
                             "leave out --sweep")
        runs = (int(nights["run"].iloc[-1]),)
    report = store.report(sweep=sweep, runs=runs)
    findings = tuple((f.kind, f.party, f.provider) for f in report.findings)
    providers = sorted({*report.providers, *(p for _, _, p in findings),
                        *(str(p) for p in fingerprints["provider"].unique())})
    limits, storage = _host_rows(store, fingerprints)
    return Snapshot(fingerprints, store.results(sweep=sweep, latest=True),
                    store.node_results(sweep=sweep, latest=True),
                    store.jobs(sweep=sweep, latest=True),
                    _hostnames(store, fingerprints), findings, tuple(providers),
                    store.not_measured(sweep=sweep), limits, storage)


def _host_rows(store: Store, fingerprints: pd.DataFrame
               ) -> tuple[tuple[Record, ...], tuple[Record, ...]]:
    """The newest documents' host_limits and storage_target rows, with provider and host."""
    if fingerprints.empty:
        return (), ()
    documents = {int(d): (str(p), str(h)) for d, p, h in fingerprints[
        ["document", "provider", "host"]].drop_duplicates().itertuples(index=False)}
    limits: list[Record] = []
    storage: list[Record] = []
    with store.engine.connect() as conn:
        for table, out in ((HostLimitsRow, limits), (StorageTargetRow, storage)):
            columns = [c for c in table.__table__.columns if c.name != "body"]
            for row in conn.execute(select(*columns).where(
                    table.document_id.in_(documents))).mappings():
                provider, host = documents[int(row["document_id"])]
                out.append({**{str(k): v for k, v in row.items()}, "provider": provider,
                            "host": host})
    return tuple(limits), tuple(storage)


def _hostnames(store: Store, fingerprints: pd.DataFrame) -> dict[tuple[str, str], str]:
    documents = {int(d): (str(p), str(h)) for d, p, h in fingerprints[
        ["document", "provider", "host"]].drop_duplicates().itertuples(index=False)}
    found: dict[tuple[str, str], str] = {}
    if not documents:
        return found
    with store.engine.connect() as conn:
        for document, hostname in conn.execute(select(Document.id, Document.hostname)
                                               .where(Document.id.in_(documents))):
            if hostname:
                found[documents[int(document)]] = str(hostname)
    return found


# --- building -------------------------------------------------------------------------------

class _Labeller:
    """GPU and host labels for a frame's row, with dcgm-exporter's names."""

    def __init__(self, data: Snapshot) -> None:
        self.hostnames = data.hostnames
        self.models: dict[str, str] = {}
        self.models_at: dict[tuple[str, str, int], str] = {}
        self.uuids_at: dict[tuple[str, str, int], str] = {}
        for row in _records(data.fingerprints):
            name = _text(row["name"])
            at = (str(row["provider"]), str(row["host"]), int(row["gpu_index"]))
            if _text(row["gpu_uuid"]):
                self.models.setdefault(_text(row["gpu_uuid"]), name)
                self.uuids_at.setdefault(at, _text(row["gpu_uuid"]))
            self.models_at.setdefault(at, name)

    def host(self, row: Record) -> dict[str, str]:
        provider, host = str(row["provider"]), str(row["host"])
        return {"provider": provider, "host": host,
                "Hostname": self.hostnames.get((provider, host), host)}

    def gpu(self, row: Record) -> dict[str, str]:
        labels = self.host(row)
        uuid, index = _text(row["gpu_uuid"]), int(row["gpu_index"])
        model = self.models.get(uuid) or self.models_at.get(
            (labels["provider"], labels["host"], index), "")
        return {**labels, "gpu": str(index), "UUID": uuid, "modelName": model,
                "variant": _text(row["variant"])}


def families(data: Snapshot) -> tuple[Family, ...]:
    """Every metric, built from `data`; families without a series are kept (their HELP
    says what they would hold)."""
    label = _Labeller(data)
    return (*_identity(data, label), *_matmul(data, label), *_node(data, label),
            *_jobs(data, label), *_health(data, label), _not_measured(data, label),
            _findings(data), *_host_storage(data, label))


def _identity(data: Snapshot, label: _Labeller) -> Iterator[Family]:
    info = Family("fleet_gpu_info", "A GPU as its host's newest document found it: value 1; "
                  "driver and form factor as labels", (*GPU_LABELS, "driver_version",
                                                       "form_factor"))
    seen = Family("fleet_host_collected_timestamp_seconds", "When the host's newest "
                  "document was collected, Unix time", HOST_LABELS, "seconds")
    # One identity per card: a host renamed in the inventory keeps its old rows, and two
    # info series of one UUID would break a dashboard's `on (UUID) group_left` join.
    said: set[str] = set()
    for row in sorted(_records(data.fingerprints), key=lambda r: r["collected_at"],
                      reverse=True):
        uuid = row.get("gpu_uuid")
        if isinstance(uuid, str) and uuid in said:
            continue
        if isinstance(uuid, str):
            said.add(uuid)
        info.add({**label.gpu(row), "driver_version": _text(row["driver_version"]),
                  "form_factor": _text(row["form_factor"])}, 1)
    for row in _records(data.fingerprints):
        seen.add(label.host(row), row["collected_at"].timestamp())
    yield from (info, seen)


def _matmul(data: Snapshot, label: _Labeller) -> Iterator[Family]:
    names = (*GPU_LABELS, "dtype", "shape")
    speed = Family("fleet_gpu_matmul_flops_per_second", "The GPU's newest soaked matmul "
                   "figure (FLOP/s) for each dtype and shape", names, "flops_per_second")
    low = Family("fleet_gpu_matmul_repeat_low_flops_per_second", "Where a repeat run of the "
                 "card lands, 95%: low end (FLOP/s)", names, "flops_per_second")
    high = Family("fleet_gpu_matmul_repeat_high_flops_per_second", "Where a repeat run of "
                  "the card lands, 95%: high end (FLOP/s)", names, "flops_per_second")
    frame = data.results
    frame = frame[(frame["thermal"] == "soaked") & ~frame["correctness_failed"]]
    for row in _records(frame):
        labels = {**label.gpu(row), "dtype": _text(row["dtype"]),
                  "shape": f"{row['m']}x{row['n']}x{row['k']}"}
        if tuple(labels[n] for n in names) in speed.series:
            continue  # an older configuration of the same dtype and shape
        speed.add(labels, _scaled(row["tflops"], TERA))
        low.add(labels, _scaled(row["repeat_low_tflops"], TERA))
        high.add(labels, _scaled(row["repeat_high_tflops"], TERA))
    yield from (speed, low, high)


def _scaled(value: object, factor: float) -> float | None:
    number = _number(value)
    return None if number is None else number * factor


def _node(data: Snapshot, label: _Labeller) -> Iterator[Family]:
    memory = Family("fleet_gpu_memory_copy_bytes_per_second", "The GPU's memory: a "
                    "device-to-device copy, read plus written (bytes/s)", GPU_LABELS,
                    "bytes_per_second")
    host = Family("fleet_gpu_host_copy_bytes_per_second", "Copies between host memory "
                  "(pinned or pageable) and the GPU, each way (bytes/s)",
                  (*GPU_LABELS, "direction", "memory"), "bytes_per_second")
    peer = Family("fleet_gpu_peer_copy_bytes_per_second", "Copies from this GPU to a peer "
                  "of its node, one way or both ways at once (bytes/s)",
                  (*GPU_LABELS, "peer", "peer_UUID", "direction"), "bytes_per_second")
    reduce_names = (*HOST_LABELS, "gpus", "backend", "dtype")
    allreduce = Family("fleet_node_allreduce_bus_bytes_per_second", "The node's all-reduce "
                       "bus bandwidth (nccl-tests' busbw) at its largest size (bytes/s)",
                       reduce_names, "bytes_per_second")
    size = Family("fleet_node_allreduce_size_bytes", "The size the all-reduce figure was "
                  "measured at", reduce_names, "bytes")
    frame = data.node
    if "kind" in frame:
        # Largest size first, so that each node's first all-reduce row is the one kept.
        frame = frame.sort_values("size_bytes", ascending=False, kind="stable")
    for row in _records(frame):
        kind = str(row["kind"])
        if kind == "allreduce":
            labels = {**label.host(row), "gpus": str(row["gpus_in_run"]),
                      "backend": _text(row["backend"]), "dtype": _text(row["dtype"])}
            if tuple(labels[n] for n in reduce_names) not in allreduce.series:
                allreduce.add(labels, _scaled(row["gbs"], GIGA))
                size.add(labels, row["size_bytes"])
            continue
        gpu = label.gpu(row)
        if kind == "memory_copy":
            memory.add(gpu, _scaled(row["gbs"], GIGA))
        elif kind in ("host_to_device", "device_to_host"):
            host.add({**gpu, "direction": kind, "memory": _text(row["memory"])},
                     _scaled(row["gbs"], GIGA))
        elif kind == "peer_copy":
            peer.add({**gpu, "peer": _text(row["peer_index"]),
                      "peer_UUID": _text(row["peer_uuid"]),
                      "direction": _text(row["direction"])}, _scaled(row["gbs"], GIGA))
    yield from (memory, host, peer, allreduce, size)


def _jobs(data: Snapshot, label: _Labeller) -> Iterator[Family]:
    tokens = Family("fleet_gpu_job_tokens_per_second", "The job suite's headline figure: "
                    "the fastest backend that passed its gate, per workload and decode "
                    "point (tokens/s)", (*GPU_LABELS, "workload", "point", "model",
                                         "backend"))
    key = (*GPU_LABELS, "workload", "point")
    seen: set[tuple[str, ...]] = set()
    frame = data.jobs
    if "headline" in frame:
        frame = frame[frame["headline"]]
    for row in _records(frame):
        labels = {**label.gpu(row), "workload": _text(row["workload"]),
                  "point": _text(row["point"]), "model": _text(row["model"]),
                  "backend": _text(row["attention"])}
        identity = tuple(labels[n] for n in key)
        if identity not in seen:  # one series per workload and point, whatever the model
            seen.add(identity)
            tokens.add(labels, row["tokens_per_s"])
    yield tokens


def _health(data: Snapshot, label: _Labeller) -> Iterator[Family]:
    verdict = Family("fleet_gpu_health", "The card's health verdict from the driver's "
                     "counters: 1 for its verdict, 0 for the others",
                     (*GPU_LABELS, "verdict"))
    action = Family("fleet_gpu_health_action", "What to ask the provider for: 1 for the "
                    "card's action, 0 for the others (unknown: no verdict or an older agent)",
                    (*GPU_LABELS, "action"))
    for row in _records(data.fingerprints):
        gpu = label.gpu(row)
        said = _text(row["health"]).replace(" ", "_") or "unknown"
        for state in (*VERDICTS, *(() if said in VERDICTS else (said,))):
            verdict.add({**gpu, "verdict": state}, float(state == said))
        asked = _text(row["health_action"]) or "unknown"
        for state in (*ACTIONS, "unknown", *(() if asked in (*ACTIONS, "unknown")
                                              else (asked,))):
            action.add({**gpu, "action": state}, float(state == asked))
    yield from (verdict, action)


def _not_measured(data: Snapshot, label: _Labeller) -> Family:
    missed = Family("fleet_not_measured", "Stages the host's newest document could not "
                    "measure: errors by GPU (empty for the host's), stage and whose it is "
                    "(provider, renter, unsettled, or none for information), so that a GPU "
                    "with no figure is seen, not missing", (
                        "provider", "host", "Hostname", "gpu", "UUID", "modelName", "stage",
                        "party"))
    frame = data.not_measured
    counts: dict[tuple[tuple[str, str], ...], int] = {}
    for row in [] if frame is None else _records(frame):
        labels = label.host(row)
        gpu = _text(row["gpu_index"])
        at = (labels["provider"], labels["host"], int(gpu)) if gpu else None
        key = tuple({**labels, "gpu": gpu,
                     "UUID": label.uuids_at.get(at, "") if at else "",
                     "modelName": label.models_at.get(at, "") if at else "",
                     "stage": _text(row["stage"]), "party": _text(row["party"])}.items())
        counts[key] = counts.get(key, 0) + 1
    for key, n in counts.items():
        missed.add(dict(key), n)
    return missed


def _findings(data: Snapshot) -> Family:
    found = Family("fleet_open_findings", "The report's findings by kind and side: provider "
                   "(to dispute), renter (the renter's own side disturbed it) or unsettled "
                   "(measured under settings that can move it)", ("kind", "side", "provider"))
    counts = Counter(data.findings)
    # Not `regression`: a GPU slower than its own past is counted by the sweep's history
    # per night, not listed as a finding with a provider's side; a series of it here would
    # read 0 while the report counts some.
    listed = tuple(k for k in FINDING_KINDS if k != "regression")
    kinds = (*listed, *sorted({k for k, _, _ in counts} - set(listed)))
    for provider in data.providers:
        for kind in kinds:
            for side in SIDES:
                found.add({"kind": kind, "side": side, "provider": provider},
                          counts.get((kind, side, provider), 0))
    return found


def _host_storage(data: Snapshot, label: _Labeller) -> Iterator[Family]:
    """The host's limits and versions, and each storage folder's figures (issue 58)."""
    host = Family("fleet_host_limit", "A limit a job meets on the host, in its unit: "
                  "cpus_available (CPUs), memory_available_bytes, shm_bytes, memlock_bytes "
                  "(absent: unlimited), import_torch_seconds", (*HOST_LABELS, "limit"))
    software = Family("fleet_host_software_info", "The versions a provider patches that "
                      "the GPUs' info does not carry: value 1", (*HOST_LABELS,
                                                                 "container_toolkit",
                                                                 "fabric_manager", "governor"))
    for row in data.host_limits:
        labels = label.host(row)
        memory = row["memory_available_mib"]
        for name, value in (("cpus_available", row["cpus_available"]),
                            ("memory_available_bytes", None if memory is None
                             else memory * 1048576),
                            ("shm_bytes", row["shm_bytes"]),
                            ("memlock_bytes", row["memlock_bytes"]),
                            ("import_torch_seconds", row["import_torch_s"])):
            host.add({**labels, "limit": name}, value)
        software.add({**labels, "container_toolkit": _text(row["container_toolkit"]),
                      "fabric_manager": _text(row["fabric_manager"]),
                      "governor": _text(row["governor"])}, 1)
    speed = Family("fleet_storage_bytes_per_second", "A storage folder's figure: sequential "
                   "read and write (O_DIRECT where the filesystem takes it), and a torch "
                   "checkpoint's write and read", (*HOST_LABELS, "path", "role", "figure"))
    small = Family("fleet_storage_small_files_per_second", "Small files opened and read a "
                   "second in a storage folder", (*HOST_LABELS, "path", "role"))
    for row in data.storage:
        labels = {**label.host(row), "path": str(row["path"]), "role": str(row["role"])}
        for name in ("read", "write", "checkpoint_write", "checkpoint_read"):
            speed.add({**labels, "figure": name}, _scaled(row[f"{name}_gbps"], GIGA))
        small.add(labels, row["small_read_per_s"])
    yield from (host, software, speed, small)


# --- writing --------------------------------------------------------------------------------

class _Collector(Collector):
    def __init__(self, built: Iterable[Family]) -> None:
        self.built = tuple(built)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for family in self.built:
            gauge = GaugeMetricFamily(family.name, family.help, labels=family.labels,
                                      unit=family.unit)
            for labels, value in family.series.items():
                gauge.add_metric(list(labels), value)
            yield gauge


def render(built: Iterable[Family], fmt: Format = "openmetrics") -> str:
    """The metrics as OpenMetrics text (a scrape), or Prometheus' text format 0.0.4
    (node_exporter's textfile collector and the pushgateway read only that)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(built))
    encode = openmetrics_format if fmt == "openmetrics" else text_format
    return encode(registry).decode("utf-8")


def metrics_text(store: Store, sweep: str | None = None, fmt: Format = "openmetrics") -> str:
    """`fleet metrics`: the store's metrics, as text in `fmt`."""
    return render(families(snapshot(store, sweep)), fmt)


def check_textfile(path: str) -> Path:
    """Refuse a --textfile that node_exporter would not read or that cannot be written,
    before a night of probing rather than after."""
    target = Path(path)
    if target.suffix != ".prom":
        raise InputError(f"--textfile {path}: node_exporter's textfile collector reads only "
                         f"*.prom files; give a name such as {target.with_suffix('.prom')}")
    return writable_file(target, "--textfile", "fleet.prom")


def write_atomically(text: str, path: str, option: str = "--output") -> Path:
    """Write `text` beside `path` and rename it into place, so that a scrape or the textfile
    collector never reads half a file (node_exporter's docs ask for exactly this). The
    temporary name starts with a dot and does not end in .prom: the collector skips it."""
    target = writable_file(Path(path), option, "fleet.prom")
    if target.exists() and not target.is_file():  # /dev/null, a pipe: write straight in
        target.write_text(text, encoding="utf-8")
        return target
    handle, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                       suffix=".partial")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            # On disk before the rename: a crash must not leave an empty file in place.
            out.flush()
            os.fsync(out.fileno())
        os.chmod(partial, 0o644)  # node_exporter often runs as another user
        os.replace(partial, target)
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot write the metrics ({exc.strerror})"
                         ) from None
    finally:
        Path(partial).unlink(missing_ok=True)
    return target


def write_textfile(db: str | None, sweep: str, path: str) -> Path:
    """`fleet sweep --textfile`: the sweep's metrics in the text format, written atomically
    for node_exporter's textfile collector."""
    from fleet.api import Store

    with Store(db) as store:
        text = metrics_text(store, sweep, "text")
    return write_atomically(text, path, "--textfile")

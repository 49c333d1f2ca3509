"""Reading the node suite's figures back (node_result, written by fleet/store/ingest.py):
one row per figure, as a frame whose columns NODE_COLUMNS documents.

A figure is compared only with figures of its own configuration: its kind, size,
direction, pinned or pageable host memory, GPU count, data type and software stack are
columns, so that a caller groups by them; nothing here mixes two configurations.

The report reads the newest document of each host in its scope (`documents=`): those ids
go to the database a thousand at a time, and the driver's rows become columns in bulk
(fleet/frames.py's `typed`): the 100,000 figures of 1,000 8-GPU nodes read in about 2 s
of CPU on the 2-core development machine, on SQLite as on PostgreSQL (a third of it the
query, the rest pandas).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, get_args

from sqlalchemy import Connection, Engine, select
from sqlalchemy.orm import aliased

from fleet.errors import InputError
from fleet.frames import columns, typed
from fleet.model.document import NcclTransport, NodeKind
from fleet.store.models import Gpu, Host, NodeResult, ProbeRun, Provider
from fleet.store.query import in_chunks

if TYPE_CHECKING:
    import pandas as pd

    from fleet.store.query import AnySelect

# The kinds in the order a node's figures are listed: per GPU, per pair, per node.
KINDS: tuple[str, ...] = get_args(NodeKind)

NODE_COLUMNS = columns(
    ("id", "int64", "the figure's id in the store (node_result.id)"),
    ("document_id", "int64", "the agent document it came from"),
    ("run", "int64", "the probe, sweep or ingest run it was stored under (`fleet report "
                     "--run`)"),
    ("collected_at", "datetime", "when the agent collected it"),
    ("provider", "category", "the provider the host was rented from"),
    ("provider_id", "int64", "the provider's id in the store"),
    ("host", "string", "the host's name in the inventory"),
    ("host_id", "int64", "the host's id in the store"),
    ("sweep", "string", "the sweep (or `--sweep` name) of its run; missing for none"),
    ("variant", "category", "the GPU's variant, as its fingerprint says; the all-reduce: "
                            "the node's first GPU's"),
    ("kind", "category", '"memory_copy" (a GPU\'s memory: a device-to-device copy), '
                         '"host_to_device", "device_to_host" (the host link), "peer_copy" '
                         '(GPU to GPU) or "allreduce" (the whole node, NCCL)'),
    ("gpu_index", "Int64", "the GPU's NVML index (a pair's source); missing for the "
                           "all-reduce"),
    ("gpu_uuid", "string", "the GPU's NVML UUID; missing where the host hides it"),
    ("gpu_id", "Int64", "the GPU's id in the store, the same card across documents"),
    ("peer_index", "Int64", "peer_copy: the destination GPU's index; missing otherwise"),
    ("peer_uuid", "string", "peer_copy: the destination's UUID"),
    ("peer_gpu_id", "Int64", "peer_copy: the destination's id in the store"),
    ("direction", "string", 'peer_copy: "one_way" (source to destination) or "both_ways" '
                            "(each way at once, the two summed)"),
    ("memory", "string", 'host_to_device and device_to_host: the host buffer, "pinned" or '
                         '"pageable"'),
    ("size_bytes", "int64", "bytes per copy or all-reduce"),
    ("gpus_in_run", "int64", "the all-reduce's ranks, one process per GPU; 1 otherwise"),
    ("backend", "string", '"cuda" for copies, "nccl" or "gloo" for the all-reduce, "cpu" '
                          "on the CPU path"),
    ("dtype", "string", "the all-reduce's data type, e.g. bf16; missing for copies"),
    ("gbs", "float64", "the figure: the median of the repeats, GB/s (10^9 bytes a second) "
                       "as `counted` in the document; the all-reduce's bus bandwidth "
                       "(nccl-tests: algbw x 2(n-1)/n)"),
    ("algbw_gbs", "float64", "the all-reduce's algorithm bandwidth (bytes / time), GB/s"),
    ("runs", "int64", "timed repeats"),
    ("min_gbs", "float64", "the slowest repeat, GB/s"),
    ("max_gbs", "float64", "the fastest repeat, GB/s"),
    ("cv", "float64", "coefficient of variation of the repeats"),
    ("ci95_low_gbs", "float64", "the 95% interval of the median, low end, GB/s"),
    ("ci95_high_gbs", "float64", "the 95% interval of the median, high end, GB/s"),
    ("peer_access", "boolean", "peer_copy: whether CUDA peer access works between the two"),
    ("topology", "string", 'peer_copy: NVML\'s path between the two ("NVLINK", "PIX", '
                           '"PXB", "PHB", "NODE", "SYS")'),
    ("link_gen", "Int64", "the PCIe generation the link ran at during the copy"),
    ("link_width", "Int64", "the PCIe width the link ran at during the copy"),
    ("link_gen_max", "Int64", "the most PCIe generation the card supports"),
    ("link_width_max", "Int64", "the most PCIe width the card supports"),
    ("datasheet_gbs", "float64", "what NVIDIA publishes for this figure, GB/s; missing "
                                 "where the catalog has none"),
    ("datasheet_source", "string", "where the datasheet figure comes from"),
    ("suite_version", "string", "the node suite that measured it; versions compare apart"),
    ("torch_version", "string", "torch on the host"),
    ("cuda_runtime_version", "string", "the CUDA runtime torch ran on"),
    ("nccl_version", "string", "the all-reduce's NCCL; missing for copies"),
    ("contended", "boolean", "whether another process was on the figure's GPUs, or one of "
                             "them busy, before or after it (suite 1.1.0 and later; false "
                             "before, where the agent did not look)"),
    ("contention", "string", "what was seen, in words: each other process with its owner "
                             "where the host showed it, a busy GPU"),
    ("numa_node", "Int64", "host copies: the GPU's NUMA node, which the copy ran from"),
    ("transport", "string", 'the all-reduce: the transports NCCL took, most used first '
                            '("P2P", "SHM", "NET")'),
    ("nccl_settings", "string", "the all-reduce: the NCCL_* and CUDA_VISIBLE_DEVICES "
                                'settings it ran under ("NCCL_P2P_DISABLE=1 ...")'),
    ("nvlink_links", "Int64", "peer_copy: the NVLink links joining the pair"),
    ("nvlink_fabric", "string", 'peer_copy: "switch" (through NVSwitch) or "direct"'),
    ("rerun_gbs", "float64", "the figure measured again in the same run without the "
                             "settings that could move it (agent/rerun/allreduce.py, "
                             "memory.py, links.py), GB/s; missing where none "
                             "was made"),
    ("rerun_without", "string", 'the rerun: the settings taken out ("NCCL_ALGO ...")'),
    ("rerun_kept", "string", "the rerun: the settings that could move it and stayed "
                             "(kept as found, or /etc/nccl.conf's)"),
    ("rerun_floor_gbs", "float64", "the floor the agent called the figure short under"),
    ("rerun_transport", "string", "the rerun: the transports NCCL took"),
    ("stack", "string", 'the software stack: "torch 2.9.0, CUDA 12.8", with ", NCCL '
                        '2.28.9" for an all-reduce through NCCL'),
    ("wall_s", "float64", "seconds the figure took to measure, warm-up included"),
)
_STACK = NODE_COLUMNS[-2].name
UNKNOWN_VERSION = "?"


def node_stack(torch: str | None, cuda_runtime: str | None, nccl: str | None) -> str:
    """The stack a figure was measured on: "torch 2.9.0, CUDA 12.8" and, for an all-reduce
    through NCCL, ", NCCL 2.28.9" (NCCL picks its algorithms by version)."""
    stack = f"torch {torch or UNKNOWN_VERSION}, CUDA {cuda_runtime or UNKNOWN_VERSION}"
    return stack if nccl is None else f"{stack}, NCCL {nccl}"


def _statement() -> AnySelect:
    n = NodeResult
    gpu, peer = aliased(Gpu), aliased(Gpu)
    joined: dict[str, Any] = {"run": n.probe_run_id, "provider": Provider.name,
                              "host": Host.name, "sweep": ProbeRun.sweep,
                              "gpu_uuid": gpu.uuid, "peer_uuid": peer.uuid}
    picked = [joined[c.name] if c.name in joined else getattr(n, c.name)
              for c in NODE_COLUMNS if c.name != _STACK]
    return (select(*picked).select_from(n)
            .join(Provider, Provider.id == n.provider_id).join(Host, Host.id == n.host_id)
            .join(ProbeRun, ProbeRun.id == n.probe_run_id)
            .outerjoin(gpu, gpu.id == n.gpu_id).outerjoin(peer, peer.id == n.peer_gpu_id))


def _names(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


@contextmanager
def _connected(engine_or_conn: Engine | Connection) -> Iterator[Connection]:
    with (engine_or_conn.connect() if isinstance(engine_or_conn, Engine)
          else nullcontext(engine_or_conn)) as conn:
        yield conn


def read_node_results(engine_or_conn: Engine | Connection, *,
                      documents: Sequence[int] | None = None, provider: str | None = None,
                      variant: str | Sequence[str] | None = None,
                      since: dt.datetime | None = None, until: dt.datetime | None = None,
                      kind: str | Sequence[str] | None = None, host: str | None = None,
                      run: int | None = None, sweep: str | None = None) -> pd.DataFrame:
    """The node suite's figures, NODE_COLUMNS in that order: the newest document first,
    and a document's figures by kind (KINDS' order), GPU, peer, direction, host memory
    and size.

    Every filter is exact and they combine: `documents` (ids; none stored for an empty
    list), `variant` and `kind` one or several, `since` and `until` inclusive on when the
    agent collected. A kind that is not one of KINDS is an InputError naming them.
    """
    import pandas as pd

    kinds = _names(kind)
    unknown = [name for name in kinds if name not in KINDS]
    if unknown:
        raise InputError(f"kind {unknown[0]!r} is not a node figure; the kinds are "
                         f"{', '.join(KINDS)}")
    n = NodeResult
    stmt = _statement()
    variants = _names(variant)
    for column, value in ((Provider.name, provider), (Host.name, host),
                          (n.probe_run_id, run), (ProbeRun.sweep, sweep)):
        if value is not None:
            stmt = stmt.where(column == value)
    if variants:
        stmt = stmt.where(n.variant.in_(variants))
    if kinds:
        stmt = stmt.where(n.kind.in_(kinds))
    if since is not None:
        stmt = stmt.where(n.collected_at >= since)
    if until is not None:
        stmt = stmt.where(n.collected_at <= until)
    names = [c.name for c in NODE_COLUMNS if c.name != _STACK]
    fetched: list[Any] = []
    with _connected(engine_or_conn) as conn:
        wanted = [stmt] if documents is None else [
            stmt.where(n.document_id.in_(chunk)) for chunk in in_chunks(sorted(set(documents)))]
        for query in wanted:
            # The driver's tuples, not SQLAlchemy's rows: `typed` converts what differs
            # between the backends (SQLite's times as text, booleans as 0 and 1).
            fetched += conn.execute(query).cursor.fetchall()
    # Columns of objects, cast once by `typed`: pandas' own inference from the rows
    # cost as much again.
    columns = list(zip(*fetched, strict=True)) if fetched else [()] * len(names)
    raw = pd.DataFrame({name: pd.Series(values, dtype=object)
                        for name, values in zip(names, columns, strict=True)})
    # A fleet has a handful of stacks: each label is made once. pandas holds a missing
    # text as NaN or None, as the column's other values led it.
    labels: dict[tuple[Any, ...], str] = {}
    raw[_STACK] = [labels.get(versions) or labels.setdefault(versions, node_stack(
        *(v if isinstance(v, str) else None for v in versions)))
        for versions in zip(*(raw[name].tolist() for name in (
            "torch_version", "cuda_runtime_version", "nccl_version")), strict=True)]
    frame = typed(NODE_COLUMNS, raw)
    frame["kind"] = pd.Categorical(frame["kind"].astype(object), categories=list(KINDS))
    # Newest first; one way before both ways, pinned before pageable (descending names).
    order = {"collected_at": False, "document_id": False, "kind": True, "gpu_index": True,
             "peer_index": True, "direction": False, "memory": False, "size_bytes": True,
             "id": True}
    return frame.sort_values(list(order), ascending=list(order.values()),
                             na_position="first", kind="stable", ignore_index=True)


def transport_text(transport: NcclTransport | None) -> str | None:
    """"P2P", "SHM, NET": the transports NCCL named, most connections first."""
    if transport is None or not transport.transports:
        return None
    ordered = sorted(transport.transports.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(name for name, _ in ordered)[:64]


def settings_text(settings: dict[str, str] | None) -> str | None:
    """"NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0": the settings the all-reduce ran under."""
    if not settings:
        return None
    return " ".join(f"{name}={value}" for name, value in sorted(settings.items()))[:1024]

"""The job suite's figures in the store (job_result): the rows ingest writes for a
document's `jobs`, and the frame they are read back as (JOB_COLUMNS).

A job figure is compared only within its configuration: the suite's major.minor, the
workload, model, every dimension of the shape, data type, attention backend, compile,
CUDA graph, optimizer, concurrency, GPUs in the run and thermal state, and the torch,
CUDA and cuDNN stack. The frame carries that as one text key, `config`, so that a reader
groups by one column and never mixes two configurations.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, get_args

from sqlalchemy import Engine, select

from fleet import repeat
from fleet.frames import columns, typed
from fleet.model.document import AgentDocument, Gpu
from fleet.model.job import Attention, JobResult, Workload
from fleet.store.models import Gpu as GpuRow
from fleet.store.models import Host, ProbeRun, Provider
from fleet.store.models import JobResult as JobRow
from fleet.store.query import in_chunks
from fleet.store.settings import job_suspects

if TYPE_CHECKING:
    import pandas as pd

# Train before decode, flash attention first, as the suite runs them and listings show them.
WORKLOADS: tuple[str, ...] = get_args(Workload)
# Decode's points in the suite's order (agent/job/transformer.py DECODE_POINTS).
POINTS = ("bandwidth", "latency")
ATTENTIONS: tuple[str, ...] = get_args(Attention)
UNKNOWN_VERSION = "?"
# The backend suite 1.0 pinned every job to (its Config.attention): its headline.
PINNED = "flash"

JOB_COLUMNS = columns(
    ("result_id", "int64", "the figure's id in the store (job_result.id)"),
    ("provider", "category", "the provider the host was rented from"),
    ("host", "string", "the host's name in the inventory"),
    ("run_id", "int64", "the probe, sweep or ingest run it was stored under (`fleet report "
                        "--run`)"),
    ("collected_at", "datetime", "when the agent collected it"),
    ("gpu_uuid", "string", "the GPU's NVML UUID; missing where the host hides it"),
    ("gpu_index", "int64", "the GPU's NVML index (0 on the CPU path)"),
    ("variant", "category", "the GPU's variant, as its fingerprint says"),
    ("suite_version", "string", "the job suite that measured it"),
    ("workload", "category", '"train" (a training step: forward, backward, optimizer) or '
                             '"decode" (one new token per sequence against a KV cache)'),
    ("model", "string", 'the published configuration the shapes come from ("llama3-8b")'),
    ("shape", "string", 'the stack as run: layers x width, query/key-value heads, feed-'
                        'forward width, batch and sequence ("4x4096 h32/8 ffn14336 b2 '
                        's4096"), for decode the context ("... b64 ctx2048")'),
    ("dtype", "string", '"bf16" or "fp32"'),
    ("attention", "string", 'the attention backend: "flash", "cudnn", "efficient", "math"'),
    ("compiled", "bool", "whether torch.compile was used"),
    ("graph", "bool", "decode: whether each step was a replayed CUDA graph"),
    ("gpus_in_run", "int64", "how many GPUs ran the suite at once (1 when alone)"),
    ("concurrency", "string", '"concurrent" (every GPU at once) or "sequential"'),
    ("thermal", "string", '"soaked" (after a continuous load settled) or "cool-start"'),
    ("config", "string", "the whole configuration, stack included, as one text: figures "
                         "compare only with figures of equal config"),
    ("torch_version", "string", "torch on the host"),
    ("cuda_runtime_version", "string", "the CUDA runtime torch ran on"),
    ("cudnn_version", "string", "cuDNN as torch reports it"),
    ("tokens_per_s", "float64", "the figure: tokens a second over the timed steps"),
    ("tflops", "float64", "tokens_per_s x FLOP per token (torchtitan's count) / 10^12"),
    ("tflops_causal", "float64", "the same with Megatron's causal halving of the "
                                 "attention term"),
    ("mfu", "float64", "tflops over peak_tflops (model FLOP utilisation); missing without "
                       "a peak"),
    ("peak_tflops", "float64", "the variant's dense datasheet TFLOP/s for the dtype"),
    ("gbs", "float64", "decode: weights and KV cache read a step, GB/s (10^9 bytes a "
                       "second); missing for train"),
    ("hbm_share", "float64", "decode: gbs over the variant's HBM datasheet GB/s"),
    ("peak_memory_bytes", "Int64", "torch's peak allocated bytes; missing on the CPU path"),
    ("within_low", "float64", "how well the run knows its own tokens/s: the 95% interval's "
                              "low end"),
    ("within_high", "float64", "the same interval's high end"),
    ("soaked", "boolean", "the soak's verdict where this figure's own load was judged; "
                          "missing for a cool start and for a figure measured after "
                          "another's soak"),
    ("not_soaked", "bool", "the soak cap came before throughput and temperature settled"),
    ("contended", "bool", "another process was on the GPU around the figure"),
    ("contention", "string", "what was seen, in words, lines joined by \"; \""),
    ("temperature_c", "float64", "deg C under load: the soak's median where judged, else "
                                 "the telemetry's maximum"),
    ("sm_clock_mhz", "float64", "the SM clock's median while measured"),
    ("power_w", "float64", "the power draw's median while measured, W"),
    ("compile_s", "float64", "seconds torch.compile took; missing when not compiled"),
    ("wall_s", "float64", "seconds the figure took, warm-up and soak included"),
    ("correctness_passed", "bool", "the stack passed its check against float32 before it "
                                   "was timed"),
    ("repeat_low", "float64", "where a repeat run's tokens/s should fall, 95%: the low end "
                              "(the job's run-to-run spread, agent/timing/repeat.py JOB_SPREADS, "
                              "or the run's own wander where wider)"),
    ("repeat_high", "float64", "the same interval's high end"),
    ("headline", "bool", "the fastest backend that passed its gate, of its GPU's workload "
                         "and decode point in the run: the figure a tuned job gets (suites "
                         "before 1.1.0: the pinned backend, the run's first)"),
    ("gqa", "string", 'how grouped-query attention reached the kernel: "native" (SDPA\'s '
                      'enable_gqa), "expanded" (keys and values repeated first; every '
                      'training figure before suite 1.1.0), "grouped" (decode)'),
    ("point", "string", 'decode: "bandwidth" (a step the memory system sets) or "latency" '
                        '(one sequence); missing for train and before suite 1.1.0'),
    ("copy_gbs", "float64", "decode: the same GPU's memory copy in the same run, GB/s "
                            "(read plus written); missing without the node suite"),
    ("copy_share", "float64", "decode: gbs over copy_gbs, the share of the card's own "
                              "memory copy a step read"),
    ("rerun_tokens_per_s", "float64", "a short headline measured again in the same run "
                                      "without the settings that can move a job "
                                      "(agent/rerun/job.py): its tokens/s"),
    ("rerun_share", "float64", "the rerun's MFU (training) or share of HBM (decode)"),
    ("rerun_floor", "float64", "the floor the first figure fell under, tokens/s (the "
                               "records' figure less 5%, or a share of the datasheet's)"),
    ("rerun_without", "string", 'the rerun: the settings taken out ("CUDA_LAUNCH_BLOCKING '
                                '...")'),
    ("rerun_contended", "boolean", "the rerun: another process was on the GPU around it"),
    ("job_suspects", "string", 'the run\'s settings that can move a job, "NAME=VALUE '
                               '(source)" joined by "; " (agent/source/settings.py)'),
)
# Built here from stored columns, not selected.
_DERIVED = ("shape", "config", "repeat_low", "repeat_high", "job_suspects")
# What `shape` and `config` are built from, and the order's document, read beside
# the frame's columns.
_PARTS = ("layers", "width", "heads", "kv_heads", "head_dim", "ffn", "batch", "seq",
          "context", "optimizer", "document_id", "wander", "follows")


def shape_text(layers: int, width: int, heads: int, kv_heads: int, ffn: int, batch: int,
               seq: int, context: int | None) -> str:
    """"4x4096 h32/8 ffn14336 b2 s4096"; decode (one new token a step) "... b64 ctx2048"."""
    steps = f"s{seq}" if context is None else (
        f"ctx{context}" if seq == 1 else f"s{seq} ctx{context}")
    return f"{layers}x{width} h{heads}/{kv_heads} ffn{ffn} b{batch} {steps}"


def config_text(row: dict[str, Any]) -> str:
    """Every part of a figure's configuration, stack included, in one line: "suite 1.0
    train llama3-8b 4x4096 h32/8 d128 ffn14336 b2 s4096 bf16 flash eager adamw-fused
    concurrent x2 soaked; torch 2.13.0+cu130, CUDA 13.0, cuDNN 91002". The suite's patch
    version is left out: a patch does not change what is measured."""
    suite = ".".join(str(row["suite_version"]).split(".")[:2])
    shape = shape_text(*(row[name] for name in ("layers", "width", "heads", "kv_heads",
                                                "ffn", "batch", "seq", "context")))
    # The head dimension is not in `shape` (width / heads, as a rule), but is configuration.
    shape = shape.replace(" ffn", f" d{row['head_dim']} ffn", 1)
    parts = [f"suite {suite}", row["workload"], row["model"], shape, row["dtype"],
             row["attention"], f"gqa-{_gqa(row)}",
             "compiled" if row["compiled"] else "eager",
             *(["graph"] if row["graph"] else []),
             *([row["optimizer"]] if row["optimizer"] else []),
             f"{row['concurrency']} x{row['gpus_in_run']}", row["thermal"]]
    stack = (f"torch {row['torch_version'] or UNKNOWN_VERSION}, CUDA "
             f"{row['cuda_runtime_version'] or UNKNOWN_VERSION}, cuDNN "
             f"{row['cudnn_version'] or UNKNOWN_VERSION}")
    return " ".join(str(part) for part in parts) + "; " + stack


def _gqa(row: dict[str, Any]) -> str:
    """The row's GQA, as suites before 1.1.0 ran it where the row does not say."""
    return str(row.get("gqa") or ("expanded" if row["workload"] == "train" else "grouped"))


def _headline(row: dict[str, Any]) -> bool:
    """The row's headline; before suite 1.1.0 the pinned backend's figures: the soaked
    training step (which follows no other load), and decode, which suite 1.0 ran pinned
    to flash."""
    if row.get("headline") is not None:
        return bool(row["headline"])
    if row["workload"] == "decode":
        return row.get("attention") == PINNED
    return row.get("follows") is None


def gpu_problem(document: AgentDocument, gpus: dict[int, Gpu], uuids: dict[str, int],
                found: dict[int, str | None]) -> str | None:
    """Where a job result's GPU disagrees with the document's GPUs, the field and why (as
    ingest checks the node suite's); otherwise each GPU named gets an identity in
    `found`, so that its figures follow the card as its other results do."""
    for i, result in enumerate(document.jobs):
        index, uuid = result.gpu_index, result.gpu_uuid
        if uuid is not None:
            known = gpus.get(index)
            if known is not None and known.uuid is not None and known.uuid != uuid:
                return (f"jobs.{i}.gpu_uuid: {uuid!r} is not the UUID of GPU {index} "
                        f"({known.uuid!r})")
            if uuids.get(uuid, index) != index:
                return f"jobs.{i}.gpu_index: {uuid!r} is GPU {uuids[uuid]}, not {index}"
            # A GPU the document did not fingerprint has one UUID across its results too.
            other = found.get(index)
            if other is not None and other != uuid:
                return (f"jobs.{i}.gpu_uuid: {uuid!r} is not the UUID of GPU {index} "
                        f"({other!r}, as the document's other results say)")
        found.setdefault(index, uuid)
    return None


def job_row(result: JobResult, variant: str) -> dict[str, Any]:
    """The job_result row of `result`, less the ids and collected_at."""
    shape, flags, soak, telemetry = result.shape, result.flags, result.soak, result.telemetry
    low, high = result.within_run_ci95 or (None, None)
    load = soak.temperature_c if soak is not None else None
    return {
        "variant": variant, "gpu_index": result.gpu_index,
        "suite_version": result.suite_version, "workload": result.workload,
        "model": result.model, **shape.model_dump(), "params": result.params,
        "dtype": result.dtype, "attention": result.attention, "compiled": result.compiled,
        "graph": result.graph, "optimizer": result.optimizer,
        "concurrency": result.concurrency, "gpus_in_run": result.gpus_in_run,
        "thermal": result.thermal, "follows": result.follows,
        "torch_version": result.provenance.torch_version,
        "cuda_runtime_version": result.provenance.cuda_runtime_version,
        "cudnn_version": result.provenance.cudnn_version,
        "tokens_per_step": result.tokens_per_step, "steps": result.steps,
        "seconds": result.seconds, "tokens_per_s": result.tokens_per_s,
        "step_median_ms": result.step_ms.median_ms, "step_cv": result.step_ms.cv,
        "within_low": low, "within_high": high,
        "flop_per_token": result.flop_per_token,
        "flop_per_token_causal": result.flop_per_token_causal,
        "tflops": result.tflops, "tflops_causal": result.tflops_causal,
        "peak_tflops": result.peak_tflops, "mfu": result.mfu,
        "bytes_per_step": result.bytes_per_step, "gbs": result.gbs,
        "hbm_gbs": result.hbm_gbs, "hbm_share": result.hbm_share,
        "peak_memory_bytes": result.peak_memory_bytes, "loss": result.loss,
        "correctness_passed": result.correctness.passed,
        "max_rel_error": result.correctness.grad_max_rel_error,
        "soaked": None if soak is None else soak.soaked,
        "soak_s": None if soak is None else soak.seconds,
        "not_soaked": flags.not_soaked, "contended": flags.contended,
        "power_capped": flags.power_capped, "thermal_throttled": flags.thermal_throttled,
        "hw_slowdown": flags.hw_slowdown,
        "contention": "; ".join(result.contention)[:1024] or None,
        "temperature_c": load if load is not None else telemetry.temperature_c_max,
        "sm_clock_mhz": telemetry.sm_clock_mhz_median, "power_w": telemetry.power_w_median,
        "compile_s": result.compile_s, "wall_s": result.wall_s,
        "wander": repeat.job_wander(result),
        # Before suite 1.1.0 the pinned backend (the one that soaked) was the headline.
        "headline": _headline({"headline": result.headline, "follows": result.follows,
                               "workload": result.workload, "attention": result.attention}),
        "gqa": _gqa({"gqa": result.gqa, "workload": result.workload}),
        "point": result.point, "copy_gbs": result.copy_gbs, "copy_share": result.copy_share,
        **_rerun(result),
    }


def _rerun(result: JobResult) -> dict[str, Any]:
    rerun = result.rerun
    if rerun is None:
        return dict.fromkeys(("rerun_tokens_per_s", "rerun_share", "rerun_floor",
                              "rerun_without", "rerun_contended"))
    share = rerun.mfu if result.workload == "train" else rerun.hbm_share
    return {"rerun_tokens_per_s": rerun.tokens_per_s, "rerun_share": share,
            "rerun_floor": rerun.floor_tokens_per_s,
            "rerun_without": " ".join(rerun.without)[:1024],
            "rerun_contended": rerun.contended}


def _names(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def frame(engine: Engine, *, provider: str | None = None,
          variant: str | Sequence[str] | None = None, since: dt.datetime | None = None,
          until: dt.datetime | None = None, host: str | None = None,
          run: int | None = None, sweep: str | None = None,
          documents: Sequence[int] | None = None) -> pd.DataFrame:
    """The job suite's figures, JOB_COLUMNS in that order: the newest document first, and
    a document's figures by workload (train, then decode), attention backend and GPU.

    Every filter is exact and they combine: `variant` one or several labels as stored,
    `since` and `until` inclusive on when the agent collected, `documents` ids (none
    stored for an empty list).
    """
    import pandas as pd

    j = JobRow
    joined: dict[str, Any] = {"result_id": j.id, "provider": Provider.name,
                              "host": Host.name, "run_id": j.probe_run_id,
                              "gpu_uuid": GpuRow.uuid}
    names = [c.name for c in JOB_COLUMNS if c.name not in _DERIVED] + list(_PARTS)
    stmt = (select(*(joined[name] if name in joined else getattr(j, name) for name in names))
            .select_from(j).join(Provider, Provider.id == j.provider_id)
            .join(Host, Host.id == j.host_id).join(ProbeRun, ProbeRun.id == j.probe_run_id)
            .join(GpuRow, GpuRow.id == j.gpu_id))
    for column, value in ((Provider.name, provider), (Host.name, host),
                          (j.probe_run_id, run), (ProbeRun.sweep, sweep)):
        if value is not None:
            stmt = stmt.where(column == value)
    variants = _names(variant)
    if variants:
        stmt = stmt.where(j.variant.in_(variants))
    if since is not None:
        stmt = stmt.where(j.collected_at >= since)
    if until is not None:
        stmt = stmt.where(j.collected_at <= until)
    wanted = [stmt] if documents is None else [
        stmt.where(j.document_id.in_(chunk)) for chunk in in_chunks(sorted(set(documents)))]
    fetched: list[Any] = []
    with engine.connect() as conn:
        for query in wanted:
            # The driver's tuples: `typed` converts what the backends return differently.
            fetched += conn.execute(query).cursor.fetchall()
    values = list(zip(*fetched, strict=True)) if fetched else [()] * len(names)
    raw = pd.DataFrame({name: pd.Series(column, dtype=object)
                        for name, column in zip(names, values, strict=True)})
    records = [dict(zip(names, row, strict=True)) for row in fetched]
    raw["shape"] = [shape_text(*(r[name] for name in ("layers", "width", "heads", "kv_heads",
                                                       "ffn", "batch", "seq", "context")))
                    for r in records]
    raw["config"] = [config_text(r) for r in records]
    raw["headline"] = [_headline(r) for r in records]
    raw["gqa"] = [_gqa(r) for r in records]
    intervals = [repeat.of_job(r["tokens_per_s"], r["variant"], r["wander"], r["workload"],
                               r["attention"], r["point"]) for r in records]
    suspects = job_suspects(engine, {int(r["document_id"]) for r in records})
    raw["job_suspects"] = [suspects.get(int(r["document_id"])) for r in records]
    raw["repeat_low"] = [i.low for i in intervals]
    raw["repeat_high"] = [i.high for i in intervals]
    result = typed(JOB_COLUMNS, raw)
    result["workload"] = pd.Categorical(result["workload"].astype(object),
                                        categories=list(WORKLOADS))
    # Newest first; a document's figures by workload, attention and GPU (result ids rise
    # with the document, which stands in for it among documents collected at once).
    keys = result.assign(_document=raw["document_id"].astype("int64"),
                         _point=[POINTS.index(p) if isinstance(p, str) and p in POINTS
                                 else -1 for p in result["point"].astype(object)],
                         _attention=result["attention"].map(ATTENTIONS.index))
    order = {"collected_at": False, "_document": False, "workload": True, "_point": True,
             "_attention": True, "gpu_index": True, "result_id": True}
    return keys.sort_values(list(order), ascending=list(order.values()), kind="stable",
                            ignore_index=True).drop(columns=["_document", "_point",
                                                             "_attention"])

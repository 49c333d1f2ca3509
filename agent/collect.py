"""Gather one host's document: host facts, every GPU's fingerprint, then each suite asked
for, walked in the suite table's order (agent/suites.py).

Where the GPUs' answers come from is agent/survey.py's: with no source the document says
there is no NVIDIA GPU and why, and still carries the host facts.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional

from agent import DOCUMENT_FORMAT, __version__, suites
from agent.gpu import host
from agent.gpu.fingerprint import read_system
from agent.host.document import document_host_limits
from agent.job.suite import Config as JobConfig
from agent.matmul.harness import Config as HarnessConfig
from agent.network.document import document_network
from agent.node.suite import Config as NodeConfig
from agent.source import settings as run_settings
from agent.source.nvml import Nvml, NvmlError, RecordingNvml
from agent.storage.suite import Config as StorageConfig
from agent.storage.suite import document_storage
from agent.survey import SourceError, fingerprint_all, open_source

__all__ = ["SourceError", "collect"]

Emit = Callable[[Dict[str, Any]], None]


def _health_after_load(gpus: List[Dict[str, Any]], nvml: Nvml,
                       links: Dict[int, Dict[str, Optional[int]]], run_started: float) -> None:
    """Judge each GPU's health again with what only the load shows: the replays counted
    during the run and the host link as it ran (links drop a generation at idle)."""
    from agent.health import card as health

    # `run_started` is time.monotonic() when collect began, the clock of the kernel log's
    # stamps: the span the counters read again cover, and the start of "inside the run".
    seconds = time.monotonic() - run_started
    # Read again: Xid lines the load brought are newer than the fingerprint's reading.
    log = health.read_kernel_log.__wrapped__() if nvml.source == "nvml" else None
    for gpu in gpus:
        if not gpu.get("health"):
            continue
        link = links.get(int(gpu["index"]), {})
        try:
            handle = nvml.device(int(gpu["index"]))
        except NvmlError:
            continue
        gpu["health"] = health.update_after_load(gpu["health"], nvml, handle,
                                                 link.get("gen"), link.get("width"), seconds,
                                                 log, run_started, gpu.get("pci_bus_id"))


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def collect(
    source_path: Optional[str] = None,
    probe_writes: bool = False,
    record_path: Optional[str] = None,
    probe_torch: bool = True,
    emit: Optional[Emit] = None,
    bench: Optional[HarnessConfig] = None,
    node: Optional[NodeConfig] = None,
    job: Optional[JobConfig] = None,
    storage: Optional[StorageConfig] = None,
) -> Dict[str, Any]:
    """Fingerprint every GPU of this host, benchmark them when `bench` asks, measure the
    node (memory, links, all-reduce) when `node` does and run the job suite (a training
    step and decode) when `job` does: the document."""
    started = time.monotonic()

    def progress(stage: str, message: str, **extra: Any) -> None:
        if emit is not None:
            emit({"event": "progress", "stage": stage, "message": message,
                  "elapsed_s": round(time.monotonic() - started, 3), **extra})

    errors: List[Dict[str, Any]] = []
    configs: Dict[str, Any] = {suites.MATMUL.name: bench, suites.JOB.name: job,
                               suites.NODE.name: node}
    documents: Dict[str, List[Dict[str, Any]]] = {s.key: [] for s in suites.SUITES}
    progress("gpu", "opening the GPU source")
    nvml, source = open_source(source_path)
    progress("host", "reading host facts")
    # A recording or nvidia-smi file describes another machine: the host facts are then
    # those of the machine that read it (source.kind says so), and torch there is moot.
    replaying = source["kind"] not in ("nvml", "none") and source_path is not None
    # The torch probe's child is the run's first `import torch`, the one a job's start
    # meets: the host's limits take its time rather than import torch once more.
    timings: Dict[str, Optional[float]] = {}
    probed = probe_torch and not replaying
    facts = host.collect_host_facts(probe_torch=probed, timings=timings)
    progress("host", "reading the host's limits: CPUs, memory, /dev/shm, ulimits, IOMMU")
    limits, unread = document_host_limits({
        "import_torch_s": timings.get("import_torch_s"),
        "import_torch_error": None if timings.get("import_torch_s") is not None
        else "not probed" if not probed else facts.get("torch_error") or "not timed"})
    errors += unread
    progress("network", "reading the network: RDMA devices, interfaces, GPUDirect RDMA")
    network, unread = document_network(source["kind"] if replaying else None)
    errors += unread
    context = source.pop("context")
    # Replayed verdicts must be those of the user the recording was made as, not ours.
    euid = int(context["euid"]) if "euid" in context else os.geteuid()
    system: Optional[Dict[str, Any]] = None
    gpus: List[Dict[str, Any]] = []
    if nvml is not None:
        recorder: Optional[RecordingNvml] = None
        if record_path is not None:
            note = (f"recorded by fleet agent {__version__} on {facts.get('hostname')} "
                    f"at {_now()}; no setting changed")
            recorder = RecordingNvml(nvml, note)
            recorder.recording["context"] = {"euid": euid}
            nvml = recorder
        try:
            system = read_system(nvml)
            gpus, unread = fingerprint_all(
                nvml, system, euid, probe_writes, live=source.get("path") is None,
                progress=lambda index, count: progress(
                    "gpu", f"fingerprinting GPU {index + 1} of {count}", gpu=index))
            errors += unread
            # Telemetry under load must not overwrite the idle answers being recorded.
            live = recorder.inner if recorder is not None else nvml
            before: Optional[suites.Suite] = None
            ran: Optional[suites.Ran] = None
            for suite in suites.SUITES:
                cfg = configs[suite.name]
                if cfg is None:
                    continue
                cfg = suite.after(cfg, before, ran)
                ran = suite.run(cfg, gpus, live, progress)
                documents[suite.key], before = ran.results, suite
                errors += ran.errors
                if suite.rerun is not None:
                    errors += suite.rerun(cfg, ran, gpus, live, progress)
                if suite is suites.NODE:
                    _health_after_load(gpus, live, ran.links, started)
            if node is not None:
                suites.share_copies(documents)
            elif bench is not None:
                # The matmul alone (--suite gemm): no link was read under load, but the
                # replays counted while it ran still tell.
                _health_after_load(gpus, live, {}, started)
        finally:
            nvml.close()
        if recorder is not None:
            with open(record_path or "", "w", encoding="utf-8") as fh:
                json.dump(recorder.recording, fh, indent=1, sort_keys=True)
                fh.write("\n")
            progress("record", f"wrote NVML recording {record_path}")
    # Storage last: its writes and the checkpoint's load would disturb no GPU figure,
    # and nothing after it waits on the disks it filled and emptied.
    stored: Optional[Dict[str, Any]] = None
    if storage is not None:
        progress("storage", "measuring storage: sequential, small files, a checkpoint")
        stored, failed = document_storage(storage)
        errors += failed
    if nvml is None:
        asked = False
        for suite in suites.WITHOUT_GPU:
            cfg = configs[suite.name]
            if cfg is None:
                continue
            if cfg.device == "cpu":
                ran = suite.run(cfg, [], None, progress)
                documents[suite.key] = ran.results
                errors += ran.errors
                if suite.rerun is not None:
                    errors += suite.rerun(cfg, ran, [], None, progress)
            elif not asked:  # the first suite asked says it, for all
                errors.append({"stage": suite.stage, "message": suite.no_gpu})
            asked = True
    return {
        "format": DOCUMENT_FORMAT,
        "agent_version": __version__,
        "collected_at": _now(),
        "source": source,
        "no_gpu_reason": source["note"] if nvml is None else None,
        "probe_writes": probe_writes,
        "host": facts,
        "network": network,
        "host_limits": limits,
        "storage": stored,
        "system": system,
        "gpus": gpus,
        "benchmarks": documents[suites.MATMUL.key],
        "errors": errors,
        "node": documents[suites.NODE.key],
        "jobs": documents[suites.JOB.key],
        # What the run measured under, with where each came from (agent/source/settings.py).
        "settings": run_settings.collect(os.environ),
    }

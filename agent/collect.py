"""Gather one host's document: host facts, then every GPU's fingerprint.

The GPU source is chosen in this order: a file the user named (recording or nvidia-smi
output), the recording named by FLEET_NVML_REPLAY, the live driver, and, when NVML cannot
be loaded, `nvidia-smi -q -x`. With none of them the document says there is no NVIDIA GPU
and why, and still carries the host facts.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent import DOCUMENT_FORMAT, __version__
from agent.gpu import host
from agent.gpu.fingerprint import LIVE_SMI_ORIGIN, fingerprint_gpu, read_system
from agent.host.document import document_host_limits
from agent.job.share import set_copy_shares
from agent.job.suite import Config as JobConfig
from agent.matmul.harness import Config as HarnessConfig
from agent.network.document import document_network
from agent.node.suite import Config as NodeConfig
from agent.source import settings as run_settings
from agent.source import smi
from agent.source.nvml import (
    REPLAY_ENV,
    LiveNvml,
    Nvml,
    NvmlError,
    NvmlUnavailable,
    RecordingNvml,
    ReplayNvml,
)
from agent.storage.suite import Config as StorageConfig
from agent.storage.suite import document_storage
from agent.timing import contention

Emit = Callable[[Dict[str, Any]], None]


class SourceError(Exception):
    """The named GPU source cannot be read; the message says which file and why."""


def _source_kind(recording: Dict[str, Any]) -> str:
    note = str(recording.get("source", ""))
    if note.startswith("converted from nvidia-smi -q -x"):
        return "nvidia-smi-xml"
    if note.startswith("converted from nvidia-smi -q"):
        return "nvidia-smi-text"
    return "recording"


def open_source(path: Optional[str]) -> Tuple[Optional[Nvml], Dict[str, Any]]:
    """The NVML backend to read, and a description of where its answers come from."""
    if path is None and os.environ.get(REPLAY_ENV):
        path = os.environ[REPLAY_ENV]
    if path is not None:
        try:
            recording = smi.recording_from_file(path)
            nvml: Nvml = ReplayNvml(recording, origin=path)
        except (OSError, ValueError) as exc:
            raise SourceError(str(exc)) from exc
        return nvml, {"kind": _source_kind(recording), "path": path,
                      "note": str(recording.get("source", ""))[:500],
                      "context": recording.get("context") or {}}
    try:
        return LiveNvml(), {"kind": "nvml", "path": None, "note": "live driver", "context": {}}
    except NvmlUnavailable as exc:
        nvml_reason = str(exc)
    try:
        xml = smi.run_nvidia_smi_xml()
    except (OSError, ValueError, RuntimeError) as exc:
        return None, {"kind": "none", "path": None, "context": {},
                      "note": f"{nvml_reason}; nvidia-smi -q -x failed: {exc}"}
    if xml is None:
        return None, {"kind": "none", "path": None, "context": {},
                      "note": f"{nvml_reason}; no nvidia-smi on PATH"}
    recording = smi.recording_from_xml(xml, origin=LIVE_SMI_ORIGIN)
    return ReplayNvml(recording, origin=LIVE_SMI_ORIGIN), {
        "kind": "nvidia-smi-xml", "path": None, "context": {},
        "note": f"NVML unavailable ({nvml_reason}); read nvidia-smi -q -x instead"}


def _benchmark(
    cfg: HarnessConfig, gpus: List[Dict[str, Any]], nvml: Optional[Nvml],
    progress: Callable[..., None],
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    from agent.matmul import harness

    progress("benchmark", f"benchmarking {cfg.dtype} {cfg.m}x{cfg.n}x{cfg.k} ({cfg.mode})")
    try:
        return harness.run(cfg, gpus, nvml, lambda message: progress("benchmark", message))
    except harness.HarnessError as exc:
        return [], [{"stage": "benchmark", "message": f"{exc}; fingerprinted only"}]


def _matmul_rerun(cfg: HarnessConfig, results: List[Dict[str, Any]],
                  gpus: List[Dict[str, Any]], nvml: Optional[Nvml],
                  progress: Callable[..., None]) -> List[Dict[str, Any]]:
    """A short soaked matmul measured again without the run's settings that can move it,
    then with them (agent/matmul/rerun.py); the errors, where it could not be (the
    figures then stand)."""
    from agent.matmul import harness, rerun

    def again(quick: HarnessConfig) -> List[Dict[str, Any]]:
        found, failed = harness.run(quick, gpus, nvml,
                                    lambda message: progress("benchmark", message))
        if failed:
            raise harness.HarnessError("; ".join(str(f["message"]) for f in failed)[:600])
        return found

    return _measured_again(
        "benchmark", "matmul again without the run's settings", results,
        lambda: rerun.settle(results, run_settings.collect(os.environ, limit=None), cfg,
                             _variants(gpus), again,
                             lambda message: progress("benchmark", message)))


def _node_suite(cfg: NodeConfig, gpus: List[Dict[str, Any]], nvml: Optional[Nvml],
                progress: Callable[..., None],
                run_started: float) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    from agent.node import suite as node

    progress("node", "measuring memory, host links, GPU pairs and the all-reduce")
    started = time.monotonic()
    outcome = node.run_or_fail(cfg, gpus, nvml, lambda message: progress("node", message))
    progress("node", f"node suite: {len(outcome.results)} figures, {len(outcome.errors)} "
             f"failed, in {time.monotonic() - started:.1f} s")
    if nvml is not None:
        _health_after_load(gpus, nvml, outcome.links, run_started)
    return outcome.results, outcome.errors


def _job_suite(cfg: JobConfig, gpus: List[Dict[str, Any]], nvml: Optional[Nvml],
               progress: Callable[..., None]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    from agent.job import suite as jobs
    from agent.matmul import harness

    progress("job", "a transformer's training step and decode on every GPU at once")
    started = time.monotonic()
    try:
        results, errors = jobs.run(cfg, gpus, nvml, lambda message: progress("job", message))
    except harness.HarnessError as exc:
        return [], [{"stage": "job", "message": f"{exc}; no job figure"}]
    progress("job", f"job suite: {jobs.summary_line(results)}, {len(errors)} failed, in "
             f"{time.monotonic() - started:.1f} s")
    return results, errors


def _job_rerun(cfg: JobConfig, results: List[Dict[str, Any]], gpus: List[Dict[str, Any]],
               progress: Callable[..., None]) -> List[Dict[str, Any]]:
    """A short job figure measured again without the run's settings that can move it
    (agent/job/rerun.py); the errors, where it could not be (the figures then stand)."""
    from agent.job import rerun

    return _measured_again(
        "job", "job again without the run's settings", results,
        lambda: rerun.settle(results, run_settings.collect(os.environ, limit=None), cfg,
                             lambda message: progress("job", message),
                             variants=_variants(gpus)))


def _variants(gpus: List[Dict[str, Any]]) -> Dict[int, str]:
    """Each GPU index's variant label, as the reruns' floors are keyed."""
    return {int(g["index"]): str((g.get("variant") or {}).get("label"))
            for g in gpus if "index" in g}


def _measured_again(stage: str, what: str, results: List[Dict[str, Any]],
                    settle: Callable[[], Optional[str]]) -> List[Dict[str, Any]]:
    """Run a rerun's `settle`; the errors where it could not be done, every `rerun` it
    left taken off: the original figures then stand, and the controller calls them
    unsettled."""
    try:
        failed = settle()
    except Exception as exc:  # the figures stand, unsettled
        failed = f"did not run ({type(exc).__name__}: {str(exc)[:300]})"
    if failed is None:
        return []
    for result in results:
        result.pop("rerun", None)
    return [{"stage": stage, "message": f"{what}: {failed}; the original figures stand"}]


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
    benchmarks: List[Dict[str, Any]] = []
    node_results: List[Dict[str, Any]] = []
    job_results: List[Dict[str, Any]] = []
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
            count = int(system["gpu_count"])
            for index in range(count):
                progress("gpu", f"fingerprinting GPU {index + 1} of {count}", gpu=index)
                try:
                    gpu = fingerprint_gpu(nvml, index, system, euid, probe_writes)
                    if source.get("path") is None:
                        # Whose the memory a process holds is, where the run can see it;
                        # a recording's pids are another machine's.
                        gpu["processes"] = [contention.seen_from_here(p)
                                            for p in gpu["processes"]]
                    gpus.append(gpu)
                except NvmlError as exc:
                    errors.append({"stage": "fingerprint", "gpu": index, "message": str(exc)})
            # Telemetry under load must not overwrite the idle answers being recorded.
            live = recorder.inner if recorder is not None else nvml
            heated = False
            if bench is not None:
                benchmarks, failures = _benchmark(bench, gpus, live, progress)
                errors += failures + _matmul_rerun(bench, benchmarks, gpus, live, progress)
                # A soaked matmul that ran on every GPU left each hot: the job's shorter
                # span (agent/job/suite.py Config.warm_span_s says what it rests on).
                heated = bench.protocol == "soaked" and bool(benchmarks) and not failures
            # The job straight after the matmul, while the cards still hold its heat:
            # behind the node suite (25 s of transfers on a 4x H100) they had cooled
            # 22-24 C and took 50-80 s of training to soak again. The node suite's
            # transfers are not soaked figures; after the job they still follow a load.
            if job is not None:
                ran = job.after_matmul() if heated else job
                job_results, failures = _job_suite(ran, gpus, live, progress)
                errors += failures + _job_rerun(ran, job_results, gpus, progress)
            if node is not None:
                node_results, failures = _node_suite(node, gpus, live, progress, started)
                errors += failures
                set_copy_shares(job_results, node_results)
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
    if nvml is None and bench is not None:
        if bench.device == "cpu":
            benchmarks, failures = _benchmark(bench, [], None, progress)
            errors += failures
        else:
            errors.append({"stage": "benchmark", "message": "no NVIDIA GPU: nothing to benchmark"})
    if nvml is None and node is not None:
        if node.device == "cpu":
            node_results, failures = _node_suite(node, [], None, progress, started)
            errors += failures
        elif bench is None:  # with the matmul, its own line has said there is no GPU
            errors.append({"stage": "node", "message": "no NVIDIA GPU: no node to measure"})
    if nvml is None and job is not None:
        if job.device == "cpu":
            job_results, failures = _job_suite(job, [], None, progress)
            errors += failures + _job_rerun(job, job_results, [], progress)
        elif bench is None and node is None:
            errors.append({"stage": "job", "message": "no NVIDIA GPU: no job to run"})
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
        "benchmarks": benchmarks,
        "errors": errors,
        "node": node_results,
        "jobs": job_results,
        # What the run measured under, with where each came from (agent/source/settings.py).
        "settings": run_settings.collect(os.environ),
    }

"""Running the agent on this machine, as a child process, and reading back its document.

The agent runs exactly as it will on a remote host, so the controller never loads NVML
or torch itself and every answer passes the same validation.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agent.matmul.harness import DEFAULT_DTYPE, DEFAULT_SIZE
from agent.timing import soak
from fleet.errors import AgentError, InputError
from fleet.events import ProgressHandler, read_events
from fleet.model.document import AgentDocument
from fleet.payload import build_payload, write_payload
from fleet.transport.local import fleet_has_torch, machine_environment

FINGERPRINT_TIMEOUT_S = 300.0
# A quick (cool-start) run takes under 20 s a GPU; the budget leaves room for set-up.
QUICK_TIMEOUT_PER_GPU_S = 120.0
# Beyond the soak's cap, span and measurement: the agent's start, every GPU's inputs and
# correctness gate, and the untimed tail while the node's last GPU measures.
SOAK_MARGIN_S = 90.0
SOAK_MARGIN_PER_GPU_S = 30.0
# The node suite's budget is 20 s for one GPU and 45 s for eight (issue #32); the timeout
# leaves room for a slow host, and for the all-reduce's own 120-s guard (agent/node/suite.py)
# to fire first.
NODE_SUITE_S = 150.0
NODE_SUITE_PER_GPU_S = 10.0
# The job suite beyond its soak (which takes the matmul's cap, `--soak-cap-s`, and a
# span's wait for the node's last GPU): gates, set-up and 6 + 3 + 4 s measured took
# 23-27 s on lent H100s (bench/records/2026-11-27-h100x4-jobs-warm); the margin is a
# slow host's. After the matmul the whole stage took 54-61 s on lent H100s (soaked at
# 31-37 s), alone from idle 77-108 s.
JOB_SUITE_BEYOND_SOAK_S = 60.0
JOB_SUITE_MARGIN_S = 90.0
# The compiled training step (--job-compile): one GPU's torch.compile at
# a time (Dynamo serialises them), each a layer's graph and the loss's; compiling the
# whole 4-layer stack took 22.7 s on a lent H100 (suite 1.0), a layer's is less, and a
# second run loads it from the host's cache. The allowance is a cold compile on a slow host.
JOB_COMPILE_PER_GPU_S = 45.0
SUITES = ("all", "gemm", "node", "job", "storage")
# The storage suite (agent/storage/suite.py): its budget, 30 s a node by default (issue
# 58), and a margin for a checkpoint's load and the folder's removal past it.
STORAGE_SUITE_S = 30.0
STORAGE_MARGIN_S = 30.0


@dataclass(frozen=True)
class BenchOptions:
    """The harness's choices, as `fleet bench` and inventories give them."""

    dtype: str = DEFAULT_DTYPE
    m: int = DEFAULT_SIZE
    n: int = DEFAULT_SIZE
    k: int = DEFAULT_SIZE
    pause_ms: float | None = None  # burst mode when set
    # The cool-start protocol (--quick), instead of the soaked default.
    quick: bool = False
    soak_cap_s: float | None = None  # None: the harness's own (agent/timing/soak.py)
    warm_l2: bool = False
    sequential: bool = False
    gpus: tuple[int, ...] | None = None
    flush_always: bool = False
    # None: the harness's own default (agent/matmul/harness.py), so the agent run alone and the
    # agent run by fleet measure alike.
    measure_s: float | None = None
    max_warmup_s: float | None = None
    max_total_s: float | None = None
    lock_clocks_mhz: int | None = None
    cpu: bool = False
    # "all": the matmul, then the job suite (a training step and decode), then the node
    # suite (memory, host links, GPU pairs, all-reduce), then storage; "gemm": the matmul
    # alone (--gemm-only); "node", "job", "storage": that suite alone.
    suite: str = "all"
    # The job suite's training step compiled too, beside eager.
    job_compile: bool = False

    def agent_args(self) -> list[str]:
        """The agent's command-line options for this benchmark."""
        args = ["--dtype", self.dtype, "-m", str(self.m), "-n", str(self.n), "-k", str(self.k)]
        if self.suite != "all":
            args += ["--suite", self.suite]
        if self.job_compile:
            args.append("--job-compile")
        for flag, value in (("--measure-s", self.measure_s),
                            ("--max-warmup-s", self.max_warmup_s),
                            ("--max-total-s", self.max_total_s)):
            if value is not None:
                args += [flag, str(value)]
        if self.pause_ms is not None:
            args += ["--pause-ms", str(self.pause_ms)]
        if self.quick:
            args.append("--quick")
        if self.soak_cap_s is not None:
            args += ["--soak-cap-s", str(self.soak_cap_s)]
        if self.warm_l2:
            args.append("--warm-l2")
        if self.flush_always:
            args.append("--flush-always")
        if self.sequential:
            args.append("--sequential")
        if self.gpus:
            args += ["--gpus", ",".join(str(g) for g in self.gpus)]
        if self.lock_clocks_mhz is not None:
            args += ["--lock-clocks", str(self.lock_clocks_mhz)]
        if self.cpu:
            args.append("--cpu")
        return args


    @property
    def soaked(self) -> bool:
        """Whether the GPUs are soaked before measuring (not --quick, no pause)."""
        return not self.quick and self.pause_ms is None

    def timeout_s(self, gpus: int) -> float:
        """How long the benchmark may take on a host of `gpus` GPUs, beyond fingerprinting:
        a soak loads every GPU of the node at once, so it costs one soak a node (one a
        GPU with --sequential), where a quick run costs its seconds a GPU; the node suite
        and the job suite add their own (NODE_SUITE_S, NODE_SUITE_PER_GPU_S, and the job's
        soak with JOB_SUITE_BEYOND_SOAK_S)."""
        # The job suite runs the node's GPUs together, or one after another (--sequential).
        turns = gpus if self.sequential else 1
        storage = STORAGE_SUITE_S + STORAGE_MARGIN_S
        if self.suite == "storage":
            return storage
        if self.suite == "job":
            return self._job_timeout_s(gpus) * turns
        node = NODE_SUITE_S + NODE_SUITE_PER_GPU_S * gpus
        if self.suite == "node":
            return node
        if self.suite == "gemm":
            return self._gemm_timeout_s(gpus)
        return (node + self._job_timeout_s(gpus) * turns + self._gemm_timeout_s(gpus)
                + storage)

    def _job_timeout_s(self, gpus: int) -> float:
        """One turn of the job suite: its soak to the matmul's cap, after the matmul or
        from idle alike, a span's wait for the last GPU, the compiles, and the rest."""
        cap = self.soak_cap_s if self.soak_cap_s is not None else soak.CAP_S
        compiles = 0.0 if not self.job_compile or self.cpu else JOB_COMPILE_PER_GPU_S * (
            1 if self.sequential else gpus)
        return cap + soak.SPAN_S + JOB_SUITE_BEYOND_SOAK_S + JOB_SUITE_MARGIN_S + compiles

    def _gemm_timeout_s(self, gpus: int) -> float:
        if not self.soaked:
            return QUICK_TIMEOUT_PER_GPU_S * gpus
        cap = self.soak_cap_s if self.soak_cap_s is not None else soak.CAP_S
        measure = self.measure_s if self.measure_s is not None else soak.MEASURE_S
        node = cap + soak.SPAN_S + 2 * measure + SOAK_MARGIN_S
        if self.sequential:
            return (node + SOAK_MARGIN_PER_GPU_S) * gpus
        return node + SOAK_MARGIN_PER_GPU_S * gpus


def agent_python() -> tuple[str | None, dict[str, str]]:
    """This machine's Python for the agent, as `transport: local` picks it: None for
    fleet's own (it has torch, or no other python3 is found), else the machine's python3,
    with the environment to run it in."""
    keep_own = fleet_has_torch()
    env = machine_environment(os.environ, sys.prefix, keep_own=keep_own)
    return (None if keep_own else shutil.which("python3", path=env.get("PATH"))), env


def run_agent(
    args: list[str], origin: str, timeout_s: float, on_progress: ProgressHandler | None = None
) -> AgentDocument:
    """Run the agent on this machine with `args`; its document, or AgentError naming `origin`."""
    python, env = agent_python()
    with tempfile.TemporaryDirectory(prefix="fleet-agent-") as tmp:
        if python is None:
            command = [sys.executable, "-m", "agent", *args]
            # The agent package sits beside fleet, in the checkout or the installed
            # distribution.
            here = str(Path(__file__).resolve().parent.parent)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        else:
            # The packed agent, as a probe runs it: fleet's own packages, built for its
            # Python, stay out of the other's path.
            command = [python, str(write_payload(build_payload(), Path(tmp))), *args]
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, env=env,
                check=False)
        except subprocess.TimeoutExpired:
            raise AgentError(f"{origin}: the agent did not finish in {timeout_s:.0f} s"
                             ) from None
    if proc.returncode == 2:
        raise InputError(proc.stderr.strip().removeprefix("fleet-agent: "))
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-5:]
        raise AgentError(
            f"{origin}: the agent exited with status {proc.returncode}: " + " | ".join(tail)
        )
    return read_events(proc.stdout.splitlines(), origin, on_progress)


def _source_args(source: Path | None) -> list[str]:
    if source is None:
        return []
    if not source.is_file():
        raise InputError(
            f"{source}: no such file. Give an NVML recording (nvml-recording/1 JSON), "
            "`nvidia-smi -q` text or `nvidia-smi -q -x` XML."
        )
    return ["--source", str(source)]


def fingerprint(
    source: Path | None = None,
    probe_writes: bool = False,
    record: Path | None = None,
    probe_torch: bool = True,
    on_progress: ProgressHandler | None = None,
) -> AgentDocument:
    """Fingerprint this machine's GPUs, or those of a recording or nvidia-smi file."""
    args = ["fingerprint", *_source_args(source)]
    if record is not None:
        args += ["--record", str(record)]
    if probe_writes:
        args.append("--probe-writes")
    if not probe_torch:
        args.append("--no-torch")
    origin = str(source) if source is not None else "this machine"
    return run_agent(args, origin, FINGERPRINT_TIMEOUT_S, on_progress)


def bench(options: BenchOptions, on_progress: ProgressHandler | None = None) -> AgentDocument:
    """Fingerprint this machine, then run the standard harness on its GPUs."""
    timeout = FINGERPRINT_TIMEOUT_S + options.timeout_s(8)
    return run_agent(["bench", *options.agent_args()], "this machine", timeout, on_progress)

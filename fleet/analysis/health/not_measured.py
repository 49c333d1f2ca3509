"""What a run could not measure, and whose that is (issue 54): every error an agent
document carries, judged from the document itself, so that a GPU whose stage failed is
said wherever its figures would have been (ingest's line, the probe's summary, the report,
`fleet results`, the metrics) and a count of GPUs measured never hides it.

The rule, and what it reads:

- **Out of memory on a GPU** (the CUDA allocator's words: "out of memory",
  OutOfMemoryError, CUDA_ERROR_OUT_OF_MEMORY) is judged by what held the GPU's memory
  when the run began, as the fingerprint read it from NVML
  (nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetMemoryInfo) and /proc:
  - memory held by a process the run could see (NVML listed it and /proc showed that
    pid holding an NVIDIA device): **the renter's** to free, the process named with how
    much it held; one the agent could not look at (a recording, an older agent, another
    user's open files): **not settled**, named;
  - memory in use beyond the driver's own (`RESERVED_MIB`) with no process the run could
    see: **the provider's** to explain (another tenant's context, a host process);
  - neither: **not settled** (the suite's own need, or memory taken after the
    fingerprint): said with the figures, to probe again.
- **No NVIDIA GPU**, and a rerun that could not run (its figure stands, judged unsettled
  by the figure's own rule): information, listed but not a finding.
- **torch not importable** by the host's Python: the renter's (the agent says which
  Python and how to give it torch).
- **Any other stage that failed**: not settled, with the agent's own words.

Judged where it is read, from the error and its GPU's memory as fingerprinted (the store
keeps both: `host_error`, and `fingerprint.memory_used_mib` and `processes`, revision
0023), so that a better rule judges stored documents again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fleet.model.document import AgentDocument, GpuProcess
from fleet.sanitize import safe

Party = Literal["provider", "renter", "unsettled", "none"]
RULE = "fleet/analysis/health/not_measured.py"
# The driver's own at idle, no process on the card: 480 MiB on lent H100 SXM5s, 615 MiB
# on H200 SXMs, 11 MiB on MIG slices (tests/fixtures/gpus' recordings). Past this, memory
# in use with no process listed is someone's.
RESERVED_MIB = 2048
OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|"
                           r"cudaErrorMemoryAllocation", re.IGNORECASE)
NO_GPU = "no NVIDIA GPU"
NO_TORCH = re.compile(r"^torch is not importable")
RERUN = re.compile(r" again without the run's settings")
# The first line of an error, as a cause: a traceback's last line says what happened.
MAX_CAUSE = 400


@dataclass(frozen=True)
class NotMeasured:
    """One error of a document: what could not be measured, why, whose it is and what to
    do, and the rule with the facts it read (`source`)."""

    stage: str
    gpu_index: int | None
    message: str
    party: Party
    cause: str
    action: str
    source: str

    @property
    def what(self) -> str:
        """"GPU 2 job", "node": the stage, and the GPU where it was one GPU's."""
        return self.stage if self.gpu_index is None else f"GPU {self.gpu_index} {self.stage}"

    @property
    def finding(self) -> bool:
        """Whether it is a finding (counted, `--fail-on not_measured`), not information."""
        return self.party != "none"

    def line(self) -> str:
        """One line for a terminal: what, cause, whose. The cause carries a host's words
        (its error, a process's name and user): control characters made visible."""
        return safe(f"{self.what}: {self.cause} ({PARTY_WORDS[self.party]})")


PARTY_WORDS: dict[str, str] = {"provider": "the provider's to explain",
                               "renter": "yours to fix", "unsettled": "not settled",
                               "none": "information"}


@dataclass(frozen=True)
class Held:
    """A process NVML listed on a GPU when the run began, with what /proc said of it."""

    pid: int | None  # None: withheld (an anonymized report)
    used_mib: int | None
    visible: bool | None = None  # None: not looked (a recording, an older agent)
    name: str | None = None
    user: str | None = None

    @classmethod
    def of(cls, process: GpuProcess) -> Held:
        return cls(process.pid, process.used_memory_mib, process.visible, process.name,
                   process.user)

    def __str__(self) -> str:
        words = [w for w in (self.name, None if self.user is None else f"user {self.user}")
                 if w]
        said = "a process" if self.pid is None else f"pid {self.pid}"
        return said + (f" ({', '.join(words)})" if words else "")


@dataclass(frozen=True)
class GpuMemory:
    """A GPU's memory when the run began, as its fingerprint read it."""

    total_mib: int | None
    used_mib: int | None
    processes: tuple[Held, ...] = ()


def _mib(value: float) -> str:
    return f"{value:,.0f} MiB"


def _out_of_memory(memory: GpuMemory | None, index: int) -> tuple[Party, str, str, str]:
    """(party, cause, action, facts read) of an out-of-memory failure on GPU `index`."""
    if memory is None:
        return ("unsettled", f"out of memory on GPU {index}, whose memory was not "
                "fingerprinted", "probe the host again", "no fingerprint of the GPU")
    total = memory.total_mib
    of = f" of its {_mib(total)}" if total else ""
    # Seen means /proc showed the pid holding a GPU (agent/timing/contention.py); a
    # process not looked at (a recording, an older agent, another user's open files)
    # blames no one.
    held = [p for p in memory.processes if p.used_mib and p.visible is True]
    unseen = [p for p in memory.processes if p.used_mib and p.visible is False]
    unknown = [p for p in memory.processes if p.used_mib and p.visible is None]
    used = memory.used_mib
    source = (f"GPU {index}'s fingerprint: the processes NVML listed, their memory and "
              "whether /proc showed them; memory in use "
              + ("not read" if used is None else _mib(used)))
    if held:
        worst = sorted(held, key=lambda p: -(p.used_mib or 0))
        names = ", ".join(f"{p} held {_mib(p.used_mib or 0)}" for p in worst)
        return ("renter", f"out of memory: {names}{of} when the run began",
                f"free it ({'stop it' if len(held) == 1 else 'stop them'}, or probe when "
                "the GPU is free): a process the run can see is on your side of the "
                "rental", source)
    if unknown:
        names = ", ".join(f"{p} held {_mib(p.used_mib or 0)}" for p in unknown)
        return ("unsettled", f"out of memory: {names}{of} when the run began, a process "
                "the agent could not tell the run's own or not", "see whether you run it "
                "(`nvidia-smi` on the host); if not, ask the provider what it is", source)
    listed = sum(p.used_mib or 0 for p in memory.processes)
    hidden = (used or 0) - listed - RESERVED_MIB
    if unseen or hidden > 0:
        amount = max(sum(p.used_mib or 0 for p in unseen), (used or 0) - RESERVED_MIB)
        pids = ", ".join(str(p) for p in unseen)
        who = f" (NVML listed {pids}, which the run cannot see)" if unseen else ""
        return ("provider", f"out of memory: {_mib(amount)}{of} in use when the run began "
                f"with no process the run can see{who}",
                "ask the provider what holds it (another tenant, a host process, a leaked "
                "context): a GPU rented whole should be free", source)
    free = (f"{_mib(total - used)} free" if total and used is not None
            else "its free memory not read")
    return ("unsettled", f"out of memory with {free} when the run began and no other "
            "process seen", "probe again; if it repeats on an idle GPU, send the document "
            "to fleet's maintainers (the suite's own need)", source)


def judge_failure(stage: str, gpu_index: int | None, message: str,
                  memory: GpuMemory | None = None) -> NotMeasured:
    """What one error of a document says, and whose it is; `memory`: its GPU's, where the
    error is one GPU's and the GPU was fingerprinted."""
    lines = message.strip().splitlines() or [""]
    cause = lines[-1 if lines[0].startswith("Traceback") else 0].strip()[:MAX_CAUSE] or stage
    if gpu_index is not None and OUT_OF_MEMORY.search(message):
        party, cause, action, source = _out_of_memory(memory, gpu_index)
        return NotMeasured(stage, gpu_index, message, party, cause, action,
                           f"{RULE} (out of memory): {source}")
    if message.startswith(NO_GPU):
        return NotMeasured(stage, gpu_index, message, "none", cause,
                           "probe a host with NVIDIA GPUs to measure them",
                           f"{RULE}: the agent found no GPU")
    if RERUN.search(message):
        return NotMeasured(stage, gpu_index, message, "none", cause,
                           "the figure stands as first measured, not settled by a rerun",
                           f"{RULE}: a rerun's failure; the figure's own rule judges it")
    if NO_TORCH.search(message):
        return NotMeasured(stage, gpu_index, message, "renter", cause,
                           "give that Python torch, or leave `runtime:` at pinned so that "
                           "fleet installs its own", f"{RULE}: the agent's words")
    return NotMeasured(stage, gpu_index, message, "unsettled", cause,
                       "probe the host again; if it repeats, the error is the evidence to "
                       "send", f"{RULE}: the agent's words")


def stored_memory(total_mib: int | None, used_mib: int | None,
                  processes: Sequence[Sequence[Any]] | None) -> GpuMemory | None:
    """A GPU's memory as the store keeps it (fleet/store/errors.py); None where the store
    has none of it (a document before revision 0023, a GPU not fingerprinted)."""
    if processes is None and used_mib is None:
        return None
    return GpuMemory(total_mib, used_mib, tuple(
        Held(int(p[0]), p[1], p[2], p[3], p[4]) for p in processes or ()))


def judge_rows(errors: Iterable[Mapping[str, Any]],
               fingerprints: Iterable[Mapping[str, Any]]) -> list[NotMeasured]:
    """The errors of a document as the store writes its rows (fleet/store/ingest.py
    `Prepared`: `errors` and `fingerprints`, processes as JSON text), judged."""
    memory: dict[int, GpuMemory | None] = {}
    for row in fingerprints:
        processes = row.get("processes")
        listed = json.loads(processes) if isinstance(processes, str) else processes
        memory[int(row["gpu_index"])] = stored_memory(row.get("memory_total_mib"),
                                                      row.get("memory_used_mib"), listed)
    return [judge_failure(str(e["stage"]), e["gpu_index"], str(e["message"]),
                          None if e["gpu_index"] is None else memory.get(int(e["gpu_index"])))
            for e in errors]


def judge(document: AgentDocument) -> list[NotMeasured]:
    """Every error `document` carries, judged."""
    memory = {g.index: GpuMemory(g.memory_total_mib, g.memory_used_mib,
                                 tuple(Held.of(p) for p in g.processes))
              for g in document.gpus}
    return [judge_failure(e.stage, e.gpu, e.message, memory.get(e.gpu) if e.gpu is not None
                          else None) for e in document.errors]


def gpus_not_measured(found: Iterable[NotMeasured]) -> list[int]:
    """The GPUs a stage failed on, each once, in order."""
    return sorted({n.gpu_index for n in found if n.gpu_index is not None})

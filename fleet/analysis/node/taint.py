"""One run, one story per GPU (docs/findings.md, "One node, judged on its own"; issue 44,
item 3): what a run learned of a GPU in one figure, that another process was on it, holds
for the run's other figures on that GPU that carry no clean evidence of their own.

The case a user hit: a node suite 1.0.0 document (stored before the agent watched
processes around node figures) whose GPU 3 matmul ran beside another user's pid, while the
same run's pairs 0-3, 1-3, 2-3 at 55% and its all-reduce at 38% went to the provider as
shortfalls. Such figures are the renter's contention with the reason said:

    figures = taint(mark(figures), learned(figures, matmul_words, jobs))

**The run** is one agent document: one host, one probe. **What the run learned** of a
GPU (`learned`) is any figure of that document on that GPU flagged contended:

- its matmul result (the harness checks processes and utilization around every result,
  since harness 1.0: fleet.store.query.contention_words names them per document);
- its memory copy or host copies (a node suite 1.1.0 check, or spread: `mark`);
- its job results (every job suite version checks around each training and decode
  result; fleet.analysis.job.figures.contended_results, matched to the document by host and run).

A pair or the all-reduce flagged contended teaches nothing of one GPU: its check watched
two GPUs or all of them and its words do not say on which one the process was seen.

**Clean evidence of its own**, per figure kind and suite version (`own_check`):

- a matmul result and a job result always have it (their suites have always checked), so
  neither is ever tainted: a job result flagged or not is judged by the job rules
  (fleet/analysis/job/figures.py joins a GPU's job results of a run among themselves);
- a node figure of suite 1.1.0 and later has it when it is not flagged contended after
  `mark`: the agent watched the figure's GPUs (a pair's two, the all-reduce's every rank)
  before and after it and saw nobody else and no busy GPU, and, for the kinds judged by
  their spread (memory copy, pairs, all-reduce), its repeats did not spread beyond
  SPREAD_CV. Host copies have the process check alone (their spread is the host's);
- a node figure of suite 1.0.0 has none: the agent did not look, and its spread is not
  judged (`spread_judged`).

A figure without clean evidence **involves** a GPU when it is that GPU's memory copy or
host copy, a pair with that GPU at either end, or an all-reduce through NCCL (whose ranks
are every GPU the node suite measured, agent/node/suite.py); a gloo all-reduce runs on
the CPU and involves no GPU. Such a figure involving a GPU the run learned was shared is
flagged contended, its `contention` the reason ("measured in a run where GPU 3's matmul
ran beside pid 4242 of user alice (no process check of its own)"), and so goes to the
renter's contention finding and out of every provider comparison (fleet/report/node.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pandas as pd

from fleet.analysis.contention import JOB_UNITS, JOINED, TAINTED, spread_judged
from fleet.analysis.node.figures import optional_int

# A GPU the run learned was shared: (document id, GPU index) -> what showed it, in words
# ("GPU 3's matmul ran beside pid 4242 of user alice").
Learned = dict[tuple[int, int], str]

_PER_GPU_KINDS = ("memory_copy", "host_to_device", "device_to_host")
_NODE_WORDS = {"memory_copy": "memory copy", "host_to_device": "copy to the device",
               "device_to_host": "copy from the device"}
# agent/timing/contention.py's words for a process: "pid 1852 (user nobody, ...)".
_PROCESS = re.compile(r"pid (\d+) \(user ([^,)]+)")
NO_CHECK = " (no process check of its own)"


def own_check(suite_version: str, contended: bool) -> bool:
    """Whether a node figure (after `mark`) carries clean evidence of its own: suite 1.1.0
    or later, which watched every kind's GPUs, and not flagged contended."""
    return spread_judged(suite_version) and not contended


def _beside(words: str | None) -> str:
    """What a figure ran beside, from the agent's words: "beside pid 4242 of user alice",
    "on a busy GPU (GPU utilization 100% ...)", "beside other work" where nothing says."""
    if not words:
        return "beside other work"
    processes = list(dict.fromkeys(_PROCESS.findall(words)))
    if processes:
        return "beside " + " and ".join(f"pid {pid} of user {user}" for pid, user in processes)
    first = words.split("; ")[0]
    if first.startswith("GPU utilization"):
        return f"on a busy GPU ({first})"
    return f"beside other work ({first})"


def learned(figures: pd.DataFrame, matmul: Mapping[tuple[int, int], str | None],
            jobs: pd.DataFrame | None = None, runs: Mapping[int, int] | None = None
            ) -> Learned:
    """What each run (document) learned of its GPUs: `figures`
    (fleet.analysis.node.figures.prepare's frame after `mark`), `matmul` ((document, GPU) ->
    the stored words of a contended matmul result of that document, None where none were
    stored or the report hides them) and `jobs` (contended job rows,
    fleet.analysis.job.figures.contended_results; matched to a document by provider, host
    and `runs`, document id -> its run). The matmul's words are preferred, then a node
    figure's, then a job's."""
    found: Learned = {}
    for (document, gpu), words in sorted(matmul.items()):
        found.setdefault((int(document), int(gpu)),
                         f"GPU {gpu}'s matmul ran {_beside(words)}")
    if not figures.empty:
        busy = figures[figures["contended"] & figures["kind"].isin(_PER_GPU_KINDS)]
        for document, kind, gpu, words in zip(*(busy[c].tolist() for c in (
                "document_id", "kind", "gpu_index", "contention")), strict=True):
            found.setdefault((int(document), int(gpu)),
                             f"GPU {gpu}'s {_NODE_WORDS[str(kind)]} ran "
                             f"{_beside(words if isinstance(words, str) else None)}")
    if jobs is not None and not jobs.empty and runs and not figures.empty:
        hosts = figures.groupby("document_id")[["provider", "host"]].first()
        documents = {(str(p), str(h), int(runs[int(d)])): int(d)
                     for d, p, h in zip(hosts.index.tolist(), hosts["provider"].tolist(),
                                        hosts["host"].tolist(), strict=True)
                     if int(d) in runs}
        # A row joined to its GPU's flagged results says so, not what was seen: the
        # flagged rows' words come first.
        ordered = jobs.assign(_joined=jobs["contention"].astype(object).eq(JOINED)
                              ).sort_values("_joined", kind="stable")
        for provider, host, run, gpu, workload, words in zip(*(ordered[c].tolist() for c in (
                "provider", "host", "run_id", "gpu_index", "workload", "contention")),
                strict=True):
            owner = documents.get((str(provider), str(host), int(run)))
            if owner is None:
                continue
            text = words if isinstance(words, str) and words != JOINED else None
            found.setdefault((owner, int(gpu)),
                             f"GPU {gpu}'s {JOB_UNITS.get(str(workload), str(workload))} "
                             f"ran {_beside(text)}")
    return found


def _involved(kind: str, gpu: object, peer: object, backend: str,
              measured: set[int]) -> set[int]:
    """The GPUs a node figure ran on; `measured` are every GPU its document's suite
    measured (an NCCL all-reduce's ranks)."""
    if kind == "allreduce":
        return set(measured) if backend == "nccl" else set()
    return {optional for g in (gpu, peer) if (optional := optional_int(g)) is not None}


def taint(figures: pd.DataFrame, seen: Learned) -> pd.DataFrame:
    """`figures` (after `mark`) with each figure that has no clean evidence of its own and
    involves a GPU in `seen` of its document flagged contended, its `contention` the
    reason. Figures with their own check keep their own story."""
    if figures.empty or not seen:
        return figures
    documents = {d for d, _ in seen}
    measured: dict[int, set[int]] = {}
    for document, gpu, peer in zip(*(figures[c].tolist() for c in (
            "document_id", "gpu_index", "peer_index")), strict=True):
        measured.setdefault(int(document), set()).update(
            _involved("memory_copy", gpu, peer, "", set()))
    reasons: list[str | None] = []
    for document, kind, gpu, peer, backend, suite, contended in zip(*(
            figures[c].tolist() for c in ("document_id", "kind", "gpu_index", "peer_index",
                                          "backend", "suite_version", "contended")),
            strict=True):
        document = int(document)
        if (document not in documents
                or own_check(str(suite), bool(contended)) or contended):
            reasons.append(None)
            continue
        shown = [seen[(document, g)] for g in sorted(_involved(
            str(kind), gpu, peer, str(backend), measured.get(document, set())))
            if (document, g) in seen]
        reasons.append(None if not shown else
                       f"{TAINTED}{' and '.join(shown)}{NO_CHECK}")
    hit = pd.Series([r is not None for r in reasons], index=figures.index, dtype=bool)
    if not hit.any():
        return figures
    out = figures.copy()
    out["contention"] = pd.Series(
        [reason if reason is not None else held
         for reason, held in zip(reasons, out["contention"].tolist(), strict=True)],
        index=out.index, dtype=object)
    out["contended"] = out["contended"] | hit
    return out

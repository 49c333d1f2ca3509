"""How often the job suite's shortfall rule (fleet/analysis/job/figures.py, `find_job_shortfalls`:
a GPU whose training step falls more than 3 points further below its crowd than its
matmul does) calls a healthy lent node, whether it names a GPU that really ran slow, and
that a GPU shared with another process goes to the renter (the contention finding,
fleet/analysis/contention.py) instead, on the records of a lent 4x H100 SXM5 node
(bench/records/2026-11-26-h100x4-jobs).

**The pairing.** The rule sets each job result beside the soaked matmul of the same GPU
in the same run. Only all-1 (`--suite all`) measured the matmul, and its own job results
are not soaked (an earlier soak cap: the rule leaves them out, as it should); all-2..5
and contended (`--suite job`) measured the jobs alone, on the same node in the same
session, minutes later. So each judged document is all-1's document (its matmul, node
suite, GPUs, host) with its `jobs` replaced by the job-only run's and its `collected_at`
the job-only run's: all-1's matmul stands in as "the same run's" for every job-only run.

Each document goes through fleet's own path: validated by fleet.model.document's parser,
stored into a new temporary SQLite store (fleet.store.ingest), and judged alone, as a
buyer's one-node probe is, by the report (fleet.report.build_report: the job section's
`read_jobs`/`job_section`, the node section's contention finding). What is judged:

- **false flags**: all-2..5 and contended (whose GPU 2 the report leaves out, flagged
  contended) as measured; every job_shortfall finding on them is a false flag. A
  judgement is one GPU under one training configuration (attention backend) with a
  matmul figure, among at least the rule's minimum of GPUs. The margins printed beside
  are the largest (matmul share - job share) and the lowest job share of any judgement;
- **hits, sighting hidden**: the contended run, GPU 2's fault made for real (another
  user's matmuls at about 30% duty: its training 23% slower, its decode 18%), with the
  agent's sighting of it removed from some of GPU 2's results (`flags.contended` false,
  `contention` and `processes` emptied), as if the other process were invisible to the
  agent (another container's): all three results, the training step only, each backend
  only, the decode only. What the job section names is printed: shortfalls (with their
  cause) and job stragglers; and the contention finding, for results still seen;
- **as recorded**: the contended run as measured: GPU 2 must be left out of the job
  figures, raise no job finding, and be named by the node's contention finding.

    python bench/job_flags.py [--out FILE]
    python bench/job_flags.py --out bench/records/2026-11-26-h100x4-jobs/flags.json
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import sys
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleet.analysis.contention import Contention  # noqa: E402
from fleet.analysis.job.compare import JobStraggler  # noqa: E402
from fleet.analysis.job.figures import (  # noqa: E402
    JobExcluded,
    JobGpu,
    JobShortfall,
    JobShortfallOptions,
    JobStanding,
    job_standings,
)
from fleet.findings.finding import Finding  # noqa: E402
from fleet.model.document import parse_document  # noqa: E402
from fleet.report import ReportOptions, build_report  # noqa: E402
from fleet.store.database import open_engine, resolve  # noqa: E402
from fleet.store.ingest import Ingest, Origin, RunInfo  # noqa: E402
from fleet.store.schema import upgrade  # noqa: E402

RECORDS = REPO / "bench" / "records" / "2026-11-26-h100x4-jobs"
MATMUL_RUN = "all-1"  # the soaked matmul every job-only run is paired with
HEALTHY = ("all-2", "all-3", "all-4", "all-5")
CONTENDED = "contended"
BUSY_GPU = 2  # the GPU the other user's process ran on in CONTENDED
PROVIDER, HOST = "lent", "h100x4"
# Which of the busy GPU's results lose their sighting: (workload, attention) pairs.
HIDDEN: dict[str, frozenset[tuple[str, str]]] = {
    "all": frozenset({("train", "flash"), ("train", "cudnn"), ("decode", "flash")}),
    "training": frozenset({("train", "flash"), ("train", "cudnn")}),
    "train flash": frozenset({("train", "flash")}),
    "train cudnn": frozenset({("train", "cudnn")}),
    "decode": frozenset({("decode", "flash")}),
}


def document(name: str, records: Path = RECORDS) -> dict[str, Any]:
    """The fleet-agent/1 document of `name`.jsonl.gz: its last line's."""
    with gzip.open(records / f"{name}.jsonl.gz", "rt") as lines:
        events = [json.loads(line) for line in lines if line.strip()]
    last = events[-1]
    if last.get("event") != "document":
        raise ValueError(f"{name}: the last line is no document")
    found: dict[str, Any] = last["document"]
    return found


def paired(jobs: dict[str, Any], matmul: dict[str, Any]) -> dict[str, Any]:
    """`matmul`'s document with `jobs`' job results and collection time (the pairing of
    the module docstring)."""
    out = copy.deepcopy(matmul)
    out["jobs"] = copy.deepcopy(jobs["jobs"])
    out["collected_at"] = jobs["collected_at"]
    return out


def hidden(data: dict[str, Any], gpu: int, which: Collection[tuple[str, str]]
           ) -> dict[str, Any]:
    """`data` with GPU `gpu`'s job results of `which` (workload, attention) as if the
    agent had not seen the other process: not flagged contended, no words, no process."""
    out = copy.deepcopy(data)
    for result in out["jobs"]:
        if result["gpu_index"] == gpu and (result["workload"], result["attention"]) in which:
            result["flags"]["contended"] = False
            result["contention"] = []
            result["processes"] = []
    return out


@dataclass(frozen=True)
class Judged:
    """What the report says of one document judged alone."""

    name: str
    gpus: tuple[JobGpu, ...]
    shortfalls: tuple[JobShortfall, ...]
    stragglers: tuple[JobStraggler, ...]
    excluded: tuple[JobExcluded, ...]
    contention: tuple[Contention, ...]
    dispute: tuple[Finding, ...]
    renter: tuple[Finding, ...]


def judge(data: dict[str, Any], name: str) -> Judged:
    """`data` validated, stored alone into a new SQLite store, and reported."""
    parsed = parse_document(data, name)
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_engine(resolve(f"sqlite:///{Path(tmp) / 'fleet.db'}"))
        try:
            upgrade(engine)
            with Ingest(engine, RunInfo(kind="probe")) as ingest:
                ingest.store(parsed, Origin(PROVIDER, HOST))
            report = build_report(engine, ReportOptions(), "job_flags")
        finally:
            engine.dispose()
    job = report.job
    return Judged(name, job.gpus, job.shortfalls, job.stragglers, job.excluded,
                  report.node.contention, report.dispute, report.renter)


def judgements(gpus: Collection[JobGpu], options: JobShortfallOptions | None = None
               ) -> list[JobStanding]:
    """Every GPU the rule judges, as the rule sees it (fleet.analysis.job.figures.job_standings),
    by backend then GPU."""
    return sorted(job_standings(list(gpus), options),
                  key=lambda j: (j.gpu.config.attention, j.gpu.gpu_index))


def false_flags(records: Path = RECORDS) -> list[tuple[Judged, list[JobStanding]]]:
    """Each healthy run (and the contended one, as measured) paired and judged alone."""
    matmul = document(MATMUL_RUN, records)
    out = []
    for name in (*HEALTHY, CONTENDED):
        judged = judge(paired(document(name, records), matmul), name)
        out.append((judged, judgements(judged.gpus)))
    return out


def hits(records: Path = RECORDS) -> dict[str, Judged]:
    """The contended run with the busy GPU's sighting hidden from each set of HIDDEN."""
    data = paired(document(CONTENDED, records), document(MATMUL_RUN, records))
    return {case: judge(hidden(data, BUSY_GPU, which), f"{CONTENDED} ({case} hidden)")
            for case, which in HIDDEN.items()}


def as_recorded(records: Path = RECORDS) -> Judged:
    """The contended run as measured."""
    data = paired(document(CONTENDED, records), document(MATMUL_RUN, records))
    return judge(data, CONTENDED)


def _shortfall(s: JobShortfall) -> dict[str, Any]:
    return {"gpu_index": s.gpu_index, "attention": s.config.attention,
            "job_share": round(s.job_share, 4), "matmul_share": round(s.matmul_share, 4),
            "points": round((s.matmul_share - s.job_share) * 100, 2),
            "sigmas_below": round((s.others_standing - s.standing) / s.sigma, 1),
            "cause": s.cause, "cause_words": s.cause_words,
            "temperature_c": s.temperature_c, "median_temperature_c": s.median_temperature_c,
            "sm_clock_mhz": s.sm_clock_mhz, "median_sm_clock_mhz": s.median_sm_clock_mhz,
            "decode_share": None if s.decode_share is None else round(s.decode_share, 4),
            "title": s.title, "evidence": s.evidence}


def _straggler(s: JobStraggler) -> dict[str, Any]:
    return {"gpu_index": s.gpu_index, "workload": s.config.workload,
            "attention": s.config.attention, "deficit": round(s.deficit, 4)}


def _contention(c: Contention) -> dict[str, Any]:
    return {"host": c.host, "units": list(c.units), "seen": list(c.seen), "own": c.own,
            "cause": c.cause, "title": c.title}


def _named(judged: Judged) -> dict[str, Any]:
    return {"shortfalls": [_shortfall(s) for s in judged.shortfalls],
            "job_stragglers": [_straggler(s) for s in judged.stragglers],
            "contention": [_contention(c) for c in judged.contention],
            "busy_gpu_in_figures": sorted({f"{g.config.workload} {g.config.attention}"
                                           for g in judged.gpus if g.gpu_index == BUSY_GPU}),
            "dispute": [f"{f.kind}: {f.title}" for f in judged.dispute],
            "renter": [f"{f.kind}: {f.title}" for f in judged.renter]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    options = JobShortfallOptions()
    print(f"{args.records.name}: job runs paired with {MATMUL_RUN}'s soaked matmul; rule: "
          f"> {options.points * 100:g} points, job share <= {1 - options.points:.0%}, "
          f"> {options.sigmas:g} robust sd, >= {options.min_gpus} GPUs")
    base = judge(document(MATMUL_RUN, args.records), MATMUL_RUN)
    print(f"{MATMUL_RUN} as recorded: {len(judgements(base.gpus))} judgements, "
          f"{sum(e.results for e in base.excluded)} job results left out "
          f"({', '.join(sorted({e.reason.split(':')[0] for e in base.excluded}))})")

    healthy: dict[str, Any] = {}
    total = flagged = 0
    every: list[JobStanding] = []
    for judged, judged_gpus in false_flags(args.records):
        total += len(judged_gpus)
        flagged += len(judged.shortfalls)
        every += judged_gpus
        worst = max(judged_gpus, key=lambda j: j.points)
        healthy[judged.name] = {
            "judgements": len(judged_gpus), "flagged": len(judged.shortfalls),
            "gpus": sorted({j.gpu.gpu_index for j in judged_gpus}),
            "max_points": round(worst.points, 2),
            "min_job_share": round(min(j.job_share for j in judged_gpus), 4),
            "max_sigmas_below": round(max(j.sigmas_below for j in judged_gpus), 1),
            **_named(judged)}
        print(f"  {judged.name:10} {len(judged_gpus):2} judgements (GPUs "
              f"{','.join(map(str, healthy[judged.name]['gpus']))}), "
              f"{len(judged.shortfalls)} flagged; widest: GPU {worst.gpu.gpu_index} "
              f"{worst.gpu.config.attention} {worst.points:+.2f} points; other findings: "
              f"{len(judged.dispute) - len(judged.shortfalls)} dispute, "
              f"{len(judged.renter)} renter")
    print(f"false flags: {flagged} of {total} GPU judgements; largest matmul-job gap "
          f"{max(j.points for j in every):+.2f} points, lowest job share "
          f"{min(j.job_share for j in every):.1%}, most robust sd below "
          f"{max(j.sigmas_below for j in every):.1f}")

    found: dict[str, Any] = {}
    print(f"hits: {CONTENDED}, GPU {BUSY_GPU}'s sighting hidden from:")
    for case, judged in hits(args.records).items():
        found[case] = _named(judged)
        named = [f"{s.config.attention} ({s.cause}, job {s.job_share:.1%} vs matmul "
                 f"{s.matmul_share:.1%})" for s in judged.shortfalls
                 if s.gpu_index == BUSY_GPU]
        slow = [f"{s.config.workload} {s.config.attention} ({s.deficit:.0%} below)"
                for s in judged.stragglers if s.gpu_index == BUSY_GPU]
        units = [u for c in judged.contention for u in c.units]
        others = [s for s in judged.shortfalls if s.gpu_index != BUSY_GPU]
        print(f"  {case:12} job_shortfall: {'; '.join(named) or 'none'}; job straggler: "
              f"{'; '.join(slow) or 'none'}; contention: {', '.join(units) or 'none'}"
              + (f"; {len(others)} shortfall(s) on other GPUs" if others else ""))

    recorded = as_recorded(args.records)
    in_figures = [g for g in recorded.gpus if g.gpu_index == BUSY_GPU]
    busy_left_out = [e for e in recorded.excluded if e.gpu_index == BUSY_GPU]
    print(f"as recorded: GPU {BUSY_GPU} in job figures: {len(in_figures)}; left out: "
          f"{sum(e.results for e in busy_left_out)} results; job_shortfall findings: "
          f"{len(recorded.shortfalls)}; contention: "
          + ("; ".join(f"{c.title} ({c.cause})" for c in recorded.contention) or "none"))

    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "records": args.records.name, "matmul_run": MATMUL_RUN,
            "pairing": "each job-only run's jobs and collected_at in all-1's document",
            "rule": {"points": options.points, "sigmas": options.sigmas,
                     "sigma_floor": options.sigma_floor, "min_gpus": options.min_gpus},
            "all_1_as_recorded": {"judgements": len(judgements(base.gpus)),
                                  "left_out_results": sum(e.results for e in base.excluded)},
            "false_flags": {"judgements": total, "flagged": flagged, "runs": healthy},
            "hits": {"busy_gpu": BUSY_GPU, "hidden_from": {
                case: sorted(f"{w} {a}" for w, a in which)
                for case, which in HIDDEN.items()}, "cases": found},
            "as_recorded": {"busy_gpu_results_left_out": sum(e.results
                                                             for e in busy_left_out),
                            **_named(recorded)},
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()

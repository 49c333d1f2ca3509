"""`fleet sweep`: a named probe run, compared with its own history, made to run unwatched.

One sweep of a name at a time per store (`fleet.sweep.lock`). The run is created before any
host is probed and finished only when the sweep got to its end with every host settled
on a machine that could reach it, so a sweep that crashed, was killed, or had hosts no
Celery worker took can be continued (`--resume`): only the hosts with no stored document
in that run are probed. Hosts are probed by this controller's bounded fan-out
(`fleet.probe.run`), or by Celery workers (`--via celery`, `fleet.sweep.distributed`).
The summary is built from the store for every host of the inventory either way, then the
night is compared with the sweep's earlier nights (`fleet.analysis.sweep.history`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine

from agent import __version__ as agent_version
from fleet.analysis.listing.expectation import check_expectation
from fleet.analysis.sweep.history import FAIL_KINDS, Findings, RegressionRule, compare_night
from fleet.analysis.sweep.nights import HISTORY_NIGHTS, read_nights
from fleet.cluster.between import BetweenOptions
from fleet.cluster.measure import ClusterOutcome, Connecting, measure_clusters
from fleet.errors import FleetError, InputError
from fleet.findings.kinds import FINDING_KINDS
from fleet.inventory import LoadedInventory, Target
from fleet.payload import build_payload
from fleet.probe.run import HostOutcome, Observer, ProbeOptions, ProbeReport, listing_of, probe
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.schema import Store, open_store
from fleet.store.sweeps import (
    SettledHost,
    create_run,
    end_run,
    finish_run,
    load_documents,
    newest_run,
    settled_hosts,
)
from fleet.sweep.distributed import DEFAULT_QUEUE_TIMEOUT_S, RemoteOutcome, require_postgres
from fleet.sweep.lock import SweepLock
from fleet.writable import writable_file

DEFAULT_NAME = "nightly"
# Also a lock file's, a crontab marker's and a systemd unit's name: no spaces or slashes.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$")
# Stages at which a host failed for want of a machine that could reach it, not on the
# host: the run stays open for `--resume`.
UNREACHED = ("queue", "worker", "refused")
Via = Literal["local", "celery"]


def check_name(name: str) -> str:
    """The one rule for a sweep's name (`fleet sweep --name`, `fleet schedule install --name`)."""
    if not NAME.match(name):
        raise InputError(f"--name {name!r}: use 1 to 128 letters, digits and . _ - : @ +, "
                         "starting with a letter or digit")
    return name


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs: its name, resumption, where hosts go, history and report."""

    name: str = DEFAULT_NAME
    resume: bool = False
    via: Via = "local"
    broker: str | None = None
    probe: ProbeOptions = field(default_factory=ProbeOptions)
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    visibility_timeout_s: float | None = None
    history_nights: int = HISTORY_NIGHTS
    rule: RegressionRule = field(default_factory=RegressionRule)
    report: str | None = None  # where to write the night's report (.html, .md, .json)
    # Each `cluster:` measured between its nodes after their own probes (docs/cluster.md),
    # from this controller, so only --via local: a Celery worker holds one host at a time.
    between: bool = True


@dataclass(frozen=True)
class SweepReport:
    """What one night's sweep did: the probe, the findings, and the report written."""

    name: str
    run_id: int
    resumed: bool
    via: str
    probe: ProbeReport  # every host of the inventory, as this run holds it
    probed: tuple[str, ...]  # hosts probed by this invocation (the rest: earlier, resumed)
    findings: Findings
    nights: int  # how many nights the comparison saw, this one included
    finished: bool = True  # False: the run stays open for --resume
    workers: dict[str, str] = field(default_factory=dict)  # host -> Celery worker that did it
    report_path: Path | None = None
    report_findings: dict[str, int] = field(default_factory=dict)  # the report's counts
    report_error: str | None = None  # the report could not be written: the night stands
    clusters: tuple[ClusterOutcome, ...] = ()  # each cluster between its nodes, tonight

    @property
    def interrupted(self) -> bool:
        """Whether the sweep's probe was interrupted."""
        return self.probe.interrupted

    def failing(self, fail_on: Collection[str]) -> list[str]:
        """The --fail-on kinds tonight has news of: the history's, and the report's (gaps,
        stragglers, drift) in tonight's run."""
        found = self.findings.kinds() | {kind for kind, n in self.report_findings.items() if n}
        return sorted(set(fail_on) & found)

    def as_dict(self) -> dict[str, Any]:
        """The sweep as plain JSON-able data (`fleet sweep --json`)."""
        return {"sweep": self.name, "run_id": self.run_id, "resumed": self.resumed,
                "via": self.via, "probed": list(self.probed), "nights": self.nights,
                "finished": self.finished, "workers": self.workers,
                "report": None if self.report_path is None else str(self.report_path),
                "report_error": self.report_error,
                **self.probe.as_dict(), "findings": self.findings.as_dict()}


def check_fail_on(value: str, report: bool = True) -> tuple[str, ...]:
    """The --fail-on kinds; those only the report finds (gap, straggler, drift) need it."""
    allowed = (*FAIL_KINDS, *(k for k in FINDING_KINDS if k not in FAIL_KINDS))
    kinds = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [k for k in kinds if k not in allowed]
    if unknown:
        raise InputError(f"--fail-on {value!r}: unknown {', '.join(unknown)}; choose from "
                         f"{','.join(allowed)}")
    from_report = [k for k in kinds if k not in FAIL_KINDS]
    if from_report and not report:
        raise InputError(f"--fail-on {','.join(from_report)} is found by the night's report, "
                         "which --no-report skips: drop --no-report (give --report PATH to "
                         f"choose where it goes), or fail on {','.join(FAIL_KINDS)} only")
    return kinds


def sweep(inventory: LoadedInventory, options: SweepOptions, db: str | None = None,
          observe: Observer | None = None) -> SweepReport:
    """Run (or resume) the sweep `options.name` over `inventory`, store every host, and
    compare the night with the sweep's history."""
    check_name(options.name)
    if options.via not in ("local", "celery"):
        raise InputError(f"--via {options.via!r}: choose local or celery")
    probe_options = replace(options.probe, sweep=options.name)
    if options.via == "celery":
        from fleet.sweep.distributed import check_broker, check_visibility

        if not options.broker:
            raise InputError("--via celery needs --broker URL, e.g. redis://127.0.0.1:6379/0")
        require_postgres(db, "fleet sweep --via celery")
        if probe_options.accept_new_host_keys:
            raise InputError("--accept-new-host-keys: under --via celery the workers probe, "
                             "and trusting a new host key is each worker's own decision: "
                             "give `fleet worker --accept-new-host-keys` instead")
        check_visibility(options.broker, options.visibility_timeout_s, probe_options,
                         inventory.targets)
    if options.report is not None:
        check_report_path(options.report)  # before a night of probing, not after
    if options.via == "celery" and options.broker:
        check_broker(options.broker)  # last: it waits up to seconds for an answer
    observe = observe or (lambda target, stage, message: None)
    started = time.monotonic()
    with open_store(db) as store, SweepLock(store.location, options.name):
        run_id, todo = _run_and_hosts(store.engine, inventory, options)
        run = RunInfo(kind="sweep", sweep=options.name, run_id=run_id,
                      inventory=_inventory_of(inventory), agent_version=agent_version)
        live: dict[str, HostOutcome] = {}
        remote: dict[str, RemoteOutcome] = {}
        if options.via == "local":
            local = probe(inventory, probe_options, db, observe, run, todo)
            live = {h.target.key: h for h in local.hosts}
            interrupted = local.interrupted
        else:
            remote, interrupted = _on_celery(store, inventory, todo, run, probe_options,
                                             options, observe)
        finished = not interrupted and not any(o.stage in UNREACHED
                                               for o in remote.values())
        if finished:
            finish_run(store.engine, run_id)
        elif not interrupted:
            end_run(store.engine, run_id)
        outcomes = _outcomes(store.engine, inventory, run_id, live, remote)
        clusters: tuple[ClusterOutcome, ...] = ()
        if (options.between and options.via == "local" and not interrupted
                and inventory.clusters and probe_options.bench is not None):
            clusters = _between(inventory, outcomes, store.engine, probe_options)
        nights = read_nights(store.engine, options.name, run_id, options.history_nights)
        findings = compare_night(nights, rule=options.rule)
        report = ProbeReport(inventory.path, store.location, build_payload(), outcomes,
                             time.monotonic() - started, interrupted, store.created)
    workers = {key: o.worker for key, o in sorted(remote.items()) if o.worker}
    result = SweepReport(options.name, run_id, options.resume, options.via, report,
                         tuple(sorted(todo)), findings, len(nights), finished, workers,
                         clusters=clusters)
    if options.report is None:
        return result
    path, counts, error = write_report(options.name, run_id, db, options.report)
    return replace(result, report_path=path, report_findings=counts, report_error=error)


def _between(inventory: LoadedInventory, outcomes: Sequence[HostOutcome], engine: Engine,
             probe: ProbeOptions) -> tuple[ClusterOutcome, ...]:
    """Tonight's run of each cluster between its nodes whose probe passed, stored before
    the night's report is written, so that the report shows it."""
    cpu = probe.bench is not None and probe.bench.cpu
    return tuple(measure_clusters(
        inventory, {o.target.key for o in outcomes if o.ok}, engine, build_payload(),
        BetweenOptions(backend="gloo" if cpu else "auto"),
        Connecting(probe.connect_timeout_s, probe.connect_retries,
                   probe.accept_new_host_keys, cpu),
        threading.Event(), lambda what, message: None))


def check_report_path(path: str) -> None:
    """Refuse a --report path that cannot be written, naming what to change."""
    writable_file(Path(path), "--report", "fleet-sweep.html")


def _inventory_of(inventory: LoadedInventory) -> str:
    # Absolute, so that --resume from another directory recognises the same file.
    return str(inventory.path.resolve())


def _run_and_hosts(engine: Engine, inventory: LoadedInventory, options: SweepOptions
                   ) -> tuple[int, set[str]]:
    keys = {t.key for t in inventory.targets}
    if not options.resume:
        run = RunInfo(kind="sweep", sweep=options.name, inventory=_inventory_of(inventory),
                      agent_version=agent_version)
        return create_run(engine, run), keys
    unfinished = newest_run(engine, options.name, unfinished=True)
    last = newest_run(engine, options.name)
    if unfinished is None:
        said = ("no sweep of that name has run" if last is None or last.finished_at is None
                else f"its newest run, #{last.id}, finished at "
                f"{last.finished_at:%Y-%m-%d %H:%M} UTC")
        raise InputError(f"--resume: no unfinished sweep named {options.name!r} ({said}). "
                         "Run without --resume to start a new one")
    if last is not None and last.id != unfinished.id:
        raise InputError(f"--resume: run #{unfinished.id} of sweep {options.name!r} is "
                         f"unfinished, but run #{last.id} began after it, so its night is "
                         "over. Run without --resume to start a new one")
    if unfinished.inventory is not None and \
            Path(unfinished.inventory).resolve() != inventory.path.resolve():
        raise InputError(f"--resume: run #{unfinished.id} of sweep {options.name!r} probes "
                         f"{unfinished.inventory}, not {inventory.path}: resume it with that "
                         "inventory, or run without --resume (or with another --name) to "
                         "start a new one")
    stored = {key for key, host in settled_hosts(engine, unfinished.id).items()
              if host.status == "stored"}
    return unfinished.id, keys - stored


def _on_celery(store: Store, inventory: LoadedInventory, todo: set[str], run: RunInfo,
               probe_options: ProbeOptions, options: SweepOptions, observe: Observer
               ) -> tuple[dict[str, RemoteOutcome], bool]:
    from fleet.sweep.distributed import make_app, run_on_celery, store_identity

    app = make_app(options.broker or "", options.visibility_timeout_s)
    targets = tuple(t for t in inventory.targets if t.key in todo)
    identity = store_identity(store.engine, store.location)
    remote, interrupted = run_on_celery(app, targets, run, identity, probe_options, observe,
                                        options.queue_timeout_s)
    lost = [(t, remote[t.key]) for t in targets
            if t.key in remote and remote[t.key].stage in UNREACHED]
    if lost:
        # The workers never reached these hosts, so the run records why here.
        with Ingest(store.engine, run) as ingest:
            for target, outcome in lost:
                ingest.record_error(Origin(target.provider, target.name, listing_of(target)),
                                    outcome.stage, outcome.reason or "")
    return remote, interrupted


def _outcomes(engine: Engine, inventory: LoadedInventory, run_id: int,
              live: dict[str, HostOutcome], remote: dict[str, RemoteOutcome]
              ) -> tuple[HostOutcome, ...]:
    """Every inventory host as the run holds it: this invocation's outcome where the fan-out
    gave one, else read back from the store (hosts stored by workers or by the run's
    earlier, interrupted invocation)."""
    settled = settled_hosts(engine, run_id)
    wanted = [s.document_id for key, s in settled.items()
              if s.document_id is not None and key not in live]
    documents = load_documents(engine, wanted)
    outcomes = []
    for target in inventory.targets:
        key = target.key
        if key in live:
            outcomes.append(live[key])
            continue
        outcomes.append(_stored_outcome(target, settled.get(key), documents,
                                        remote.get(key)))
    return tuple(outcomes)


def _stored_outcome(target: Target, host: SettledHost | None,
                    documents: dict[int, Any], remote: RemoteOutcome | None) -> HostOutcome:
    wall = remote.wall_s if remote else 0.0
    uploaded = remote.uploaded if remote else None
    if host is None:
        reason = remote.reason if remote and remote.reason else \
            "not probed: the sweep was interrupted; `fleet sweep --resume` probes it"
        return HostOutcome(target, False, remote.stage if remote else "not probed", reason,
                           uploaded=uploaded, wall_s=wall)
    if host.status != "stored" or host.document_id is None:
        return HostOutcome(target, False, host.stage or "failed",
                           host.message or (remote.reason if remote else None),
                           uploaded=uploaded, wall_s=wall)
    document = documents.get(host.document_id)
    verdict = None if document is None else check_expectation(target.expect, document)
    earlier = remote is None or remote.already_stored
    return HostOutcome(target, True, "stored", None, document, host.document_id, earlier,
                       uploaded, wall, verdict)


# --- the report ---------------------------------------------------------------------------

def write_report(name: str, run_id: int, db: str | None, path: str
                 ) -> tuple[Path | None, dict[str, int], str | None]:
    """Tonight's report (`fleet report --sweep NAME --run ID`, with the sweep's history),
    written to `path`; returns where (None if it could not be), its findings per kind,
    and why it was not written. The findings count even then: `--fail-on gap` must not
    pass because a disk was full."""
    from fleet.analysis.dataset import Scope
    from fleet.report import FORMATS, ReportOptions, build_report
    from fleet.report import write_report as write

    scope = Scope(sweep=name, runs=(run_id,))
    with open_store(db) as store:
        built = build_report(store.engine, ReportOptions(scope=scope), str(store.location))
    suffix = Path(path).suffix.lstrip(".").lower()
    try:
        write(built, suffix if suffix in FORMATS else "html", path)
    except FleetError as exc:
        # Everything is stored and compared; `fleet report` can write it later.
        return None, built.counts(), str(exc)
    return Path(path), built.counts(), None

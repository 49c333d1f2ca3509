"""`fleet probe`: every host of an inventory, in parallel, stored as each one answers.

Per host: connect, start the agent (uploading it when the host lacks this build), read its
JSON lines, validate the document and store it in a transaction of its own. A host that
fails, hangs or lies fails alone, with the reason, and is recorded as a host error; the
others carry on. Ctrl-C (or SIGTERM) stops every remote agent and keeps everything that
already arrived.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from agent import __version__ as agent_version
from fleet.analysis.health.not_measured import judge
from fleet.analysis.listing.duplicates import SharedGpus, shared_gpus
from fleet.analysis.listing.expectation import Verdict, check_expectation
from fleet.errors import AgentError, FleetError, InputError, StoreError
from fleet.events import read_events
from fleet.inventory import LoadedInventory, Target
from fleet.model.document import AgentDocument
from fleet.payload import Launched, NoPython, Payload, build_payload, launch_agent
from fleet.probe.local import FINGERPRINT_TIMEOUT_S, BenchOptions
from fleet.probe.storage_args import storage_args
from fleet.runtime.pin import RuntimeFailure
from fleet.runtime.provision import INSTALL_TIMEOUT_S, RuntimeReady, prepare_runtime
from fleet.store.database import Location, database_failure
from fleet.store.ingest import (
    Ingest,
    Listing,
    Origin,
    Outcome,
    Prepared,
    RunInfo,
    prepare,
    variant_of,
)
from fleet.store.schema import open_store
from fleet.transport import open_transport
from fleet.transport.base import (
    Cancelled,
    HostKeyError,
    RunTimeout,
    Transport,
    describe_exit,
    last_lines,
)
from fleet.transport.hostkeys import KnownHosts
from fleet.transport.ssh import SshOptions, SshPlan, plan_ssh

DEFAULT_PARALLEL = 32
ASSUMED_GPUS = 8  # for the default bench timeout, when `expect` does not say
EXIT_WAIT_S = 5.0

Observer = Callable[[Target, str, str], None]  # (host, stage, message), from worker threads


@dataclass(frozen=True)
class ProbeOptions:
    """How a probe runs: how many hosts at once, whether to benchmark, timeouts and retries."""

    parallel: int = DEFAULT_PARALLEL
    bench: BenchOptions | None = None  # None: fingerprint only
    timeout_s: float | None = None  # per host, from the agent's start; None: by what runs
    connect_timeout_s: float = 10.0
    connect_retries: int = 2
    accept_new_host_keys: bool = False
    sweep: str | None = None

    def agent_args(self) -> list[str]:
        """The agent's arguments: fingerprint, or bench with the benchmark's options."""
        return ["fingerprint"] if self.bench is None else ["bench", *self.bench.agent_args()]

    def timeout_for(self, target: Target) -> float:
        """How long the agent may run on `target`: `timeout_s` when given, else by what runs."""
        if self.timeout_s is not None:
            return self.timeout_s
        if self.bench is None:
            return FINGERPRINT_TIMEOUT_S
        gpus = (target.expect.gpu_count if target.expect and target.expect.gpu_count
                else ASSUMED_GPUS)
        return FINGERPRINT_TIMEOUT_S + self.bench.timeout_s(gpus)


@dataclass(frozen=True)
class HostOutcome:
    """How one host's probe ended: stored or the stage it failed at, and what it found."""

    target: Target
    ok: bool
    stage: str  # "stored", or where it failed: connect, host key, python, upload, ...
    reason: str | None
    document: AgentDocument | None = None
    document_id: int | None = None
    already_stored: bool = False
    uploaded: bool | None = None
    wall_s: float = 0.0
    expectation: Verdict | None = None
    runtime: RuntimeReady | None = None  # fleet's pinned runtime, where the harness used it


@dataclass(frozen=True)
class ProbeReport:
    """What one probe did: the inventory, the store, the payload, and each host's outcome."""

    inventory: Path
    store: Location
    payload: Payload
    hosts: tuple[HostOutcome, ...]
    wall_s: float
    interrupted: bool
    store_created: bool = False  # the database was new, and given its schema by this run
    run_id: int | None = None  # the probe run its documents were stored under

    @property
    def failed(self) -> list[HostOutcome]:
        """The hosts whose probe failed."""
        return [h for h in self.hosts if not h.ok]

    @property
    def shared(self) -> list[SharedGpus]:
        """Hosts of this run that answered with the same GPUs
        (fleet/analysis/listing/duplicates.py)."""
        return shared_gpus((h.target.key, h.document) for h in self.hosts if h.ok)

    @property
    def mismatched(self) -> list[HostOutcome]:
        """The hosts whose GPUs do not match what the inventory expects."""
        return [h for h in self.hosts if h.expectation is not None and
                not h.expectation.matches]

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-able data (`fleet probe --json`)."""
        return {
            "inventory": str(self.inventory),
            "store": str(self.store),
            "payload": {"file": self.payload.filename, "sha256": self.payload.sha256,
                        "bytes": len(self.payload.data)},
            "wall_s": round(self.wall_s, 3),
            "interrupted": self.interrupted,
            "hosts": [_host_dict(h) for h in self.hosts],
            "same_gpus": [{"hosts": [p.first, p.second], "gpus": list(p.identities)}
                          for p in self.shared],
        }


def _host_dict(outcome: HostOutcome) -> dict[str, Any]:
    target, document, verdict = outcome.target, outcome.document, outcome.expectation
    headline = headline_tflops(document)
    return {
        "provider": target.provider, "host": target.name, "ok": outcome.ok,
        "stage": outcome.stage, "reason": outcome.reason, "uploaded": outcome.uploaded,
        "wall_s": round(outcome.wall_s, 3), "document_id": outcome.document_id,
        "already_stored": outcome.already_stored,
        "gpu_count": None if document is None else len(document.gpus),
        "variants": variants_found(document) or None,
        "tflops": None if headline is None else headline[0],
        "expectation": None if verdict is None else {
            "matches": verdict.matches, "problems": list(verdict.problems),
            "unchecked": list(verdict.unchecked)},
        "agent_errors": [] if document is None else [e.message for e in document.errors],
        # Each error judged: what was not measured and whose it is (issue 54).
        "not_measured": [] if document is None else [
            {"stage": n.stage, "gpu": n.gpu_index, "party": n.party, "cause": n.cause,
             "action": n.action} for n in judge(document)],
        "price_per_gpu_hour": target.price_per_gpu_hour, "currency": target.currency,
        "tags": list(target.tags),
        "runtime": _runtime_dict(outcome),
    }


def _runtime_dict(outcome: HostOutcome) -> dict[str, Any]:
    prepared = outcome.runtime
    if outcome.target.runtime.use == "host":
        return {"use": "host", "python": outcome.target.python}
    if prepared is None:
        return {"use": "pinned", "environment": None}
    return {"use": "pinned", "environment": prepared.name, "installed": prepared.installed,
            "installer": prepared.installer,
            "uploaded_bytes": prepared.uploaded_bytes, "seconds": round(prepared.seconds, 3),
            "not_needed": prepared.why_none}


def headline_tflops(document: AgentDocument | None) -> tuple[float, int] | None:
    """The host's headline: the median of its GPUs' TFLOP/s, and how many GPUs."""
    if document is None or not document.benchmarks:
        return None
    values = sorted(r.tflops for r in document.benchmarks)
    middle = len(values) // 2
    median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
    return median, len({r.gpu_index for r in document.benchmarks})


def variants_found(document: AgentDocument | None) -> str:
    """"8 x H100-SXM5-80GB", or each variant with its count when a host mixes them."""
    if document is None:
        return ""
    if not document.gpus:
        return "no GPU"
    counts = Counter(variant_of(gpu) for gpu in document.gpus)
    return ", ".join(f"{n} x {label}" for label, n in counts.items())


class _Results:
    """The one place the probe talks to the store. `Ingest` holds one connection, so the
    workers take turns; the CPU work (canonical JSON, hash, checks) happens before."""

    def __init__(self, ingest: Ingest, location: Location) -> None:
        self._ingest = ingest
        self._location = location
        self._lock = threading.Lock()

    @staticmethod
    def prepare(target: Target, document: AgentDocument) -> Prepared:
        return prepare(document, target.key)

    def store(self, target: Target, prepared: Prepared) -> tuple[int, bool]:
        with self._lock, self._errors():
            stored = self._ingest.store_prepared(prepared, _origin(target))
        return stored.document_id, stored.outcome is Outcome.ALREADY_STORED

    def record_failure(self, target: Target, stage: str, message: str) -> None:
        with contextlib.suppress(FleetError), self._lock, self._errors():
            self._ingest.record_error(_origin(target), stage, message)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except DBAPIError as exc:
            raise database_failure(self._location, exc) from None
        except SQLAlchemyError as exc:
            raise StoreError(f"storing into {self._location} failed: {exc}") from None


def _origin(target: Target) -> Origin:
    return Origin(provider=target.provider, host=target.name, listing=listing_of(target))


def listing_of(target: Target) -> Listing:
    """What the inventory says of `target`: expected GPUs, price and tags."""
    expect = target.expect.model_dump(exclude_none=True) if target.expect else None
    return Listing(expect=expect or None, price_per_gpu_hour=target.price_per_gpu_hour,
                   currency=target.currency if target.price_per_gpu_hour is not None else None,
                   tags=target.tags)


class _Stream:
    """The agent's lines, remembering whether they ran out (for the failure message)."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self.ended = False

    def __iter__(self) -> Iterator[str]:
        yield from self._lines
        self.ended = True


@dataclass
class _Context:
    options: ProbeOptions
    payload: Payload
    results: _Results
    ssh: SshOptions
    plans: dict[str, SshPlan]
    observe: Observer
    cancel: threading.Event = field(default_factory=threading.Event)


class _HostProbe:
    def __init__(self, target: Target, ctx: _Context) -> None:
        self.target = target
        self.ctx = ctx
        self.started = time.monotonic()
        self.stage = "connect"
        self.uploaded: bool | None = None
        self.launched: Launched | None = None
        self.runtime: RuntimeReady | None = None
        self._last_progress = ""

    def _enter(self, stage: str, message: str) -> None:
        self.stage = stage
        self.ctx.observe(self.target, stage, message)

    def run(self) -> HostOutcome:
        target, ctx = self.target, self.ctx
        self.started = time.monotonic()
        if ctx.cancel.is_set():
            return self._failed("interrupted", f"{target.key}: not started (interrupted)",
                                record=False)
        transport = open_transport(target, ctx.plans.get(target.key), ctx.ssh)
        try:
            self._enter("connect", f"connecting to {transport.description}")
            transport.connect()
            return self._probe(transport)
        except HostKeyError as exc:
            return self._failed("host key", str(exc))
        except Cancelled:
            return self._failed("interrupted", f"{target.key}: interrupted while at "
                                               f"{self.stage}; its agent was stopped")
        except RunTimeout:
            if self.stage == "runtime":
                return self._failed("runtime", f"{target.key}: installing fleet's "
                                               f"runtime did not finish in "
                                               f"{INSTALL_TIMEOUT_S:g} s; it was stopped, and "
                                               "the next probe starts it again. Give the host "
                                               "a faster index or a `wheelhouse:`")
            timeout = ctx.options.timeout_for(target)
            said = self._last_progress[:200]
            last = f" (last it said: {said!r})" if said else ""
            return self._failed("timeout", f"{target.key}: the agent did not finish in "
                                           f"{timeout:g} s{last}; it was stopped. Raise "
                                           "--timeout if the host is only slow")
        except NoPython as exc:
            return self._failed("python", str(exc))
        except RuntimeFailure as exc:
            return self._failed("runtime", str(exc))
        except FleetError as exc:
            return self._failed(self.stage, str(exc))
        except Exception as exc:  # a bug in fleet: this host fails, the others carry on
            return self._failed(self.stage, f"{target.key}: internal error "
                                            f"{type(exc).__name__}: {exc}. Please report it")
        finally:
            if self.launched is not None and self.launched.process.exit_status(0) is None:
                self.launched.process.kill()
            transport.close()

    def _on_progress(self, event: dict[str, Any]) -> None:
        self._last_progress = event["message"]
        self.ctx.observe(self.target, "agent", event["message"])

    def _prepare_runtime(self, transport: Transport) -> str | None:
        """fleet's runtime's python where the harness runs on it, else None (`python:`)."""
        bench = self.ctx.options.bench
        if bench is None or self.target.runtime.use != "pinned":
            return None
        self._enter("runtime", "checking fleet's runtime")
        self.runtime = prepare_runtime(transport, self.target, self.ctx.payload, bench.cpu,
                                       self.ctx.cancel,
                                       lambda message: self._enter("runtime", message))
        self.uploaded = self.runtime.payload_uploaded
        return self.runtime.python

    def _probe(self, transport: Transport) -> HostOutcome:
        target, ctx = self.target, self.ctx
        python = self._prepare_runtime(transport)
        self._enter("start", "starting the agent")
        deadline = time.monotonic() + ctx.options.timeout_for(target)
        self.launched = launch_agent(transport, ctx.payload, target,
                                     ctx.options.agent_args() + storage_args(
                                         target.expect, ctx.options.bench),
                                     deadline, ctx.cancel, self._enter, python)
        self.uploaded = bool(self.uploaded) or self.launched.uploaded
        self._enter("agent", "agent running")
        stream = _Stream(self.launched.lines)
        try:
            document = read_events(stream, target.key, self._on_progress)
        except AgentError as exc:
            raise self._agent_failure(stream, exc) from None
        self.launched.process.exit_status(EXIT_WAIT_S)
        self._enter("store", "validating and storing")
        self.stage = "validation"
        prepared = ctx.results.prepare(target, document)
        self.stage = "store"
        document_id, again = ctx.results.store(target, prepared)
        verdict = check_expectation(target.expect, document)
        listing = "" if verdict is None else f", {verdict.summary()}"
        self._enter("done", f"{variants_found(document)}{listing}"
                            + (" (already stored)" if again else ""))
        return HostOutcome(target, True, "stored", None, document, document_id, again,
                           self.uploaded, time.monotonic() - self.started, verdict,
                           self.runtime)

    def _agent_failure(self, stream: _Stream, exc: AgentError) -> FleetError:
        self.stage = "agent output"
        process = self.launched.process if self.launched else None
        if not stream.ended or process is None:
            return exc
        status = process.exit_status(EXIT_WAIT_S)
        if status == 0:
            return exc
        stderr = last_lines(process.stderr_tail())
        self.stage = "agent"
        return AgentError(f"{self.target.key}: the agent {describe_exit(status)} before "
                          "sending its document" + (f": {stderr}" if stderr else ""))

    def _failed(self, stage: str, reason: str, record: bool = True) -> HostOutcome:
        if self.launched is not None and self.launched.process.exit_status(0) is None:
            self.launched.process.kill()
        self.ctx.observe(self.target, "failed", f"{stage}: {reason}")
        if record:
            self.ctx.results.record_failure(self.target, stage, reason)
        return HostOutcome(self.target, False, stage, reason, uploaded=self.uploaded,
                           wall_s=time.monotonic() - self.started, runtime=self.runtime)


def plan_targets(inventory: LoadedInventory) -> dict[str, SshPlan]:
    """How to reach every SSH host, resolved before anything connects, so a mistake in
    the inventory or ssh_config stops the run at once (exit status 2)."""
    if not inventory.targets:
        raise InputError(f"{inventory.path}: lists no hosts")
    return {t.key: plan_ssh(t) for t in inventory.targets if t.transport == "ssh"}


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """A scheduler's SIGTERM stops the probe as Ctrl-C does: remote agents stopped,
    results kept."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def probe(inventory: LoadedInventory, options: ProbeOptions, db: str | None = None,
          observe: Observer | None = None, run: RunInfo | None = None,
          only: Collection[str] | None = None) -> ProbeReport:
    """Probe every host of `inventory` and store each document as it arrives.

    A sweep passes its own `run` (an existing run to continue) and, when resuming, `only`
    the keys (provider/host) of the hosts still to probe."""
    started = time.monotonic()
    if options.parallel < 1:
        raise InputError("--parallel must be at least 1")
    plans = plan_targets(inventory)
    targets = inventory.targets if only is None else tuple(
        t for t in inventory.targets if t.key in only)
    payload = build_payload()
    cancel = threading.Event()
    ssh = SshOptions(KnownHosts(accept_new=options.accept_new_host_keys),
                     options.connect_timeout_s, options.connect_retries, cancel)
    run = run or RunInfo(kind="probe", sweep=options.sweep, inventory=str(inventory.path),
                         agent_version=agent_version)
    with open_store(db) as store, Ingest(store.engine, run) as ingest:
        ctx = _Context(options, payload, _Results(ingest, store.location), ssh, plans,
                       observe or (lambda target, stage, message: None), cancel)
        outcomes, interrupted = _fan_out(targets, ctx) if targets else ((), False)
    return ProbeReport(inventory.path, store.location, payload, outcomes,
                       time.monotonic() - started, interrupted, store.created, ingest.run_id)


class HostProber:
    """The per-host step of `probe()` without its fan-out, for a process that is handed
    hosts one at a time (a Celery worker): the payload is built once, and each host's
    document is stored through `ingest` (the controller's run)."""

    def __init__(self, options: ProbeOptions, location: Location,
                 observe: Observer | None = None) -> None:
        self.options = options
        self.location = location
        self.payload = build_payload()
        self.observe = observe or (lambda target, stage, message: None)

    def probe(self, target: Target, ingest: Ingest) -> HostOutcome:
        """Probe `target` and store its document through `ingest`; how it ended."""
        plans = {target.key: plan_ssh(target)} if target.transport == "ssh" else {}
        cancel = threading.Event()
        ssh = SshOptions(KnownHosts(accept_new=self.options.accept_new_host_keys),
                         self.options.connect_timeout_s, self.options.connect_retries, cancel)
        ctx = _Context(self.options, self.payload, _Results(ingest, self.location), ssh,
                       plans, self.observe, cancel)
        return _HostProbe(target, ctx).run()


def _fan_out(targets: tuple[Target, ...], ctx: _Context
             ) -> tuple[tuple[HostOutcome, ...], bool]:
    done: dict[str, HostOutcome] = {}
    interrupted = False
    workers = min(ctx.options.parallel, len(targets))
    with _sigterm_as_interrupt(), ThreadPoolExecutor(workers, "fleet-probe") as pool:
        futures: dict[Future[HostOutcome], Target] = {
            pool.submit(_HostProbe(t, ctx).run): t for t in targets}
        pending = set(futures)
        while pending:
            try:
                finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:
                # Workers notice within a poll interval, stop their agents and return;
                # documents already stored stay stored.
                interrupted = True
                ctx.cancel.set()
                continue
            for future in finished:
                done[futures[future].key] = future.result()
    return tuple(done[t.key] for t in targets), interrupted

"""Sweeps past one controller, on Celery: one task per host, on its provider's queue.

The controller (`fleet sweep --via celery`) creates the run, then sends one task per host
carrying only the run's id, the sweep's name, the store's identity, the host's
provider/host key and the harness's choices and timeouts (`task_message`): no address,
user, key, password or trust decision crosses the broker. `fleet worker --queue NAME
INVENTORY --db URL` runs where that queue's hosts can be reached, takes the host's
connection settings and its host-key policy (`--accept-new-host-keys`) from its own
command line and inventory, probes the host with the same per-host step as a local probe
(`fleet.probe.run.HostProber`) and stores the document in the shared PostgreSQL store.

A worker hands back (Reject, requeue) a task it cannot serve: one for another store, or
for a host its inventory lacks, so that a worker that can takes it. It first gives the
task the state HANDED_BACK, with its name and why: a task only ever handed back is not
being probed, so the controller stops waiting for it at its expiry less the time Redis may
hold a dead worker's task, and reports it at stage "queue" with the workers' reasons. A
worker refuses (acks, writes nothing) a task whose run is finished or unknown to its
store: a late task never writes into a night that is over. Every task expires
(`expires_after_s`), so a task that no worker could serve leaves the broker instead of
waiting there for a worker that starts next week; the controller reports it failed at
stage "queue". On Redis that expiry also covers the visibility timeout, so that the task
of a worker that died mid-host is still valid when Redis hands it to another worker; the
controller waits for a task at most until its expiry plus one host's budget, then reports
it failed at stage "worker" (at "queue" if no worker was seen starting it).

Delivery: tasks are acknowledged late (after the host is stored) and each worker takes
one task per slot at a time (prefetch 1). A task whose worker died unacknowledged is
delivered again by the broker, not by the worker (the threads pool has no child process
whose loss `task_reject_on_worker_lost` could notice): Redis hands it to another worker
once its visibility timeout has passed since delivery; RabbitMQ requeues it as soon as
the dead worker's channel closes. Redis restores unacknowledged tasks on the *workers'*
visibility timeout (their `fleet worker --visibility-timeout`), while the controller
counts the expiry from its own `fleet sweep --visibility-timeout`: give both the same
value (a worker whose own is longer than the sweep's says so in its log). That visibility
timeout must exceed the longest host's probe plus its connect budget (`host_budget_s`), or
Redis hands a host still being probed to a second worker (stored once, measured twice,
under each other's load): the controller refuses a shorter one. RabbitMQ's own
`consumer_timeout` (30 min by default since 3.8.15) closes the channel of a worker that
holds a delivery longer, so it must likewise exceed the longest host's probe (set it in
rabbitmq.conf). Storage is idempotent by (run, host) through run_host (`Ingest`), so a
host delivered twice is stored once.

The broker: `fleet sweep --via celery` checks that it answers before the run is created
(`check_broker`, called by `fleet.sweep.run`); a broker lost while tasks are sent or followed
ends the sweep with a StoreError naming it (password hidden), the run left open for
`fleet sweep --resume`.

Celery is imported here only, lazily by the commands that need it, so `fleet probe` never
pays for it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import unquote

from sqlalchemy import select, text

from agent import __version__ as agent_version
from fleet.errors import FleetError, InputError, StoreError
from fleet.inventory import LoadedInventory, Target, load_inventory
from fleet.probe.local import BenchOptions
from fleet.probe.run import HostProber, Observer, ProbeOptions, _sigterm_as_interrupt
from fleet.runtime.provision import RUNTIME_BUDGET_S
from fleet.store.database import Location, hide_passwords, redact, resolve
from fleet.store.ingest import Ingest, RunInfo
from fleet.store.models import ProbeRun
from fleet.transport.ssh import RETRY_BACKOFF_S
from fleet.version import __version__

if TYPE_CHECKING:
    from celery import Celery
    from sqlalchemy import Engine

TASK = "fleet.probe_host"
# Long enough for the slowest default host (8 GPUs benchmarked: 300 s + 8 x 120 s, plus
# its connect budget, plus 1980 s for a first install of fleet's runtime: 3273 s) to
# finish before Redis hands its unacknowledged task to another worker.
DEFAULT_VISIBILITY_TIMEOUT_S = 3600.0
DEFAULT_QUEUE_TIMEOUT_S = 60.0
DEFAULT_CONCURRENCY = 16
POLL_S = 0.25
INSPECT_EVERY_S = 2.0
# A worker that hands a task back waits this long first: the broker may give it straight
# back to the same worker, and a pause keeps that loop (until another worker takes it, or
# it expires) from spinning and flooding the log.
REJECT_PAUSE_S = 2.0
# The state a worker gives a task it hands back, with its name and why: the controller
# then waits for it as a task no worker has taken, not as one being probed.
HANDED_BACK = "HANDED_BACK"
# How long `check_broker` waits for the broker to answer.
BROKER_CHECK_TIMEOUT_S = 5.0
# A task the controller still waits for past its expiry plus one host's budget is given up
# (stage "worker"); this much more covers storing the document and the result's return.
SETTLE_GRACE_S = 60.0
log = logging.getLogger(__name__)


def _is_redis(broker: str) -> bool:
    return broker.startswith(("redis://", "rediss://", "unix://"))


def _result_backend(broker: str) -> str:
    # Progress and small results come back through the broker's own server: Redis keeps
    # them as keys; on RabbitMQ the rpc backend sends them to the controller's reply queue.
    return broker if _is_redis(broker) else "rpc://"


def make_app(broker: str, visibility_timeout_s: float | None = None) -> Celery:
    """The Celery app of a sweep or worker, built from the broker URL."""
    try:
        from celery import Celery
    except ImportError:  # pragma: no cover - a dependency, but said plainly if missing
        raise InputError("--via celery needs Celery: pip install 'celery[redis]'") from None
    if not broker:
        raise InputError("give --broker URL, e.g. redis://127.0.0.1:6379/0 or "
                         "amqp://guest:guest@127.0.0.1:5672//")
    visibility = visibility_timeout_s or DEFAULT_VISIBILITY_TIMEOUT_S
    # Look for unacknowledged tasks to restore every `restore_every_s` (kombu's default
    # scans every ~100 s), so that `redelivery_s` bounds when a dead worker's task is back.
    transport: dict[str, Any] = {"visibility_timeout": visibility,
                                 "unacked_restore_interval": restore_every_s(visibility),
                                 "unacked_restore_throttle": 1}
    app = Celery("fleet", broker=broker, backend=_result_backend(broker),
                 set_as_current=False)
    app.conf.update(
        task_acks_late=True, worker_prefetch_multiplier=1,
        task_track_started=True, task_serializer="json", result_serializer="json",
        accept_content=["json"], result_expires=7 * 86400,
        broker_connection_retry_on_startup=True, broker_transport_options=transport,
        result_backend_transport_options=transport, worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=False)
    app.task(name=TASK, bind=True, acks_late=True)(_probe_task)
    return app


def require_postgres(db: str | None, what: str) -> Location:
    """The store of a sweep on Celery or of a worker: PostgreSQL, which every worker and
    the controller reach, never an SQLite file that only one machine can."""
    location = resolve(db)
    if location.is_sqlite:
        raise InputError(f"{what} needs the shared PostgreSQL store that the controller "
                         f"and every worker write to, not {location} ({location.origin}): "
                         "give --db postgresql://USER@HOST:5432/NAME, the same database "
                         "to the sweep and to every `fleet worker`")
    return location


def store_identity(engine: Engine, location: Location) -> str:
    """Which PostgreSQL database this is, the same whatever address reaches it: the
    cluster's system identifier and the database's name (host:port/name where the role
    may not read the identifier). No user or password: it crosses the broker."""
    with engine.connect() as conn:
        name = str(conn.execute(text("SELECT current_database()")).scalar_one())
        try:
            cluster = conn.execute(text("SELECT system_identifier FROM pg_control_system()")
                                   ).scalar_one()
        except Exception:  # revoked on some managed servers: the address must do
            conn.rollback()
            cluster = f"{location.url.host or 'localhost'}:{location.url.port or 5432}"
    return f"{cluster}/{name}"


def host_budget_s(options: ProbeOptions, target: Target) -> float:
    """The longest one host's task may take: every connection attempt with its backoff,
    then, where a benchmark may install fleet's pinned runtime first, that install's own
    budget (a first install of a CUDA build may take up to RUNTIME_BUDGET_S, apart from
    --timeout), then the agent's timeout."""
    attempts = 1 + max(0, options.connect_retries)
    backoff = sum(RETRY_BACKOFF_S[min(i, len(RETRY_BACKOFF_S) - 1)]
                  for i in range(attempts - 1))
    runtime = (RUNTIME_BUDGET_S if options.bench is not None and target.runtime.use == "pinned"
               else 0.0)
    return (options.timeout_for(target) + runtime + attempts * options.connect_timeout_s
            + backoff)


def restore_every_s(visibility_timeout_s: float) -> int:
    """How often a worker on Redis looks for unacknowledged tasks past their visibility
    timeout to restore: every second for short (test) timeouts, else every 10 s."""
    return 1 if visibility_timeout_s < 60 else 10


def redelivery_s(broker: str, visibility_timeout_s: float | None) -> float:
    """How long after its delivery the broker may hold the task of a worker that died
    before another worker can get it: on Redis the visibility timeout and one restore
    period (`restore_every_s`); RabbitMQ requeues it at once."""
    if not _is_redis(broker):
        return 0.0
    visibility = visibility_timeout_s or DEFAULT_VISIBILITY_TIMEOUT_S
    return visibility + restore_every_s(visibility)


def expires_after_s(options: ProbeOptions, target: Target, position: int,
                    queue_timeout_s: float, redelivery: float = 0.0) -> float:
    """When a task leaves the broker unserved, counted from its sending: the queue timeout,
    then one host budget per wave of DEFAULT_CONCURRENCY hosts queued before it, so that a
    queue served by one worker at the default --concurrency reaches every task in time,
    then `redelivery` (`redelivery_s`: on Redis the visibility timeout and a restore
    period), so that the task of a worker that died mid-host is still valid when the
    broker hands it to another."""
    waves = 1 + position // DEFAULT_CONCURRENCY
    return queue_timeout_s + waves * host_budget_s(options, target) + redelivery


def check_visibility(broker: str, visibility_timeout_s: float | None, options: ProbeOptions,
                     targets: tuple[Target, ...]) -> None:
    """Refuse a Redis visibility timeout that would hand a host still being probed to a
    second worker."""
    if not _is_redis(broker) or not targets:
        return
    visibility = visibility_timeout_s or DEFAULT_VISIBILITY_TIMEOUT_S
    longest = max(host_budget_s(options, t) for t in targets)
    if visibility < longest:
        raise InputError(
            f"--visibility-timeout {visibility:g} s is shorter than the longest host's "
            f"probe ({longest:g} s: its --timeout, its connect attempts and, when "
            "benchmarking on fleet's runtime, that runtime's install); Redis would "
            "hand a host still being probed to a second worker. Give --visibility-timeout "
            f"{math.ceil(longest) + 60} or more, to the sweep and to every `fleet worker`, "
            "or a shorter --timeout")


def redacted_broker(broker: str) -> str:
    """The broker's URL with any password hidden (also in a URL fleet cannot parse)."""
    shown = redact(broker)
    if shown.startswith("(") or ";" in broker:  # unparsed, or a kombu failover list
        shown = hide_passwords(broker)
    return shown


def broker_failure(broker: str, exc: BaseException, doing: str, resume: bool) -> StoreError:
    """A StoreError for a broker that cannot be reached or failed, password hidden."""
    detail = (str(exc).strip().splitlines() or [""])[0].rstrip(".") or type(exc).__name__
    for secret in _broker_secrets(broker):
        detail = detail.replace(secret, "***")
    then = ("The run stays open: when the broker is back, `fleet sweep --resume` probes the "
            "hosts it has no document for" if resume else "No run was started")
    return StoreError(f"the Celery broker {redacted_broker(broker)} failed while {doing}: "
                      f"{detail}. Check that it is running and reachable at that address "
                      f"(and its password). {then}")


def _broker_secrets(broker: str) -> list[str]:
    found = re.findall(r"://[^:/@;]*:([^@;]+)@", broker)
    found += re.findall(r"[?&][^=&]*password[^=&]*=([^&;]+)", broker, flags=re.IGNORECASE)
    return [s for v in found for s in {v, unquote(v)} if s]


def check_broker(broker: str, timeout_s: float = BROKER_CHECK_TIMEOUT_S) -> None:
    """Refuse a broker that does not answer within `timeout_s`, before the run is created."""
    try:
        from kombu.connection import Connection
    except ImportError:  # pragma: no cover - a dependency, but said plainly if missing
        raise InputError("--via celery needs Celery: pip install 'celery[redis]'") from None
    try:
        with Connection(broker, connect_timeout=timeout_s) as connection:  # type: ignore[no-untyped-call]
            connection.ensure_connection(max_retries=0, timeout=timeout_s)
    except Exception as exc:  # kombu's OperationalError, an OSError, a bad URL's error
        raise broker_failure(broker, exc, "checking it before the sweep",
                             resume=False) from None


# --- the worker side ---------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerOptions:
    """How a Celery worker runs: its queues, broker, concurrency, name and host key trust."""

    queues: tuple[str, ...]
    broker: str
    concurrency: int = DEFAULT_CONCURRENCY
    visibility_timeout_s: float | None = None
    name: str | None = None
    accept_new_host_keys: bool = False  # the worker's own trust decision, never a task's


@dataclass
class _WorkerState:
    inventory: LoadedInventory
    targets: dict[str, Target]
    engine: Engine
    location: Location
    store: str  # store_identity
    options: WorkerOptions
    probers: dict[str, HostProber]
    lock: threading.Lock


_worker: _WorkerState | None = None


def _options_from(data: Mapping[str, Any], accept_new_host_keys: bool) -> ProbeOptions:
    bench = data.get("bench")
    if bench is not None:
        # Harness 1.1's opt-in is 1.2's default: a task queued by an older controller
        # still runs. An option this worker does not know is a newer controller's.
        bench = {k: v for k, v in bench.items() if k != "flush_auto"}
        unknown = sorted(set(bench) - {f.name for f in dataclasses.fields(BenchOptions)})
        if unknown:
            raise ValueError(f"this worker's fleet {__version__} does not know the harness "
                             f"option(s) {', '.join(unknown)} that the sweep sent: run the "
                             "sweep's fleet version on every worker")
        gpus = bench.get("gpus")
        bench = BenchOptions(**{**bench, "gpus": tuple(gpus) if gpus is not None else None})
    return ProbeOptions(bench=bench, timeout_s=data.get("timeout_s"),
                        connect_timeout_s=data.get("connect_timeout_s", 10.0),
                        connect_retries=data.get("connect_retries", 2),
                        accept_new_host_keys=accept_new_host_keys)


def options_message(options: ProbeOptions) -> dict[str, Any]:
    """What a task says of the probe: the harness's choices and timeouts, nothing else
    (the host-key policy is the worker's: `fleet worker --accept-new-host-keys`)."""
    return {"bench": None if options.bench is None else dataclasses.asdict(options.bench),
            "timeout_s": options.timeout_s, "connect_timeout_s": options.connect_timeout_s,
            "connect_retries": options.connect_retries}


def task_message(run: RunInfo, store: str, target: Target, options: ProbeOptions,
                 visibility_timeout_s: float | None = None) -> dict[str, Any]:
    """The keyword arguments of one host's task: everything that crosses the broker. On
    Redis its options also say the visibility timeout that the sweep counted the task's
    expiry with, which the worker checks against its own."""
    assert run.run_id is not None and run.sweep is not None
    message = options_message(options)
    if visibility_timeout_s:
        message["visibility_timeout_s"] = visibility_timeout_s
    return {"run_id": run.run_id, "sweep": run.sweep, "store": store, "host": target.key,
            "options": message}


def _hand_back(task: Any, worker: str, why: str) -> NoReturn:
    from celery.exceptions import Reject

    log.warning("fleet.probe_host handed back to the queue: %s", why)
    try:
        # With the pid, as Celery's own STARTED: the same name restarted is another worker.
        task.update_state(state=HANDED_BACK,
                          meta={"hostname": worker, "pid": os.getpid(), "why": why})
    except Exception as exc:  # the result store failing must not turn a hand-back into a loss
        log.warning("could not mark the task handed back (%s); handing it back all the same",
                    exc)
    time.sleep(REJECT_PAUSE_S)
    raise Reject(why, requeue=True)


def _run_refusal(state: _WorkerState, run_id: int, sweep: str) -> str | None:
    """Why this worker must not probe for run `run_id`, or None when the run is open."""
    with state.engine.connect() as conn:
        row = conn.execute(select(ProbeRun.sweep, ProbeRun.finished_at)
                           .where(ProbeRun.id == run_id, ProbeRun.kind == "sweep")).first()
    if row is None or row.sweep != sweep:
        return (f"run #{run_id} of sweep {sweep!r} is not in this worker's store "
                f"{state.location}")
    if row.finished_at is not None:
        return (f"run #{run_id} of sweep {sweep!r} finished at "
                f"{row.finished_at:%Y-%m-%d %H:%M:%S}; a late task writes nothing into it")
    return None


def _probe_task(task: Any, run_id: int, sweep: str, store: str, host: str,
                options: dict[str, Any]) -> dict[str, Any]:
    state = _worker
    if state is None:
        raise RuntimeError("fleet.probe_host runs only in `fleet worker`")
    started = time.monotonic()
    worker = str(task.request.hostname or socket.gethostname())
    if store != state.store:
        _hand_back(task, worker, f"{host}: the task is for store {store}, this worker "
                   f"writes to {state.store} ({state.location}); start a worker with the "
                   "sweep's --db")
    target = state.targets.get(host)
    if target is None:
        _hand_back(task, worker, f"{host}: the worker's inventory {state.inventory.path} "
                   "does not list this host; give the worker the inventory the sweep uses")
    refusal = _run_refusal(state, run_id, sweep)
    if refusal is not None:
        log.warning("fleet.probe_host refused: %s", refusal)
        return {"ok": False, "stage": "refused", "reason": refusal, "host": host,
                "worker": worker, "wall_s": time.monotonic() - started}
    visibility = state.options.visibility_timeout_s or DEFAULT_VISIBILITY_TIMEOUT_S
    probe_options = _options_from(options, state.options.accept_new_host_keys)
    assumed = options.get("visibility_timeout_s")
    if assumed and _is_redis(state.options.broker) and visibility > assumed:
        log.warning("this worker's visibility timeout %g s is longer than the sweep's %g s: "
                    "should a worker die mid-host, Redis hands its task to another only "
                    "after %g s, when it may have expired. Give every `fleet worker` the "
                    "sweep's --visibility-timeout", visibility, assumed, visibility)
    if host_budget_s(probe_options, target) > visibility:
        log.warning("%s may take %g s, more than this worker's visibility timeout %g s: "
                    "Redis may hand it to a second worker meanwhile", host,
                    host_budget_s(probe_options, target), visibility)
    run = RunInfo(kind="sweep", sweep=sweep, run_id=run_id,
                  inventory=str(state.inventory.path), agent_version=agent_version)
    with Ingest(state.engine, run) as ingest:
        key = repr(sorted(options.items()))
        with state.lock:
            prober = state.probers.get(key)
            if prober is None:
                prober = state.probers[key] = HostProber(probe_options, state.location)
        outcome = prober.probe(target, ingest)
    return {"ok": outcome.ok, "stage": outcome.stage, "reason": outcome.reason,
            "document_id": outcome.document_id, "already_stored": outcome.already_stored,
            "uploaded": outcome.uploaded, "wall_s": outcome.wall_s, "host": host,
            "worker": worker}


def run_worker(inventory_path: Path, options: WorkerOptions, db: str | None) -> None:
    """Serve `options.queues` until stopped (SIGTERM finishes the running tasks first)."""
    from fleet.store.schema import open_store

    global _worker
    require_postgres(db, "fleet worker")
    inventory = load_inventory(inventory_path)
    served = [t.key for t in inventory.targets if t.queue_name in options.queues]
    if not served:
        known = sorted({t.queue_name for t in inventory.targets})
        raise InputError(f"{inventory_path} puts no host on queue(s) "
                         f"{', '.join(options.queues)}; its queues are: {', '.join(known)}")
    app = make_app(options.broker, options.visibility_timeout_s)
    with open_store(db) as store:
        _worker = _WorkerState(inventory, {t.key: t for t in inventory.targets},
                               store.engine, store.location,
                               store_identity(store.engine, store.location), options, {},
                               threading.Lock())
        hostname = options.name or (f"fleet-{'+'.join(options.queues)}-{os.getpid()}"
                                    f"@{socket.gethostname()}")
        worker = app.Worker(queues=list(options.queues), concurrency=options.concurrency,
                            pool="threads", hostname=hostname, loglevel="INFO",
                            without_gossip=True, without_mingle=True, optimization="fair")
        worker.start()  # returns when the worker is stopped
        code = worker.exitcode
    if code:
        raise FleetError(f"the Celery worker stopped with status {code}")


# --- the controller side -----------------------------------------------------------------

@dataclass(frozen=True)
class RemoteOutcome:
    """How a host's probe on a worker ended, as the worker reports it back."""

    ok: bool
    stage: str
    reason: str | None
    worker: str | None = None
    wall_s: float = 0.0
    uploaded: bool | None = None
    already_stored: bool = False


class _QueueWatch:
    """Which queues some live worker consumes, asked of the workers every few seconds in
    a thread of its own (each broadcast waits out its reply timeout)."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.served: set[str] = set()
        self.asked = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fleet-queues", daemon=True)

    def __enter__(self) -> _QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                replies = self.app.control.inspect(timeout=1.0).active_queues() or {}
                self.served = {q["name"] for queues in replies.values() for q in queues}
            except Exception:  # a broker hiccup: keep the last answer, ask again
                pass
            self.asked = True
            self._stop.wait(INSPECT_EVERY_S)


@dataclass
class _Pending:
    target: Target
    result: Any
    expires: float  # its expiry, counted from its sending
    budget: float  # host_budget_s
    deadline: float  # when the controller stops waiting for it (clock())
    sent: float  # clock()
    # When it stops waiting for a task only ever handed back: its expiry less the time
    # Redis may hold a dead worker's task, as nothing of it is running.
    unserved_deadline: float
    started_on: str | None = None  # the worker seen probing it
    # Workers (name, pid) that handed it back, and why: one of them seen starting it again
    # is about to hand it back again, not probing.
    handed_back: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)


# What Celery's Redis result backend raises, as a bare RuntimeError, once it has given up
# reconnecting (celery/backends/asynchronous.py); any other RuntimeError is a bug to show.
RESULT_STORE_GAVE_UP = "Retry limit exceeded while trying to reconnect"


def _broker_errors(app: Celery) -> tuple[type[BaseException], ...]:
    """What a broker or result store that failed raises: the transport's connection and
    channel errors, kombu's and OSError (and RESULT_STORE_GAVE_UP, caught apart)."""
    from kombu.exceptions import KombuError

    errors: tuple[type[BaseException], ...] = (KombuError, OSError)
    try:
        connection = app.connection_for_write()
        errors += tuple(connection.connection_errors) + tuple(connection.channel_errors)
    except Exception:  # pragma: no cover - the transport could not be loaded
        pass
    return errors


def run_on_celery(app: Celery, targets: tuple[Target, ...], run: RunInfo, store: str,
                  options: ProbeOptions, observe: Observer,
                  queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S,
                  clock: Callable[[], float] = time.monotonic
                  ) -> tuple[dict[str, RemoteOutcome], bool]:
    """Send one task per host and follow them to the end; (outcomes, interrupted).

    A host whose queue no live worker consumes for `queue_timeout_s` (none ever started,
    or the ones that did have died) ends as failed at stage "queue", naming the queue; so
    does one whose task expired before a worker could serve it. One still unsettled at its
    expiry plus one host budget (its worker died and the broker did not hand it to another
    in time) ends as failed at stage "worker". Ctrl-C or SIGTERM revokes the tasks not yet
    done (on the workers alive now: a revoke lives in their memory; a worker started later
    drops them by their expiry) and returns interrupted. A broker that fails raises a
    StoreError (`broker_failure`)."""
    broker = str(app.conf.broker_url or "")
    transport = app.conf.broker_transport_options or {}
    visibility = transport.get("visibility_timeout") if _is_redis(broker) else None
    redelivery = redelivery_s(broker, visibility)
    errors = _broker_errors(app)
    pending: dict[str, _Pending] = {}
    done: dict[str, RemoteOutcome] = {}
    unserved_since: dict[str, float] = {}
    position: dict[str, int] = {}
    doing = "sending the tasks"
    try:
        with _sigterm_as_interrupt():
            for target in targets:
                queue = target.queue_name
                expires = expires_after_s(options, target, position.get(queue, 0),
                                          queue_timeout_s, redelivery)
                position[queue] = position.get(queue, 0) + 1
                budget = host_budget_s(options, target)
                sent = clock()
                result = app.send_task(TASK, kwargs=task_message(run, store, target, options,
                                                                 visibility),
                                       queue=queue, expires=expires)
                pending[target.key] = _Pending(
                    target=target, result=result, expires=expires, budget=budget,
                    deadline=sent + expires + budget + SETTLE_GRACE_S, sent=sent,
                    unserved_deadline=sent + expires - redelivery + SETTLE_GRACE_S)
                observe(target, "queued", f"queued on {queue}")
            doing = "following the tasks"
            with _QueueWatch(app) as watch:
                while pending:
                    now = clock()
                    for key, task in list(pending.items()):
                        target, result = task.target, task.result
                        # One read of the state a round: a worker that started the task
                        # since the last round must count before any deadline is judged.
                        state = result.state
                        _follow(task, state, result.info, observe)
                        outcome = _settled(task, state)
                        if outcome is None:
                            outcome = _unserved(target, watch, unserved_since, now,
                                                queue_timeout_s)
                            if outcome is None and now > task.deadline:
                                outcome = _lost(task, visibility)
                            if (outcome is None and task.handed_back and not task.started_on
                                    and now > task.unserved_deadline):
                                outcome = _unservable(task, now - task.sent)
                            if outcome is not None:
                                result.revoke()
                        if outcome is not None:
                            done[key] = outcome
                            del pending[key]
                            observe(target, "done" if outcome.ok else "failed",
                                    _describe(outcome))
                            continue
                    time.sleep(POLL_S)
    except KeyboardInterrupt:
        if pending:
            try:
                app.control.revoke([task.result.id for task in pending.values()])
            except errors as exc:
                _detach(pending)
                log.warning("could not revoke the tasks not yet done: %s",
                            broker_failure(broker, exc, "revoking them", resume=True))
        return done, True
    except errors as exc:
        _detach(pending)
        raise broker_failure(broker, exc, doing, resume=True) from None
    except RuntimeError as exc:
        if RESULT_STORE_GAVE_UP not in str(exc):
            raise
        _detach(pending)
        raise broker_failure(broker, exc, doing, resume=True) from None
    return done, False


def _follow(task: _Pending, state: str, info: Any, observe: Observer) -> None:
    """Note which worker probes the task, or that one handed it back."""
    info = info if isinstance(info, dict) else {}
    worker = str(info.get("hostname", "?"))
    key = (worker, str(info.get("pid", "?")))
    if state == HANDED_BACK:
        task.handed_back[key] = str(info.get("why") or "no reason given")[:1000]
        if task.started_on == worker:
            task.started_on = None
    elif (state == "STARTED" and key not in task.handed_back
          and worker != task.started_on):  # first, or after a re-delivery
        task.started_on = worker
        observe(task.target, "agent", f"probing on {worker}")


def _unservable(task: _Pending, waited: float) -> RemoteOutcome:
    """A task that every worker that took it handed back, past its unserved deadline."""
    queue = task.target.queue_name
    why = "; ".join(f"{worker} handed it back: {reason}"
                    for (worker, _), reason in sorted(task.handed_back.items()))
    return RemoteOutcome(False, "queue", (
        f"no worker could serve it within {waited:g} s of queueing on {queue!r} ({why}). "
        f"Start `fleet worker --queue {queue}` with the sweep's inventory and --db, then "
        "`fleet sweep --resume`"))


def _detach(pending: Mapping[str, _Pending]) -> None:
    """Let go of results whose broker failed without telling it: an AsyncResult that is
    collected tells its backend, which would fail again, as a traceback on stderr."""
    for task in pending.values():
        task.result.backend = None


def _describe(outcome: RemoteOutcome) -> str:
    where = f" (worker {outcome.worker})" if outcome.worker else ""
    if outcome.ok:
        return "stored" + (" (already stored)" if outcome.already_stored else "") + where
    return f"{outcome.stage}: {outcome.reason}{where}"


def _settled(task: _Pending, state: str) -> RemoteOutcome | None:
    result, target, expires = task.result, task.target, task.expires
    if state == "SUCCESS":
        value = result.result if isinstance(result.result, dict) else {}
        return RemoteOutcome(bool(value.get("ok")), str(value.get("stage", "?")),
                             value.get("reason"), value.get("worker"),
                             float(value.get("wall_s") or 0.0), value.get("uploaded"),
                             bool(value.get("already_stored")))
    if state == "FAILURE":
        return RemoteOutcome(False, "worker", f"the task failed on the worker: "
                                              f"{type(result.result).__name__}: "
                                              f"{result.result}")
    if state == "REVOKED":
        # Only its expiry revokes a task the controller still waits for.
        queue = target.queue_name
        if task.started_on is not None:
            return RemoteOutcome(False, "worker", (
                f"worker {task.started_on} began probing it but never finished (it died "
                f"or lost the broker), and no other worker took it before the task expired "
                f"{expires:g} s after queueing on {queue!r}: on Redis a dead worker's task "
                "goes to another worker after the workers' --visibility-timeout, which must "
                "be the sweep's. Check the queue's workers, then `fleet sweep --resume`"),
                task.started_on)
        if task.handed_back:
            return _unservable(task, expires)
        return RemoteOutcome(False, "queue", (
            f"no worker probed it within {expires:g} s of queueing on {queue!r}, so the "
            "task expired: the queue's workers were busy, or none lists this host in its "
            f"inventory or writes to this store. Start `fleet worker --queue {queue}` with "
            "the sweep's inventory and --db, then `fleet sweep --resume`"))
    return None


def _lost(task: _Pending, visibility: float | None) -> RemoteOutcome:
    """A task past its expiry plus one host budget that never settled."""
    queue = task.target.queue_name
    began = (f"worker {task.started_on} began probing it" if task.started_on
             else "it was never seen started")
    redis = (f" (Redis does so {visibility:g} s after delivery by the sweep's "
             "--visibility-timeout: every `fleet worker` must have the same)"
             if visibility else "")
    waited = task.expires + task.budget + SETTLE_GRACE_S
    return RemoteOutcome(False, "worker" if task.started_on else "queue", (
        f"no result {waited:g} s after queueing on {queue!r} (its expiry, {task.expires:g} "
        f"s, and one host's probe): {began}, but no worker finished it and the broker did "
        f"not hand it to another in time{redis}. Check the queue's workers, then "
        "`fleet sweep --resume`"), task.started_on)


def _unserved(target: Target, watch: _QueueWatch, since: dict[str, float], now: float,
              timeout_s: float) -> RemoteOutcome | None:
    queue = target.queue_name
    if not watch.asked or queue in watch.served:
        since.pop(queue, None)
        return None
    first = since.setdefault(queue, now)
    if now - first < timeout_s:
        return None
    return RemoteOutcome(False, "queue", (
        f"no worker consumes queue {queue!r} (waited {timeout_s:g} s): start "
        f"`fleet worker --queue {queue} --broker URL INVENTORY --db URL` where its hosts "
        "can be reached, then `fleet sweep --resume`"))

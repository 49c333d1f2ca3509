"""`fleet sweep --via celery` for real: Redis on 127.0.0.1:6379, `fleet worker` processes on
different queues, the real PostgreSQL store and the loopback SSH hosts.

Every host is stored exactly once; a worker SIGKILLed in the middle of a host loses nothing
(its task goes back to the queue after the broker's visibility timeout, and the
replacement worker probes the host); a host on a queue no worker serves is reported, not
waited for forever, and its run stays open for --resume. A worker refuses tasks of a
finished run, and hands back those of another store or of a host it does not know. A
controller stopped with SIGTERM revokes the tasks not yet started. What crosses the broker
holds no address, user, key, password or trust decision. On Redis a task's expiry leaves
room for its re-delivery after the visibility timeout. A broker that cannot be reached, or
that goes away mid-sweep, ends the sweep with fleet's store error naming it (password
hidden), no traceback, and no run or an open one for --resume.

Each test's queues are named with a tag of its own on the shared Redis, and deleted (with
their bindings) when it ends.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet.analysis.sweep.nights import read_nights
from fleet.inventory import load_inventory
from fleet.probe.local import BenchOptions
from fleet.probe.run import ProbeOptions
from fleet.store.database import resolve
from fleet.store.ingest import RunInfo
from fleet.store.sweeps import (
    create_run,
    documents_stored,
    finish_run,
    newest_run,
    settled_hosts,
)
from fleet.sweep.distributed import (
    HANDED_BACK,
    TASK,
    expires_after_s,
    host_budget_s,
    make_app,
    redacted_broker,
    redelivery_s,
    run_on_celery,
    store_identity,
)
from tests.probe.conftest import Workspace
from tests.sweep.conftest import (
    engine_of,
    fleet_process,
    hang_once,
    kill_marked,
    stop,
    wait_for,
)

# On one pytest-xdist worker, one test after another: the module's set-up deletes the
# queues that earlier runs left behind, which another worker's test could be using, and
# the workers' names (w-fast@test, ...) are the same in every test.
pytestmark = pytest.mark.xdist_group("celery")

BROKER = os.environ.get("FLEET_TEST_REDIS", "redis://127.0.0.1:6379/0")
# The sweep's --timeout and the visibility timeout: a host's budget is its timeout plus
# three connect attempts of 10 s and their backoff (48 s), which the visibility timeout
# must exceed; the kill comes within a second or two of the host starting. The visibility
# timeout also exceeds the queue timeout (25 s) plus that budget (73 s), so that a task
# whose expiry did not count it would expire before Redis hands it to another worker.
HOST_TIMEOUT_S = "15"
VISIBILITY_S = "80"


@pytest.fixture(scope="module")
def redis_up() -> Any:
    import redis

    client = redis.Redis.from_url(BROKER, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.fail(f"Redis is not reachable at {BROKER} ({exc}): run .ci/run, or "
                    "redis-server --daemonize yes --port 6379", pytrace=False)
    # Queues earlier runs of these tests left behind, before they cleaned up after
    # themselves.
    for key in client.scan_iter("*orphan-*"):
        client.delete(key)
    return client


@pytest.fixture
def tag(redis_up: Any) -> Iterator[str]:
    """A tag for this test's queue names; its keys are deleted afterwards."""
    value = uuid.uuid4().hex[:8]
    yield value
    for key in redis_up.scan_iter(f"*{value}*"):
        redis_up.delete(key)


def _worker(workspace: Workspace, inventory: Path, db: str, queue: str, name: str,
            *extra: str) -> subprocess.Popen[Any]:
    return fleet_process(workspace, "worker", str(inventory), "--queue", queue,
                         "--broker", BROKER, "--db", db, "--concurrency", "4",
                         "--visibility-timeout", VISIBILITY_S, "--name", f"{name}@test",
                         "--accept-new-host-keys", *extra,
                         log=workspace.root / f"{name}.log")


def _served(app: Any, queue: str) -> bool:
    replies = app.control.inspect(timeout=1.0).active_queues() or {}
    return any(q["name"] == queue for queues in replies.values() for q in queues)


def _celery_sweep(workspace: Workspace, inventory: Path, postgres_url: str
                  ) -> subprocess.Popen[Any]:
    """A fingerprint-only `fleet sweep --via celery`, its output in sweep.out."""
    return fleet_process(workspace, "sweep", str(inventory), "--via", "celery",
                         "--broker", BROKER, "--db", postgres_url, "--fingerprint-only",
                         "--timeout", HOST_TIMEOUT_S, "--queue-timeout", "25",
                         "--visibility-timeout", VISIBILITY_S, "--json", "--no-report",
                         log=workspace.root / "sweep.out")


def test_celery_sweep_stores_each_host_once_and_survives_a_killed_worker(
        workspace: Workspace, postgres_url: str, tag: str) -> None:
    fast, slow, orphan = f"fast-{tag}", f"slow-{tag}", f"orphan-{tag}"
    script = hang_once(workspace.root)
    mark = workspace.root / "mark"
    servers = workspace.servers
    hang = workspace.ssh_host(servers[2], "h100-sxm5-passthrough", queue=slow,
                              python=str(script))
    hang["env"]["FLEET_TEST_MARK"] = str(mark)
    hosts = {
        "lambda/a": workspace.ssh_host(servers[0], "provider-b-a100-sxm4", queue=fast),
        "lambda/b": workspace.ssh_host(servers[1], "provider-a-a100-pcie", queue=fast),
        "coreweave/c": hang,
        "nebius/d": workspace.ssh_host(servers[3], "h200-sxm-x2-passthrough", queue=orphan),
    }
    inventory = workspace.inventory(hosts)
    (workspace.home / ".config" / "fleet").mkdir(parents=True, exist_ok=True)
    workers = [_worker(workspace, inventory, postgres_url, fast, "w-fast"),
               _worker(workspace, inventory, postgres_url, slow, "w-slow-1")]
    sweep = _celery_sweep(workspace, inventory, postgres_url)
    try:
        wait_for(mark.exists, 120, "coreweave/c to be mid-probe on w-slow-1")
        os.kill(workers[1].pid, signal.SIGKILL)
        workers[1].wait(10)
        kill_marked(mark)
        workers.append(_worker(workspace, inventory, postgres_url, slow, "w-slow-2"))
        sweep.wait(240)
    finally:
        stop(sweep)
        for worker in workers:
            stop(worker)
        kill_marked(mark)
    out = (workspace.root / "sweep.out").read_text()
    assert sweep.returncode == 3, out[-4000:]
    report = json.loads(out[out.index("{\n"):out.rindex("}") + 1])
    by_host = {f"{h['provider']}/{h['host']}": h for h in report["hosts"]}
    assert [key for key, h in by_host.items() if h["ok"]] == ["lambda/a", "lambda/b",
                                                              "coreweave/c"]
    # The killed worker's host was probed again, by its replacement.
    assert report["workers"]["coreweave/c"] == "w-slow-2@test"
    assert report["workers"]["lambda/a"] == report["workers"]["lambda/b"] == "w-fast@test"
    orphaned = by_host["nebius/d"]
    assert orphaned["stage"] == "queue"
    assert f"no worker consumes queue '{orphan}'" in orphaned["reason"]
    assert "then `fleet sweep --resume`" in orphaned["reason"]
    engine = engine_of(postgres_url)
    run_id = report["run_id"]
    try:
        assert documents_stored(engine, run_id) == {"lambda/a": 1, "lambda/b": 1,
                                                    "coreweave/c": 1}
        settled = settled_hosts(engine, run_id)
        assert {k: s.status for k, s in settled.items()} == {
            "lambda/a": "stored", "lambda/b": "stored", "coreweave/c": "stored",
            "nebius/d": "failed"}
        # The queue's host was never reached, so the run stays open, as the message says.
        assert not report["finished"] and "stays open" in out
        run = newest_run(engine, "nightly")
        assert run is not None and run.id == run_id and run.finished_at is None
        resumed = workspace.fleet("sweep", str(inventory), "--resume", "--fingerprint-only",
                                  "--accept-new-host-keys", "--json", "--no-report",
                                  "--db", postgres_url)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert resumed.report["run_id"] == run_id
        assert resumed.report["probed"] == ["nebius/d"]
        assert documents_stored(engine, run_id) == {"lambda/a": 1, "lambda/b": 1,
                                                    "coreweave/c": 1, "nebius/d": 1}
        run = newest_run(engine, "nightly")
        assert run is not None and run.finished_at is not None
    finally:
        engine.dispose()


def test_a_task_carries_no_address_credential_or_trust(
        workspace: Workspace, postgres_url: str, tag: str, redis_up: Any) -> None:
    queue = f"secret-{tag}"
    workspace.env_extra["FLEET_TEST_PASSWORD"] = "hunter2"
    inventory = load_inventory(workspace.inventory({"lambda/a": workspace.ssh_host(
        workspace.servers[0], address="10.9.8.7", user="secret-user", queue=queue,
        identity_file=["/keys/secret-key"], password_env="FLEET_TEST_PASSWORD")}))
    engine = engine_of(postgres_url)
    try:
        run_id = create_run(engine, RunInfo(kind="sweep", sweep="nightly"))
        store = store_identity(engine, resolve(postgres_url))
    finally:
        engine.dispose()
    app = make_app(BROKER)
    options = ProbeOptions(accept_new_host_keys=True, timeout_s=20.0)
    outcomes, interrupted = run_on_celery(
        app, inventory.targets, RunInfo(kind="sweep", sweep="nightly", run_id=run_id),
        store, options, lambda target, stage, message: None, queue_timeout_s=1.0)
    assert not interrupted and outcomes["lambda/a"].stage == "queue"
    (raw,) = redis_up.lrange(queue, 0, -1)
    message = json.loads(raw)
    body = base64.b64decode(message["body"]).decode()
    everything = body + json.dumps(message["headers"])
    for secret in ("10.9.8.7", "secret-user", "/keys/secret-key", "FLEET_TEST_PASSWORD",
                   "hunter2", "accept", "known_hosts", str(workspace.servers[0].port)):
        assert secret not in everything, secret
    _, kwargs, _ = json.loads(body)
    assert kwargs == {"run_id": run_id, "sweep": "nightly", "store": store,
                      "host": "lambda/a", "options": {
                          "bench": None, "timeout_s": 20.0, "connect_timeout_s": 10.0,
                          "connect_retries": 2, "visibility_timeout_s": 3600.0}}
    # It expires: the queue timeout, then the host's budget (timeout, connect attempts:
    # 53 s), then Redis's visibility timeout (3600 s by default) and a restore period.
    expires = datetime.fromisoformat(message["headers"]["expires"])
    left = (expires - datetime.now(UTC)).total_seconds()
    assert 3600 + 53 < left <= 1 + 53 + 3600 + 10, left
    assert message["headers"]["task"] == TASK


@pytest.mark.parametrize(("broker", "visibility", "room"), [
    ("redis://127.0.0.1:6379/0", None, 3600 + 10),
    ("redis://127.0.0.1:6379/0", 50.0, 50 + 1),
    ("redis://127.0.0.1:6379/0", 1800.0, 1800 + 10),
    ("amqp://guest@127.0.0.1:5672//", 1800.0, 0),  # RabbitMQ requeues at once
])
def test_a_task_expiry_leaves_room_for_its_redelivery(
        workspace: Workspace, broker: str, visibility: float | None, room: float) -> None:
    (target,) = load_inventory(workspace.inventory({"lambda/a": workspace.ssh_host(
        workspace.servers[0])})).targets
    options = ProbeOptions(timeout_s=None)  # the timeout by what runs: a fingerprint
    # One host's budget: the fingerprint's 300 s timeout, 3 connect attempts of 10 s and
    # 1 + 2 s of backoff between them: 300 + 30 + 3.
    budget = 333.0
    assert redelivery_s(broker, visibility) == room
    for position, waves in ((0, 1), (15, 1), (16, 2)):
        expires = expires_after_s(options, target, position, 60.0,
                                  redelivery_s(broker, visibility))
        # The last moment its task may start: the queue timeout, after the waves before it.
        latest_start = 60.0 + (waves - 1) * budget
        # A worker that dies then leaves it to Redis for the visibility timeout (plus a
        # restore period); handed to another worker, it must stay valid for one host's
        # probe, and not much longer (the controller waits for it).
        assert expires == latest_start + room + budget
        if broker.startswith("redis"):
            assert expires - latest_start - (visibility or 3600) >= budget


@pytest.mark.parametrize(("bench", "runtime", "budget"), [
    # 15 s of agent, 3 connect attempts of 10 s and 1 + 2 s of backoff between them.
    (False, {}, 48.0),
    # A benchmark on fleet's runtime may first install it: 3 x 60 s of inspect, payload
    # and index secret, then 1800 s of upload and install, apart from --timeout.
    (True, {}, 48.0 + 1980.0),
    # On the host's own Python nothing is installed.
    (True, {"runtime": {"use": "host"}}, 48.0),
])
def test_a_host_budget_counts_the_runtime_install_where_a_benchmark_may_run_it(
        workspace: Workspace, bench: bool, runtime: dict[str, Any], budget: float) -> None:
    (target,) = load_inventory(workspace.inventory({"lambda/a": workspace.ssh_host(
        workspace.servers[0], **runtime)})).targets
    options = ProbeOptions(timeout_s=15.0, bench=BenchOptions() if bench else None)
    assert host_budget_s(options, target) == budget
    # Queued first: the queue timeout, one budget, then Redis's visibility timeout (80 s)
    # and its restore period (10 s) for a worker that died.
    assert expires_after_s(options, target, 0, 25.0, redelivery_s(BROKER, 80.0)) == (
        25.0 + budget + 80.0 + 10.0)


def test_a_worker_refuses_a_finished_run_and_hands_back_what_it_cannot_serve(
        workspace: Workspace, postgres_url: str, tag: str) -> None:
    queue = f"refuse-{tag}"
    servers = workspace.servers
    known = {"lambda/a": workspace.ssh_host(servers[0], "provider-b-a100-sxm4", queue=queue)}
    partial = workspace.inventory(known, "partial.yaml")
    full = workspace.inventory({**known, "lambda/z": workspace.ssh_host(
        servers[1], "provider-a-a100-pcie", queue=queue)}, "full.yaml")
    engine = engine_of(postgres_url)
    finished = create_run(engine, RunInfo(kind="sweep", sweep="nightly"))
    finish_run(engine, finished)
    open_run = create_run(engine, RunInfo(kind="sweep", sweep="nightly"))
    store = store_identity(engine, resolve(postgres_url))
    app = make_app(BROKER)
    options = {"bench": None, "timeout_s": 20.0, "connect_timeout_s": 10.0,
               "connect_retries": 2}

    def send(run_id: int, host: str, to: str = store, expires: float = 900) -> Any:
        return app.send_task(TASK, kwargs={"run_id": run_id, "sweep": "nightly",
                                           "store": to, "host": host, "options": options},
                             queue=queue, expires=expires)

    workers = [_worker(workspace, partial, postgres_url, queue, "w-partial")]
    try:
        wait_for(lambda: _served(app, queue), 60, "w-partial to consume its queue")
        late = send(finished, "lambda/a")
        elsewhere = send(open_run, "lambda/a", to="1234/another-database", expires=12)
        unknown = send(open_run, "lambda/z")
        assert late.get(timeout=60)["stage"] == "refused"
        assert "finished at" in late.result["reason"]
        # Handed back again and again until it expires: nothing of it is written.
        wait_for(lambda: elsewhere.state == "REVOKED", 60, "the other store's task to expire")
        log = (workspace.root / "w-partial.log").read_text()
        assert "the task is for store 1234/another-database" in log
        assert "does not list this host" in log
        assert unknown.state != "SUCCESS"
        # Each hand-back says so, and why, where the controller reads the task's state.
        wait_for(lambda: unknown.state == HANDED_BACK, 60, "lambda/z to be handed back")
        assert unknown.info["hostname"] == "w-partial@test"
        assert "does not list this host" in unknown.info["why"]
        assert settled_hosts(engine, finished) == {}
        assert settled_hosts(engine, open_run) == {}
        # A worker whose inventory has the host takes it.
        workers.append(_worker(workspace, full, postgres_url, queue, "w-full"))
        # Generous: on a loaded CI machine the second worker started slowly (> 120 s once).
        assert unknown.get(timeout=300)["ok"] is True
        assert unknown.result["worker"] == "w-full@test"
        assert documents_stored(engine, open_run) == {"lambda/z": 1}
    finally:
        for worker in workers:
            stop(worker)
        engine.dispose()


def test_a_controller_stopped_with_sigterm_revokes_the_tasks_not_started(
        workspace: Workspace, postgres_url: str, tag: str) -> None:
    queue = f"revoke-{tag}"
    script = hang_once(workspace.root)
    mark = workspace.root / "mark"
    hang = workspace.ssh_host(workspace.servers[0], "provider-b-a100-sxm4", queue=queue,
                              python=str(script))
    hang["env"]["FLEET_TEST_MARK"] = str(mark)
    inventory = workspace.inventory({
        "lambda/a": hang,
        "lambda/b": workspace.ssh_host(workspace.servers[1], "provider-a-a100-pcie",
                                       queue=queue)})
    # One slot: lambda/b waits in the queue while lambda/a hangs.
    worker = _worker(workspace, inventory, postgres_url, queue, "w-one", "--concurrency",
                     "1")
    app = make_app(BROKER)
    sweep = fleet_process(workspace, "sweep", str(inventory), "--via", "celery",
                          "--broker", BROKER, "--db", postgres_url, "--fingerprint-only",
                          "--timeout", HOST_TIMEOUT_S, "--visibility-timeout", VISIBILITY_S,
                          "--no-report", log=workspace.root / "sweep.out")
    engine = engine_of(postgres_url)
    try:
        wait_for(lambda: _served(app, queue), 60, "w-one to consume its queue")
        wait_for(mark.exists, 120, "lambda/a to be mid-probe")
        sweep.send_signal(signal.SIGTERM)
        assert sweep.wait(60) == 130, (workspace.root / "sweep.out").read_text()[-3000:]
        kill_marked(mark)  # lambda/a's probe fails now, and the slot frees up
        run = newest_run(engine, "nightly")
        assert run is not None and run.finished_at is None
        wait_for(lambda: "lambda/a" in settled_hosts(engine, run.id), 60,
                 "lambda/a's probe to end")
        time.sleep(5)  # long enough for the worker to take lambda/b, were it not revoked
        assert "lambda/b" not in settled_hosts(engine, run.id)
        assert "Discarding revoked task" in (workspace.root / "w-one.log").read_text()
    finally:
        stop(sweep)
        stop(worker)
        kill_marked(mark)
        engine.dispose()


def test_a_sweep_whose_broker_cannot_be_reached_stops_before_its_run(
        workspace: Workspace, postgres_url: str) -> None:
    inventory = workspace.inventory({"lambda/a": workspace.ssh_host(workspace.servers[0])})
    started = time.monotonic()
    done = workspace.fleet("sweep", str(inventory), "--via", "celery",
                           "--broker", "redis://:hunter2@127.0.0.1:1/0", "--db", postgres_url,
                           "--fingerprint-only", "--no-report")
    assert time.monotonic() - started < 120  # not the probe's timeout of 180 s
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr and "hunter2" not in done.stderr
    assert "the Celery broker redis://:***@127.0.0.1:1/0 failed while checking it" \
        in done.stderr, done.stderr
    assert "Connection refused" in done.stderr and "No run was started" in done.stderr
    engine = engine_of(postgres_url)
    try:
        assert newest_run(engine, "nightly") is None
    finally:
        engine.dispose()


def test_a_broker_lost_mid_sweep_ends_it_with_a_message_and_the_run_open(
        workspace: Workspace, postgres_url: str, tag: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--requirepass",
                               "hunter2"], stdout=subprocess.DEVNULL)
    broker = f"redis://:hunter2@127.0.0.1:{port}/0"
    inventory = workspace.inventory({"lambda/a": workspace.ssh_host(
        workspace.servers[0], queue=f"nobody-{tag}")})
    engine = engine_of(postgres_url)
    sweep = None
    try:
        wait_for(lambda: _answers(port), 20, "the throwaway redis-server to start")
        # No worker serves the queue, and the sweep would wait 300 s for one.
        sweep = fleet_process(workspace, "sweep", str(inventory), "--via", "celery",
                              "--broker", broker, "--db", postgres_url, "--fingerprint-only",
                              "--queue-timeout", "300", "--no-report",
                              log=workspace.root / "sweep.out")
        wait_for(lambda: b"queued" in _redis_keys(port) or sweep.poll() is not None, 60,
                 "the sweep to send its task")
        server.kill()
        server.wait(10)
        assert sweep.wait(120) == 4, (workspace.root / "sweep.out").read_text()[-3000:]
        out = (workspace.root / "sweep.out").read_text()
        assert "Traceback" not in out and "hunter2" not in out, out[-3000:]
        assert f"the Celery broker redis://:***@127.0.0.1:{port}/0 failed while " \
               "following the tasks" in out, out[-3000:]
        assert "`fleet sweep --resume`" in out
        run = newest_run(engine, "nightly")
        assert run is not None and run.finished_at is None
        # Nor ended: a night cut short by its broker must not count in the history.
        assert run.id not in [night.run_id for night in read_nights(engine, "nightly")]
    finally:
        if sweep is not None:
            stop(sweep)
        if server.poll() is None:
            server.kill()
        engine.dispose()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _redis_keys(port: int) -> bytes:
    """Whether the sweep's task is in the broker: its queue's key, as b"queued" or b""."""
    import redis

    client = redis.Redis(port=port, password="hunter2", socket_connect_timeout=1)
    try:
        return b"queued" if any(b"nobody-" in key for key in client.scan_iter()) else b""
    except redis.exceptions.RedisError:
        return b""
    finally:
        client.close()


class _FakeResult:
    """A task that a worker started and never finished, then (maybe) expired."""

    def __init__(self, states: list[str]) -> None:
        self.id = uuid.uuid4().hex
        self.states = states
        self.info = {"hostname": "w-dead@test"}
        self.revoked = False

    @property
    def state(self) -> str:
        self.reads = getattr(self, "reads", 0) + 1
        assert self.reads < 100, "the controller waits for this task forever"
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def revoke(self) -> None:
        self.revoked = True


class _FakeApp:
    def __init__(self, states: list[str]) -> None:
        from types import SimpleNamespace

        self.conf = SimpleNamespace(broker_url="redis://127.0.0.1:6379/0",
                                    broker_transport_options={"visibility_timeout": 80.0})
        self.results: list[_FakeResult] = []
        self.states = states
        served = {"w-alive@test": [{"name": "lambda"}]}
        self.control = SimpleNamespace(
            inspect=lambda timeout: SimpleNamespace(active_queues=lambda: served),
            revoke=lambda ids: None)
        self.sent: list[dict[str, Any]] = []

    def send_task(self, name: str, kwargs: dict[str, Any], queue: str, expires: float
                  ) -> _FakeResult:
        self.sent.append({"kwargs": kwargs, "queue": queue, "expires": expires})
        self.results.append(_FakeResult(list(self.states)))
        return self.results[-1]

    def connection_for_write(self) -> Any:
        raise RuntimeError("no transport in this test")


@pytest.mark.parametrize(("states", "stage", "said"), [
    # Started, then never settled: the controller gives up at expiry plus one host's probe.
    (["STARTED"], "worker", "no result"),
    # Started, then expired before another worker got it: not "no worker probed it".
    (["STARTED", "STARTED", "REVOKED"], "worker", "began probing it but never finished"),
])
def test_a_task_whose_worker_died_is_given_up_with_what_happened(
        workspace: Workspace, states: list[str], stage: str, said: str) -> None:
    (target,) = load_inventory(workspace.inventory({"lambda/a": workspace.ssh_host(
        workspace.servers[0])})).targets
    options = ProbeOptions(timeout_s=15.0)
    app = _FakeApp(states)
    now = [0.0]

    def clock() -> float:  # time runs fast once the task is sent and seen started
        now[0] += 0 if not app.results else 100.0
        return now[0]

    outcomes, interrupted = run_on_celery(
        app, (target,), RunInfo(kind="sweep", sweep="nightly", run_id=1), "store", options,
        lambda target, stage, message: None, queue_timeout_s=25.0, clock=clock)
    (sent,) = app.sent
    # The queue timeout, one host budget (15 s of agent, 3 x 10 s of connect, 1 + 2 s of
    # backoff: 48 s), the visibility timeout and its restore period.
    assert sent["expires"] == 25.0 + 48.0 + 80.0 + 10
    assert sent["kwargs"]["options"]["visibility_timeout_s"] == 80.0
    outcome = outcomes["lambda/a"]
    assert not interrupted and outcome.stage == stage and said in (outcome.reason or "")
    assert outcome.worker == "w-dead@test"
    assert "--visibility-timeout" in (outcome.reason or "")
    assert "`fleet sweep --resume`" in (outcome.reason or "")
    assert app.results[0].revoked == (states == ["STARTED"])


class _GaveUpResult(_FakeResult):
    """A task whose result store went away: reading its state raises what `raises` gives."""

    def __init__(self, states: list[str], raises: BaseException) -> None:
        super().__init__(states)
        self.raises = raises
        self.backend: Any = "the result store"

    @property
    def state(self) -> str:
        raise self.raises


@pytest.mark.parametrize(("raised", "is_broker"), [
    # What Celery's Redis result backend raises once it stops reconnecting.
    (RuntimeError("Retry limit exceeded while trying to reconnect to the Celery result "
                  "store backend. The Celery application must be restarted."), True),
    # Any other RuntimeError is a bug: shown as itself, not blamed on the broker.
    (RuntimeError("dictionary changed size during iteration"), False),
])
def test_only_the_result_stores_give_up_is_called_a_broker_failure(
        workspace: Workspace, monkeypatch: pytest.MonkeyPatch, raised: RuntimeError,
        is_broker: bool) -> None:
    from fleet.errors import StoreError

    (target,) = load_inventory(workspace.inventory({"lambda/a": workspace.ssh_host(
        workspace.servers[0])})).targets
    app = _FakeApp(["STARTED"])
    sent: list[_GaveUpResult] = []

    def send_task(name: str, kwargs: dict[str, Any], queue: str, expires: float
                  ) -> _GaveUpResult:
        sent.append(_GaveUpResult(["STARTED"], raised))
        return sent[-1]

    monkeypatch.setattr(app, "send_task", send_task)
    with pytest.raises(StoreError if is_broker else RuntimeError) as caught:
        run_on_celery(app, (target,), RunInfo(kind="sweep", sweep="nightly", run_id=1),
                      "store", ProbeOptions(timeout_s=15.0),
                      lambda target, stage, message: None, queue_timeout_s=25.0)
    if is_broker:
        assert "failed while following the tasks: Retry limit exceeded" in str(caught.value)
        assert "`fleet sweep --resume`" in str(caught.value)
        assert sent[0].backend is None  # let go of, so that collecting it is quiet
    else:
        assert caught.value is raised


class _ScriptedResult(_FakeResult):
    """A task whose state and meta follow a script, one step a read of its state; the
    last step holds."""

    def __init__(self, steps: list[tuple[str, dict[str, Any]]]) -> None:
        super().__init__([state for state, _ in steps])
        self.steps = steps

    @property
    def state(self) -> str:
        self.reads = getattr(self, "reads", 0) + 1
        assert self.reads < 100, "the controller waits for this task forever"
        state, self.info = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        return state


WHY = ("lambda/a: the worker's inventory partial.yaml does not list this host; give the "
       "worker the inventory the sweep uses")
PARTIAL = {"hostname": "w-partial@test", "pid": 101}
HANDED = {**PARTIAL, "why": WHY}


@dataclasses.dataclass
class _ScriptedRun:
    outcome: Any
    interrupted: bool
    expires: float
    result: _ScriptedResult
    said: list[tuple[float, str, str]]  # (clock, stage, message) of every observation
    budget: float


def _run_scripted(workspace: Workspace, monkeypatch: pytest.MonkeyPatch,
                  steps: list[tuple[str, dict[str, Any]]]) -> _ScriptedRun:
    """One host's task through `run_on_celery`, its states from `steps`, on a clock that
    moves 5 s a round once the task is sent: queue timeout 25 s, host timeout 15 s."""
    (target,) = load_inventory(workspace.inventory({"lambda/a": workspace.ssh_host(
        workspace.servers[0])})).targets
    options = ProbeOptions(timeout_s=15.0)
    app = _FakeApp([])
    sent: list[tuple[float, _ScriptedResult]] = []

    def send_task(name: str, kwargs: dict[str, Any], queue: str, expires: float
                  ) -> _ScriptedResult:
        sent.append((expires, _ScriptedResult(list(steps))))
        return sent[-1][1]

    monkeypatch.setattr(app, "send_task", send_task)
    now = [0.0]
    said: list[tuple[float, str, str]] = []

    def clock() -> float:
        now[0] += 0 if not sent else 5.0
        return now[0]

    outcomes, interrupted = run_on_celery(
        app, (target,), RunInfo(kind="sweep", sweep="nightly", run_id=1), "store", options,
        lambda target, stage, message: said.append((now[0], stage, message)),
        queue_timeout_s=25.0, clock=clock)
    ((expires, result),) = sent
    # The host budget: 15 s of agent, 3 x 10 s of connect and 1 + 2 s of backoff.
    return _ScriptedRun(outcomes["lambda/a"], interrupted, expires, result, said, 48.0)


@pytest.mark.parametrize(("why", "steps", "given_up_early"), [
    # ... and seen taking it once more when the deadline comes: not probing.
    ("taken and handed back again and again by one worker",
     [("STARTED", PARTIAL), (HANDED_BACK, HANDED)] * 3 + [("STARTED", PARTIAL)], True),
    ("handed back, then started by a worker that has the host",
     [("STARTED", PARTIAL), (HANDED_BACK, HANDED), ("STARTED", {"hostname": "w-full@test",
                                                                "pid": 202})], False),
    ("handed back, then started by the same name restarted (another pid)",
     [("STARTED", PARTIAL), (HANDED_BACK, HANDED), ("STARTED", {**PARTIAL, "pid": 303})],
     False),
])
def test_a_task_only_ever_handed_back_is_given_up_at_its_expiry_less_redelivery(
        workspace: Workspace, monkeypatch: pytest.MonkeyPatch, why: str,
        steps: list[tuple[str, dict[str, Any]]], given_up_early: bool) -> None:
    run = _run_scripted(workspace, monkeypatch, steps)
    budget = run.budget
    given_up = [when for when, stage, _ in run.said if stage == "failed"]
    # Its expiry holds Redis's 80 s visibility timeout and a 10 s restore period, for a
    # dead worker's task; a task only ever handed back has nothing running, so the
    # controller waits the queue timeout, one host budget and the grace.
    assert run.expires == 25.0 + budget + 90.0
    assert not run.interrupted and run.result.revoked
    reason = run.outcome.reason or ""
    if given_up_early:
        assert 25.0 + budget + 60.0 < given_up[0] <= 25.0 + budget + 60.0 + 10.0
        assert run.outcome.stage == "queue" and run.outcome.worker is None
        assert f"w-partial@test handed it back: {WHY}" in reason
        assert "began probing" not in reason
    else:  # a worker is probing it: waited for to its expiry and one host's probe
        assert given_up[0] > 25.0 + budget + 90.0 + budget + 60.0
        assert run.outcome.stage == "worker" and "no result" in reason


def test_a_task_from_another_fleet_version_is_run_or_refused_clearly() -> None:
    from fleet.sweep.distributed import _options_from

    bench = dataclasses.asdict(BenchOptions())
    old = {**{k: v for k, v in bench.items() if k != "flush_always"}, "flush_auto": True}
    assert _options_from({"bench": old}, False).bench == BenchOptions()  # 1.1's opt-in
    with pytest.raises(ValueError, match=r"does not know the harness option\(s\) flush_smartly"):
        _options_from({"bench": {**bench, "flush_smartly": True}}, False)


def test_a_worker_starting_a_handed_back_task_as_its_deadline_passes_is_waited_for(
        workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    # The state is read once a round and judged before the deadline: a task that another
    # worker started since the last round must not be revoked (that worker would go on
    # probing a host the run reports failed).
    budget = _run_scripted(workspace, monkeypatch, [(HANDED_BACK, HANDED)]).budget
    # Round r reads the clock at 5 r s; the first round past the handed-back deadline
    # (25 s queue timeout, one host budget, the 60 s grace) is the first to see w-full.
    first_past = int((25.0 + budget + 60.0) // 5.0) + 1
    run = _run_scripted(workspace, monkeypatch, [(HANDED_BACK, HANDED)] * (first_past - 1) + [
        ("STARTED", {"hostname": "w-full@test", "pid": 202})])
    assert [when for when, _, message in run.said
            if message == "probing on w-full@test"] == [5.0 * first_past]
    assert run.outcome.stage == "worker" and run.outcome.worker == "w-full@test"


def test_a_brokers_password_is_hidden_in_a_failover_list_too() -> None:
    assert redacted_broker("redis://:s3cret@cache:6379/0") == "redis://:***@cache:6379/0"
    shown = redacted_broker("amqp://u:s3cret@a:5672//;amqp://v:other@b:5672//")
    assert shown == "amqp://u:***@a:5672//;amqp://v:***@b:5672//"


def _aliases(workspace: Workspace, **settings: Any) -> dict[str, dict[str, Any]]:
    """Three inventory hosts that are one machine: aliases of one sshd replaying one
    recording, whose agents may send the very same document in the same second."""
    server = workspace.servers[0]
    return {f"lambda/{name}": workspace.ssh_host(server, "h100-sxm5-mig", **settings)
            for name in ("alpha", "beta", "gamma")}


def _assert_each_alias_stored(report: dict[str, Any], engine: Any) -> None:
    assert {(h["ok"], h["stage"]) for h in report["hosts"]} == {(True, "stored")}, \
        report["hosts"]
    assert documents_stored(engine, report["run_id"]) == {
        "lambda/alpha": 1, "lambda/beta": 1, "lambda/gamma": 1}
    assert {tuple(p["hosts"]) for p in report["same_gpus"]} == {
        ("lambda/alpha", "lambda/beta"), ("lambda/alpha", "lambda/gamma"),
        ("lambda/beta", "lambda/gamma")}
    # The history knows each host, not only the first.
    assert sorted(report["findings"]["new"]) == ["lambda/alpha", "lambda/beta",
                                                 "lambda/gamma"]


def test_one_machine_under_three_names_is_never_interrupted_on_celery(
        workspace: Workspace, postgres_url: str, tag: str) -> None:
    queue = f"same-{tag}"
    inventory = workspace.inventory(_aliases(workspace, queue=queue))
    (workspace.home / ".config" / "fleet").mkdir(parents=True, exist_ok=True)
    worker = _worker(workspace, inventory, postgres_url, queue, "w-same")
    sweep = _celery_sweep(workspace, inventory, postgres_url)
    try:
        sweep.wait(180)
    finally:
        stop(sweep)
        stop(worker)
    out = (workspace.root / "sweep.out").read_text()
    assert sweep.returncode == 0, out[-4000:]
    report = json.loads(out[out.index("{\n"):out.rindex("}") + 1])
    assert report["finished"] and not report["interrupted"]
    assert "the sweep was interrupted" not in out
    engine = engine_of(postgres_url)
    try:
        _assert_each_alias_stored(report, engine)
    finally:
        engine.dispose()


def test_one_machine_under_three_names_in_a_local_sweep(
        workspace: Workspace, postgres_url: str) -> None:
    inventory = workspace.inventory(_aliases(workspace))
    result = workspace.fleet("sweep", str(inventory), "--fingerprint-only", "--json",
                             "--no-report", "--accept-new-host-keys", "--db", postgres_url)
    assert result.returncode == 0, result.stderr[-3000:]
    engine = engine_of(postgres_url)
    try:
        _assert_each_alias_stored(result.report, engine)
    finally:
        engine.dispose()

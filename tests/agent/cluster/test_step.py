"""`python -m agent cluster` end to end: "nodes" are real agent processes on 127.0.0.1, each
starting its real gloo ranks, meeting at a real TCPStore; nothing is mocked. Failures are
made as they happen on a cluster: a node that never comes, a node killed mid-collective,
a controller closing the channel."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from agent.__main__ import main as agent_main
from agent.cluster import step
from tests.conftest import ROOT


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _node(port: int, nodes: int, node_rank: int, ranks: int, *extra: str,
          stdin: int | IO[bytes] = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent", "cluster", "--address", "127.0.0.1", "--port",
         str(port), "--nodes", str(nodes), "--node-rank", str(node_rank),
         "--ranks-per-node", str(ranks), *extra],
        cwd=ROOT, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, start_new_session=True)


def _events(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    events = [json.loads(line) for line in text.splitlines()]
    assert all(e["event"] == "progress" for e in events[:-1])
    assert events[-1]["event"] == "cluster"
    body: dict[str, Any] = events[-1]["cluster"]
    return events[:-1], body


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, dict[str, Any]]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, _events(out)[1]


def _ranks_alive(port: int) -> list[int]:
    """The pids of live rank processes of the step at `port`, read from /proc."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (b"agent.cluster.rank" in b" ".join(cmdline) and str(port).encode() in cmdline
                and state != "Z"):
            alive.append(int(entry.name))
    return alive


def _wait_gone(port: int, within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while _ranks_alive(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _ranks_alive(port)


def _read_until(proc: subprocess.Popen[str], needle: str, within_s: float) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"no {needle!r} in {lines}")


def _check_figures(body: dict[str, Any], world: int, sizes: list[int],
                   ops: tuple[str, ...] = ("all_reduce", "all_gather")) -> None:
    figures = body["figures"]
    assert [(f["op"], f["size_bytes"]) for f in figures] == [
        (op, s) for op in ops for s in sizes]
    for f in figures:
        assert f["ranks"] == world and f["checked"] is True and f["dtype"] == "float32"
        assert (f["warmup"], f["iterations"]) == (5, 20)
        assert len(f["samples_busbw_gbs"]) == 20
        # nccl-tests' definitions, recomputed from the figure's own time and size.
        factor = 2 * (world - 1) / world if f["op"] == "all_reduce" else (world - 1) / world
        algbw = f["size_bytes"] / (f["time_us"] / 1e6) / 1e9
        assert f["algbw_gbs"] == pytest.approx(algbw, rel=1e-5)
        assert f["busbw_gbs"] == pytest.approx(algbw * factor, rel=1e-5)
        # The median iteration's: half the samples at or above it.
        assert f["busbw_gbs"] == pytest.approx(
            statistics.median_low(f["samples_busbw_gbs"]), rel=1e-5)
        assert f["busbw_min_gbs"] == min(f["samples_busbw_gbs"]) > 0
        assert f["busbw_max_gbs"] == max(f["samples_busbw_gbs"])


@pytest.mark.parametrize(("ranks", "sizes"), [(1, "64K,256K"), (2, "16K,64K")])
def test_two_nodes_report_the_same_checked_figures(ranks: int, sizes: str) -> None:
    port = _free_port()
    extra = ("--sizes", sizes, "--timeout-s", "30", "--step", "pair-1-0", "--algo", "ring",
             "--interface", "lo")
    started = time.monotonic()
    nodes = [_node(port, 2, i, ranks, *extra) for i in (0, 1)]
    results = [_finish(node, 60) for node in nodes]
    wall = time.monotonic() - started
    assert [code for code, _ in results] == [0, 0], results
    bodies = [body for _, body in results]
    world = 2 * ranks
    for i, body in enumerate(bodies):
        assert body["schema"] == "fleet-cluster/1" and body["errors"] == []
        assert body["step"] == {"id": "pair-1-0", "nodes": 2, "node_rank": i,
                                "ranks_per_node": ranks, "world": world,
                                "address": "127.0.0.1", "port": port}
        assert body["backend"] == "gloo" and body["gpus"] == [] and body["algo"] == "Ring"
        # What the ranks ran under: NCCL's log asked for, the step's own settings.
        assert body["settings"]["NCCL_DEBUG"] == "INFO"
        assert body["settings"]["NCCL_DEBUG_SUBSYS"] == "INIT,NET,ENV"
        assert body["settings"]["NCCL_ALGO"] == "Ring"
        assert body["settings"]["NCCL_SOCKET_IFNAME"] == "lo"
        assert body["settings"]["GLOO_SOCKET_IFNAME"] == "lo"
        assert body["transport"]["network"] is None and body["transport"]["gdrdma"] is None
        assert 0 < body["wall_s"] < wall
        assert body["nics"] is None  # no --nic-test
        _check_figures(body, world, [16 << 10, 64 << 10] if ranks == 2 else
                       [64 << 10, 256 << 10])
    # Each iteration's time is max-reduced over the world: both nodes hold the same.
    assert bodies[0]["figures"] == bodies[1]["figures"]


def test_the_whole_clusters_step_runs_every_collective_checked() -> None:
    # The four collectives large jobs run (all-reduce, FSDP's all-gather and
    # reduce-scatter, a mixture of experts' all-to-all), each first result checked on
    # every rank (a reduce-scatter's part holds the world's sum, an all-to-all's block i
    # what rank i sent this one) and timed by nccl-tests' definitions.
    port = _free_port()
    # --nic-test is a pair's: the whole cluster's step runs none.
    extra = ("--whole", "--sizes", "16K,64K", "--timeout-s", "30", "--interface", "lo",
             "--nic-test")
    nodes = [_node(port, 2, i, 2, *extra) for i in (0, 1)]
    results = [_finish(node, 90) for node in nodes]
    assert [code for code, _ in results] == [0, 0], results
    bodies = [body for _, body in results]
    for body in bodies:
        assert body["errors"] == [] and body["nics"] is None
        _check_figures(body, 4, [16 << 10, 64 << 10],
                       ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"))
    assert bodies[0]["figures"] == bodies[1]["figures"]


def test_a_port_that_flapped_or_erred_during_the_step_is_named(tmp_path: Path) -> None:
    # Each node reads its RDMA ports' error counters before its ranks start and after
    # they end: what rose in between is in its event, port by port (here a copy of a
    # host's sysfs, the counters raised while the ranks run, as a flapping cable would).
    roots = []
    for node in (0, 1):
        root = tmp_path / f"node{node}"
        at = root / "sys/class/infiniband/mlx5_0/ports/1/counters"
        at.mkdir(parents=True)
        for name, value in (("link_downed", 4), ("symbol_error", 100),
                            ("port_rcv_errors", 7)):
            (at / name).write_text(f"{value}\n")
        roots.append(root)
    port = _free_port()
    nodes = [_node(port, 2, i, 1, "--sizes", "16M", "--timeout-s", "30", "--interface", "lo",
                   "--sysfs-root", str(roots[i])) for i in (0, 1)]
    _read_until(nodes[1], "joined", 60)
    flapped = roots[1] / "sys/class/infiniband/mlx5_0/ports/1/counters"
    (flapped / "link_downed").write_text("5\n")
    (flapped / "symbol_error").write_text("127\n")
    (flapped / "port_rcv_errors").write_text("0\n")  # reset meanwhile
    results = [_finish(node, 60) for node in nodes]
    assert [code for code, _ in results] == [0, 0], results
    quiet, erred = (body["counters"] for _, body in results)
    assert quiet == {"ports": 1, "rose": {}, "reset": []}
    assert erred == {"ports": 1, "rose": {"mlx5_0/1": {"link_downed": 1, "symbol_error": 27}},
                     "reset": ["mlx5_0/1 port_rcv_errors"]}


def test_a_pairs_nics_are_measured_after_its_collectives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --nic-test: once the ranks are done, each node's active RDMA ports (here a sysfs
    # tree of two) against the other's, on the step's port, with `ib_write_bw`: here the
    # replay of perftest on the wire (tests/agent/perftest_replay.py) first on PATH.
    from tests.agent import perftest_replay
    from tests.agent.test_network_perftest import _host

    perftest_replay.install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PERFTEST_REPLAY_LOG", str(log))
    roots = [_host(tmp_path / f"node{i}", ["mlx5_1", "mlx5_0"]) for i in (0, 1)]
    port = _free_port()
    nodes = [_node(port, 2, i, 1, "--sizes", "16K", "--timeout-s", "30", "--interface", "lo",
                   "--nic-test", "--sysfs-root", roots[i]) for i in (0, 1)]
    outs = [node.communicate(timeout=90)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outs
    for out, role, gbps in zip(outs, ("server", "client"), (0.807404, 98.02), strict=True):
        progress, body = _events(out)
        assert body["errors"] == [] and len(body["figures"]) == 2
        assert body["nics"] == {
            "tool": "ib_write_bw", "role": role, "skipped": None, "paired_by": "name",
            "tests": [{"device": device, "port": 1, "peer": f"{device}/1", "rate_gbps": 400.0,
                       "gbps": gbps, "peak_gbps": None, "gdr": False,
                       "seconds": test["seconds"], "error": None}
                      for device, test in zip(("mlx5_0", "mlx5_1"), body["nics"]["tests"],
                                              strict=True)]}
        said = [e["message"] for e in progress]
        assert "testing mlx5_1/1 against the other node's mlx5_1/1 with ib_write_bw" in said
        # The counters span the NIC tests: read after them (this tree has none).
        assert body["counters"] == {"ports": 0, "rose": {}, "reset": []}
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    servers = [c for c in calls if c["role"] == "server"]
    assert [c["argv"][:6] for c in servers] == [["-d", d, "-i", "1", "-p", str(port)]
                                               for d in ("mlx5_0", "mlx5_1")]
    assert servers[0]["argv"][8:12] == ["-D", "5", "-s", "8388608"]


def test_a_size_predicted_past_its_budget_stops_that_collective_said() -> None:
    import argparse

    from agent.cluster import rank

    args = argparse.Namespace(warmup=5, iterations=20)
    cpu = type("Device", (), {"type": "cpu"})()
    # 1 GiB took 500 ms an iteration: 4 GiB would take 2 s, x 25 = 50 s, over 30.
    last = {"size_bytes": 1 << 30, "ms": [500.0] * 20}
    why = rank._skip(None, None, "all_reduce", 4 << 30, last, args, cpu)
    assert why == ("stopped before 4 GiB: predicted 50 s at 1 GiB's pace, over the 30-s "
                   "budget of one size")
    # 4 GiB at 100 ms an iteration: 10 s, within the budget.
    fast = {"size_bytes": 1 << 30, "ms": [100.0] * 20}
    assert rank._skip(None, None, "all_reduce", 4 << 30, fast, args, cpu) is None
    # A collective the backend lacks is told from a peer gone.
    assert rank._unsupported(RuntimeError("ProcessGroupGloo does not support reduce_scatter"))
    assert not rank._unsupported(RuntimeError("Connection closed by peer [127.0.0.1]:29500"))


def test_a_node_that_never_arrives_fails_the_other_within_the_timeout() -> None:
    # Node 0 hosts the store and waits for node 1; node 1 of another step waits for a
    # store nobody hosts. Both at once: the two sides of the rendezvous.
    ports = [_free_port(), _free_port()]
    alone = [_node(ports[0], 2, 0, 1, "--timeout-s", "3"),
             _node(ports[1], 2, 1, 1, "--timeout-s", "3")]
    results = [_finish(node, 120) for node in alone]
    for port, (code, body) in zip(ports, results, strict=True):
        assert code == 3
        assert body["figures"] == []
        [error] = body["errors"]
        assert error["stage"] == "rendezvous"
        assert error["message"].startswith(
            f"could not join the rendezvous 127.0.0.1:{port} within 3 s: "), error
        # The ranks' own timeout with torch's reason, not the command's backstop
        # (3 + GRACE_S of silence, which says only that).
        assert "said nothing" not in error["message"], error
    assert "waiting for clients" in results[0][1]["errors"][0]["message"]
    assert "trying to connect" in results[1][1]["errors"][0]["message"]
    assert _wait_gone(ports[0], 2) == [] and _wait_gone(ports[1], 2) == []


def test_a_node_killed_mid_collective_fails_the_other_and_leaves_no_rank() -> None:
    port = _free_port()
    # gloo's default sizes (1M, 16M): seconds of work left once the first is timed. The
    # timeout is long, so that only seeing the peer gone ends the survivor before it.
    survivor = _node(port, 2, 0, 1, "--timeout-s", "90")
    victim = _node(port, 2, 1, 1, "--timeout-s", "90")
    _read_until(victim, "all_reduce of 1 MiB over 2 ranks: checked", 180)
    victims_ranks = _ranks_alive(port)
    assert len(victims_ranks) == 2  # one a node
    # The node's command alone, SIGKILL: its ranks must see it gone and follow.
    os.kill(victim.pid, signal.SIGKILL)
    started = time.monotonic()
    code, body = _finish(survivor, 150)
    assert time.monotonic() - started < 90
    assert code == 3 and body["figures"] == []
    [error] = body["errors"]
    assert error["stage"] in ("all_reduce", "all_gather")
    assert error["message"].startswith(f"{error['stage']} of "), error
    assert " failed on rank 0: " in error["message"]
    victim.communicate(timeout=10)
    assert _wait_gone(port, 5) == []


@pytest.mark.parametrize(("how", "said"), [("eof", "stopped by the controller"),
                                           ("sigterm", "stopped by signal SIGTERM")])
def test_a_stopped_step_kills_its_ranks_and_says_so(how: str, said: str) -> None:
    port = _free_port()
    node = _node(port, 2, 0, 2, "--timeout-s", "60", "--stop-on-eof",
                 stdin=subprocess.PIPE)
    _read_until(node, "joining 127.0.0.1", 180)
    assert len(_ranks_alive(port)) == 2
    assert node.stdin is not None
    if how == "eof":
        node.stdin.close()  # the controller closing the SSH channel
    else:
        node.send_signal(signal.SIGTERM)
    started = time.monotonic()
    out = node.stdout.read() if node.stdout else ""
    node.wait(timeout=60)
    # Stopped at once, not at the ranks' timeout of 60 s.
    assert time.monotonic() - started < 30
    assert node.returncode == 3
    _, body = _events(out)
    assert body["errors"] == [{"stage": "stopped", "message": said}]
    assert body["figures"] == []
    assert _ranks_alive(port) == []


def test_fewer_gpus_than_ranks_asked_is_said() -> None:
    # This machine has no CUDA: NCCL asked for one GPU a rank finds none.
    code, body = _finish(_node(_free_port(), 1, 0, 1, "--backend", "nccl",
                               "--timeout-s", "5"), 30)
    assert code == 3 and body["backend"] == "nccl"
    [error] = body["errors"]
    assert error["stage"] == "ranks"
    assert error["message"].startswith("--ranks-per-node 1 needs 1 GPUs, and CUDA sees 0 "
                                       "here (CUDA_VISIBLE_DEVICES=")


@pytest.mark.parametrize(("args", "said"), [
    (["--nodes", "2", "--node-rank", "2"], "argument --node-rank: 2 is not below --nodes 2"),
    (["--nodes", "2", "--node-rank", "0", "--port", "80"],
     "argument --port: 80 is out of range: 1024-65535"),
    (["--nodes", "2", "--node-rank", "0", "--port", "70000"],
     "argument --port: 70000 is out of range"),
    (["--nodes", "2", "--node-rank", "0", "--algo", "Spiral"],
     "argument --algo: 'Spiral' is not one of NCCL's algorithms: Tree, Ring"),
    (["--nodes", "2", "--node-rank", "0", "--sizes", "16Q"],
     "argument --sizes: '16Q' is not a size"),
    (["--nodes", "2", "--slurm-nodes", "n1,n2"],
     "argument --slurm-nodes: SLURMD_NODENAME is not set: start it with srun"),
    (["--nodes", "3", "--slurm-nodes", "n1,n2"], "argument --slurm-nodes: 2 names for --nodes 3"),
    (["--nodes", "2", "--node-rank", "0", "--slurm-nodes", "n1,n2"],
     "argument --slurm-nodes: not allowed with argument --node-rank"),
    (["--nodes", "2", "--node-rank", "0", "--ops", "all_reduce,broadcast"],
     "argument --ops: 'all_reduce,broadcast': broadcast is not one of all_reduce, "
     "all_gather, reduce_scatter, all_to_all"),
    (["--nodes", "2", "--node-rank", "0", "--sizes", "4"],
     "argument --sizes: 4 bytes do not hold one float32 for each of the 2 ranks"),
    (["--nodes", "0", "--node-rank", "0"], "argument --nodes: 0 is out of range: 1 or more"),
    (["--nodes", "2", "--node-rank", "x"], "argument --node-rank: 'x' is not a whole number"),
    (["--nodes", "2", "--node-rank", "0", "--interface", "eth0;rm"],
     "argument --interface: 'eth0;rm' is not in NCCL_SOCKET_IFNAME's form"),
])
def test_bad_options_are_refused_naming_the_option(
        args: list[str], said: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    base = {"--address": "127.0.0.1", "--port": "29550", "--ranks-per-node": "1"}
    given = dict(zip(args[::2], args[1::2], strict=True))
    argv = ["cluster"] + [x for k, v in {**base, **given}.items() for x in (k, v)]
    with pytest.raises(SystemExit) as exited:
        agent_main(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_gloo_is_given_the_interface_nccls_form_picks() -> None:
    names = ["lo", "eth0", "eth1", "docker0", "ib0"]
    assert step.gloo_interface("eth", names) == "eth0"
    assert step.gloo_interface("=eth1", names) == "eth1"
    assert step.gloo_interface("^docker,lo", names) == "eth0"
    assert step.gloo_interface("^=eth0,lo,docker0", names) == "eth1"
    assert step.gloo_interface("bond", names) is None


PY38_CHECK = """
import json, sys
from agent.cluster import nccl_log, options, rank, step
log = open(sys.argv[1]).read()
print(json.dumps(nccl_log.transport([log]), sort_keys=True))
"""


def test_the_step_imports_and_parses_on_python_3_8(python38: str) -> None:
    # torch is not there: only the ranks import it.
    log = Path(__file__).parent / "nccl_logs" / "ib-gdrdma.log"
    done = subprocess.run([python38, "-c", PY38_CHECK, str(log)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gdrdma"] is True
    helped = subprocess.run([python38, "-m", "agent", "cluster", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert helped.returncode == 0, helped.stderr
    assert "python -m agent cluster --address 10.0.4.21" in helped.stdout


def test_a_rank_that_stalls_is_killed_by_the_command_past_the_timeout() -> None:
    # A hung CUDA call or an NCCL bootstrap that never returns looks like this: a rank
    # alive that says nothing. The command's own backstop, past the ranks' timeout.
    port = _free_port()
    # Timeouts long enough for ranks that import torch on a busy machine to meet: silence
    # longer than timeout + grace before the first word kills them as stalled too.
    peer = _node(port, 2, 1, 1, "--timeout-s", "10")
    said: list[dict[str, Any]] = []
    cfg = step.Config(address="127.0.0.1", port=port, nodes=2, node_rank=0,
                      ranks_per_node=1, backend="gloo", timeout_s=10.0, grace_s=1.0)
    done: list[tuple[dict[str, Any], int]] = []
    worker = threading.Thread(target=lambda: done.append(step.run(cfg, said.append)))
    worker.start()
    # Until a collective was checked: the ranks start torch first, which takes a busy
    # machine far longer than an idle one.
    deadline = time.monotonic() + 180
    while (not any("checked" in e["message"] for e in said) and not done
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert any("checked" in e["message"] for e in said), (said, done)
    [mine] = [pid for pid in _ranks_alive(port)
              if b"--rank\0000\0" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    os.kill(mine, signal.SIGSTOP)
    worker.join(timeout=120)
    [(body, code)] = done
    assert code == 3 and body["figures"] == []
    [error] = body["errors"]
    assert error["stage"] == "timeout"
    assert re.match(r"the ranks said nothing for 11 s after: all_(reduce|gather) of \d+ MiB "
                    r"over 2 ranks: checked; 5 warm-up, 20 timed; killed$", error["message"])
    peer.communicate(timeout=60)
    assert peer.returncode == 3
    assert _wait_gone(port, 5) == []


def test_a_port_taken_since_the_check_is_said_before_any_rank_starts() -> None:
    # Another process listens on the step's port (taken after `fleet cluster check`):
    # node 0 says so at once, rather than its peers' connections waiting out the timeout
    # in the wrong listener (issue 57).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        status, body = _finish(_node(port, 2, 0, 1, "--timeout-s", "60"), timeout=60)
    assert status == step.EXIT_FAILED
    [error] = body["errors"]
    assert error["stage"] == "rendezvous"
    assert error["message"].startswith(f"port {port} of 127.0.0.1 is taken on this node")
    assert "address already in use" in error["message"]
    assert body["figures"] == [] and body["backend"] is None
    # A connection the check's listener closed first, left in TIME_WAIT on the port, is
    # no taken port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()
        client.close()
    assert step.port_taken("127.0.0.1", port) is None


def test_under_srun_a_node_finds_its_place_by_its_slurm_name(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from agent.cluster.options import _slurm_rank

    names = ["gpu-a", "gpu-c", "gpu-b"]
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-b")
    assert _slurm_rank(argparse.ArgumentParser(), names, 3) == 2
    # srun placed the task on a node the step did not name.
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-z")
    with pytest.raises(SystemExit):
        agent_main(["cluster", "--address", "10.0.0.5", "--port", "29550", "--nodes", "3",
                    "--ranks-per-node", "1", "--slurm-nodes", ",".join(names)])
    assert ("this task runs on Slurm node gpu-z, which is not among gpu-a, gpu-c, gpu-b"
            in capsys.readouterr().err)

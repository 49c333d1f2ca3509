"""The pair step's per-NIC RDMA bandwidth test (agent/network/perftest.py): perftest's
published outputs and error texts read (tests/fixtures/perftest/README.md names each
source), the ports chosen from a sysfs tree, and both nodes' sides run against each other
on 127.0.0.1: with the real Debian binary (no RDMA device here: every NIC says so), and
with a replay of perftest on the wire (tests/agent/perftest_replay.py) for the figures."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.network import perftest
from tests.agent import perftest_replay

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PUBLISHED = FIXTURES / "perftest"
REPLAY = Path(__file__).resolve().parent / "perftest_replay.py"
MB = 2 ** 20 * 8 / 1e9  # one MB/sec (2^20 bytes) in Gb/s


def _text(name: str) -> str:
    return (PUBLISHED / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(("name", "expected"), [
    # MB/sec (perftest <= 24.04, Debian/Ubuntu's packages), server side, -D: no peak.
    ("deepops-server-mb.txt", {"bytes": 65536, "iterations": 1101500, "peak_gbps": None,
                               "average_gbps": 0.807404, "msg_rate_mpps": 0.183585}),
    # MiB/sec (24.07 and after): the same 2^20 bytes.
    ("mib-client.txt", {"bytes": 65536, "iterations": 5000, "peak_gbps": 92.5329,
                        "average_gbps": 92.5301, "msg_rate_mpps": 0.176487}),
    # Gb/sec, -a: the last row, 8 MiB; the first row is the 6-decimal REPORT_FMT_EXT.
    ("rocm-gbits-all-sizes.txt", {"bytes": 8388608, "iterations": 5000, "peak_gbps": 204.59,
                                  "average_gbps": 204.59, "msg_rate_mpps": 0.003049}),
    # Gb/sec, -D: peak 0.00, not measured.
    ("issue-273-gbits-duration.txt", {"bytes": 8, "iterations": 224958464,
                                      "peak_gbps": None, "average_gbps": 0.48,
                                      "msg_rate_mpps": 7.498617}),
    # The WARNING line first, stderr's CPU frequency line between header and row.
    ("gbits-bidir-cpufreq-interleaved.txt", {"bytes": 65536, "iterations": 560845,
                                             "peak_gbps": None, "average_gbps": 98.02,
                                             "msg_rate_mpps": 0.18695}),
    ("send-bw-mib-cpufreq.txt", {"bytes": 65536, "iterations": 1000, "peak_gbps": 390.635,
                                 "average_gbps": 390.549, "msg_rate_mpps": 0.744912}),
])
def test_published_outputs_are_read_in_gbits(name: str, expected: dict[str, Any]) -> None:
    assert perftest.parse(_text(name)) == expected


def test_the_units_are_converted_as_perftest_defines_them() -> None:
    # format_factor: 0x100000 bytes for MB and MiB alike, 125000000 bytes for Gb.
    row = perftest.parse(_text("mib-client.txt"))
    assert row is not None
    assert row["average_gbps"] == pytest.approx(11030.45 * MB, rel=1e-6)
    assert perftest.parse(_text("deepops-server-mb.txt"))["average_gbps"] == (  # type: ignore[index]
        pytest.approx(96.25 * MB, rel=1e-6))


@pytest.mark.parametrize("name", ["issue-234-server-mb-truncated.txt",
                                  "mib-server-truncated.txt",
                                  "gdr-dmabuf-client-truncated.txt",
                                  "debian-4.5-no-device.stderr", "pr-228-couldnt-connect.txt"])
def test_an_output_with_no_row_under_the_header_has_no_figure(name: str) -> None:
    # issue 234's server excerpt stops inside the row (" 65536      664644"): no figure,
    # rather than a wrong one.
    assert perftest.parse(_text(name)) is None


@pytest.mark.parametrize(("name", "code", "said"), [
    ("debian-4.5-no-device.stderr", 1,
     "no RDMA device detected (perftest: Did not detect devices; is the driver up?)"),
    ("k8s-plugin-169-no-device.txt", 1,
     "no RDMA device detected (perftest: Did not detect devices; is the driver up?)"),
    ("pr-228-couldnt-connect.txt", 1,
     "couldn't connect to 192.168.125.211:18515: no ib_write_bw server listened there"),
    ("debian-4.5-use-cuda.stderr", 1, "this ib_write_bw does not know --use_cuda=0"),
    ("issue-234-server-mb-truncated.txt", -9,
     "ib_write_bw was killed by signal 9: GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:"
     "255:255:04 | #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps] | "
     "65536 664644"),
])
def test_why_a_run_gave_no_figure_is_said_in_perftests_words(
        name: str, code: int, said: str) -> None:
    assert perftest.reason(_text(name), code) == said


def test_other_failures_are_said_by_their_last_lines_bounded() -> None:
    # perftest's format strings (src/perftest_resources.c, perftest_communication.c).
    assert perftest.reason("IB device mlx5_7 not found\n Unable to find the Infiniband/RoCE "
                           "device\n", 1) == "IB device mlx5_7 not found"
    assert perftest.reason("Couldn't listen to port 29550\n", 1) == (
        "couldn't listen to port 29550: another process holds it")
    assert perftest.reason(" Unsupported memory type\n", 1) == (
        "this ib_write_bw was built without CUDA (Unsupported memory type)")
    assert perftest.reason("", 0) == "ib_write_bw gave no figure: no output"
    long = perftest.reason("x" * 5000, 1)
    assert len(long) == perftest.MAX_TEXT and long.startswith("ib_write_bw exited 1: xxx")


def _port(root: Path, device: str, port: int, state: str = "4: ACTIVE",
          rate: str | None = "400 Gb/sec (4X NDR)", link_layer: str = "InfiniBand",
          virtual: bool = False) -> None:
    """A device's port as the kernel shows it (drivers/infiniband/core/sysfs.c), its
    link recorded as a capture records it (`<path>.link`)."""
    base = root / "sys/class/infiniband" / device
    at = base / "ports" / str(port)
    at.mkdir(parents=True, exist_ok=True)
    (at / "state").write_text(state + "\n")
    (at / "link_layer").write_text(link_layer + "\n")
    if rate is not None:
        (at / "rate").write_text(rate + "\n")
    where = (f"/sys/devices/virtual/infiniband/{device}" if virtual else
             f"/sys/devices/pci0000:00/0000:00:03.0/infiniband/{device}")
    (base.parent / f"{device}.link").write_text(where + "\n")


def _host(root: Path, names: list[str], down: tuple[str, ...] = ()) -> str:
    for name in names:
        _port(root, name, 1, state="1: DOWN" if name in down else "4: ACTIVE")
    return str(root)


def test_the_active_fabric_ports_are_tested_in_natural_order(tmp_path: Path) -> None:
    for i in (10, 2, 0):
        _port(tmp_path, f"mlx5_{i}", 1)
    _port(tmp_path, "mlx5_3", 1, rate="200 Gb/sec (2X NDR)", link_layer="Ethernet")  # RoCE
    _port(tmp_path, "mlx5_5", 1, state="1: DOWN", rate="10 Gb/sec (4X SDR)")
    _port(tmp_path, "mlx5_2", 2, rate=None)
    _port(tmp_path, "rxe0", 1, link_layer="Ethernet", virtual=True)
    ib, roce = {"link_layer": "InfiniBand", "active": True}, {"link_layer": "Ethernet",
                                                               "active": True}
    assert perftest.devices(str(tmp_path)) == [
        {"device": "mlx5_0", "port": 1, "rate_gbps": 400.0, **ib},
        {"device": "mlx5_2", "port": 1, "rate_gbps": 400.0, **ib},
        {"device": "mlx5_2", "port": 2, "rate_gbps": None, **ib},
        {"device": "mlx5_3", "port": 1, "rate_gbps": 200.0, **roce},
        {"device": "mlx5_10", "port": 1, "rate_gbps": 400.0, **ib}]
    # The down port is among the ports told to the other node, not among those tested.
    assert [(p["device"], p["active"]) for p in perftest.ports(str(tmp_path))
            if p["device"] == "mlx5_5"] == [("mlx5_5", False)]
    # A host's own bounds.
    for i in range(40):
        _port(tmp_path, f"ib{i}", 1)
    assert len(perftest.devices(str(tmp_path))) == perftest.MAX_TESTS


def test_soft_roce_and_a_host_with_no_rdma_have_nothing_to_test() -> None:
    # rxe0 is ACTIVE over Ethernet, but the kernel emulates it: no fabric to measure.
    assert perftest.devices(str(FIXTURES / "network/soft-roce-rxe/sys")) == []
    assert perftest.devices(str(FIXTURES / "network/lent-h100-1x/sys")) == []


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pair(port: int, roots: tuple[str, str], client_first_s: float = 0.0,
          **kwargs: Any) -> list[dict[str, Any]]:
    """Both nodes' sides at once, node 1 started `client_first_s` before node 0."""
    results: list[dict[str, Any]] = [{}, {}]

    def side(rank: int) -> None:
        results[rank] = perftest.pair_test(rank, "127.0.0.1", port, roots[rank], **kwargs)

    threads = [threading.Thread(target=side, args=(rank,)) for rank in (1, 0)]
    threads[0].start()
    time.sleep(client_first_s)
    threads[1].start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    return results


def _left_behind(port: int, program: str = "") -> list[int]:
    """Live processes given `port` as an argument (and running `program`, where named)."""
    needles = [f"\0{port}\0".encode(), program.encode()]
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if all(n in cmdline for n in needles) and state != "Z":
            alive.append(int(entry.name))
    return alive


def test_the_real_binary_says_there_is_no_device_for_every_nic(tmp_path: Path) -> None:
    if shutil.which("ib_write_bw") is None:
        pytest.skip("ib_write_bw is not installed (Debian/Ubuntu: apt-get install perftest)")
    roots = (_host(tmp_path / "n0", ["mlx5_0", "mlx5_1"]),
             _host(tmp_path / "n1", ["mlx5_0", "mlx5_1"]))
    port = _free_port()
    started = time.monotonic()
    server, client = _pair(port, roots, duration_s=1, timeout_s=10, margin_s=10)
    # Each side stands in for the other on the TCP port: no side waits out its timeout.
    assert time.monotonic() - started < 8
    for side, role in ((server, "server"), (client, "client")):
        assert side["tool"] == "ib_write_bw" and side["role"] == role
        assert side["skipped"] is None
        assert [(t["device"], t["port"]) for t in side["tests"]] == [("mlx5_0", 1),
                                                                     ("mlx5_1", 1)]
        for test in side["tests"]:
            assert test["error"] == ("no RDMA device detected (perftest: Did not detect "
                                     "devices; is the driver up?)")
            assert test["gbps"] is None and test["peak_gbps"] is None
            assert test["gdr"] is False and test["rate_gbps"] == 400.0
    assert _left_behind(port, "ib_write_bw") == []


@pytest.fixture
def replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`ib_write_bw` on PATH is the replay; the log of its calls is returned."""
    bin_dir = tmp_path / "bin"
    perftest_replay.install(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PERFTEST_REPLAY_LOG", str(log))
    for name in ("PERFTEST_REPLAY_CUDA", "PERFTEST_REPLAY_BROKEN", "PERFTEST_REPLAY_SERVER",
                 "PERFTEST_REPLAY_CLIENT"):
        monkeypatch.delenv(name, raising=False)
    return log


def _calls(log: Path) -> list[dict[str, Any]]:
    """The replay's calls; none where it never ran."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


SERVER_GBPS = 0.807404  # deepops-server-mb.txt: 96.25 MB/sec
CLIENT_GBPS = 98.02  # gbits-bidir-cpufreq-interleaved.txt


def test_each_nic_is_measured_against_its_peer_in_order(
        tmp_path: Path, replay: Path) -> None:
    names = ["mlx5_10", "mlx5_0", "mlx5_2"]
    roots = (_host(tmp_path / "n0", names), _host(tmp_path / "n1", names))
    port = _free_port()
    progress: list[str] = []
    # The client first: the nodes' exchange waits for node 0 to listen.
    results: list[dict[str, Any]] = [{}, {}]

    def side(rank: int) -> None:
        results[rank] = perftest.pair_test(
            rank, "127.0.0.1", port, roots[rank], duration_s=1, timeout_s=10,
            progress=progress.append if rank == 0 else None)

    client = threading.Thread(target=side, args=(1,))
    client.start()
    time.sleep(1.2)
    side(0)
    client.join(timeout=30)
    server, client_side = results
    order = ["mlx5_0", "mlx5_2", "mlx5_10"]
    for side_result, role, gbps in ((server, "server", SERVER_GBPS),
                                    (client_side, "client", CLIENT_GBPS)):
        assert side_result["role"] == role and side_result["skipped"] is None
        assert side_result["paired_by"] == "name"
        assert [t["device"] for t in side_result["tests"]] == order
        for test in side_result["tests"]:
            assert test == {"device": test["device"], "port": 1,
                            "peer": f"{test['device']}/1", "rate_gbps": 400.0,
                            "gbps": gbps, "peak_gbps": None, "gdr": False,
                            "seconds": test["seconds"], "error": None}
    assert progress == [f"testing {d}/1 against the other node's {d}/1 with ib_write_bw"
                        for d in order]
    calls = [c for c in _calls(replay) if c["argv"] != ["--help"]]
    servers = [c for c in calls if c["role"] == "server"]
    clients = [c for c in calls if c["role"] == "client"]
    assert [c["device"] for c in servers] == order
    assert servers[0]["argv"] == ["-d", "mlx5_0", "-i", "1", "-p", str(port), "-F",
                                  "--report_gbits", "-D", "1", "-s", "8388608"]
    assert clients[-1]["argv"] == ["-d", "mlx5_10", "-i", "1", "-p", str(port), "-F",
                                   "--report_gbits", "-D", "1", "-s", "8388608",
                                   "127.0.0.1"]
    assert _left_behind(port, str(REPLAY)) == []


def test_a_client_before_its_server_retries_until_it_listens(
        tmp_path: Path, replay: Path) -> None:
    # perftest's client does not retry: this one does, every 0.5 s.
    port = _free_port()
    nic = {"device": "mlx5_0", "port": 1}
    path = shutil.which("ib_write_bw")
    assert path is not None
    got: list[Any] = []
    client = threading.Thread(target=lambda: got.append(perftest._connect(
        perftest._argv(path, nic, port, 1, None, "127.0.0.1"), "127.0.0.1", port, 10, 30,
        threading.Event())))
    client.start()
    time.sleep(1.6)
    code, out, _, _ = perftest._serve(perftest._argv(path, nic, port, 1, None, None), port,
                                      10, 30, threading.Event())
    client.join(timeout=30)
    assert code == 0 and perftest.parse(out) is not None
    assert got[0][0] == 0 and perftest.parse(got[0][1])["average_gbps"] == CLIENT_GBPS
    tries = [c for c in _calls(replay) if c["role"] == "client"]
    assert len(tries) >= 3
    assert all(b["at"] - a["at"] >= 0.45 for a, b in itertools.pairwise(tries))


def test_ports_meet_by_name_and_those_without_a_peer_say_why(
        tmp_path: Path, replay: Path) -> None:
    # Node 0's mlx5_1 is down, node 1 has no mlx5_3: the others meet their namesakes
    # (by order, node 0's mlx5_2 would have met node 1's mlx5_1), at once, with no wait.
    port = _free_port()
    started = time.monotonic()
    server, client = _pair(port, (
        _host(tmp_path / "a0", ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], down=("mlx5_1",)),
        _host(tmp_path / "a1", ["mlx5_0", "mlx5_1", "mlx5_2"])), duration_s=1, timeout_s=20)
    assert time.monotonic() - started < 10
    assert [(t["device"], t["peer"], t["gbps"], t["error"]) for t in server["tests"]] == [
        ("mlx5_0", "mlx5_0/1", SERVER_GBPS, None), ("mlx5_2", "mlx5_2/1", SERVER_GBPS, None),
        ("mlx5_3", None, None, "the other node has no mlx5_3/1")]
    assert [(t["device"], t["peer"], t["gbps"], t["error"]) for t in client["tests"]] == [
        ("mlx5_0", "mlx5_0/1", CLIENT_GBPS, None), ("mlx5_2", "mlx5_2/1", CLIENT_GBPS, None),
        ("mlx5_1", None, None, "the other node's mlx5_1/1 is not Active")]
    assert _left_behind(port, str(REPLAY)) == []


def test_a_node_that_cannot_test_stops_the_other_at_once(
        tmp_path: Path, replay: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = _free_port()
    started = time.monotonic()
    server, client = _pair(port, (str(FIXTURES / "network/soft-roce-rxe/sys"),
                                  _host(tmp_path / "n1", ["mlx5_0", "mlx5_1"])),
                           duration_s=1, timeout_s=20)
    assert time.monotonic() - started < 5
    assert server["skipped"] == "no active RDMA port" and server["tests"] == []
    assert client["skipped"] == "the other node: no active RDMA port"
    assert client["tests"] == []
    assert [c for c in _calls(replay) if c["argv"] != ["--help"]] == []
    # A node whose other never answers says so after its wait.
    lone = perftest.pair_test(1, "127.0.0.1", _free_port(),
                              _host(tmp_path / "n2", ["mlx5_0"]), timeout_s=1.5)
    assert lone["skipped"].startswith("the other node did not answer on port ")


def test_a_nic_that_fails_before_its_peer_keeps_the_others_paired(
        tmp_path: Path, replay: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Node 1's first NIC fails as perftest does with no device: its stand-in ends node
    # 0's first run, so that each side's second NIC still meets the other's second.
    monkeypatch.setenv("PERFTEST_REPLAY_BROKEN", "mlx5_7")
    port = _free_port()
    server, client = _pair(port, (_host(tmp_path / "n0", ["mlx5_0", "mlx5_1"]),
                                  _host(tmp_path / "n1", ["mlx5_7", "mlx5_8"])),
                           duration_s=1, timeout_s=5)
    assert server["paired_by"] == client["paired_by"] == "order"
    assert client["tests"][0]["error"] == ("no RDMA device detected (perftest: Did not "
                                           "detect devices; is the driver up?)")
    assert server["tests"][0]["gbps"] is None
    assert server["tests"][0]["error"] == ("ib_write_bw exited 1: perftest-replay: the "
                                           "client closed the connection")
    assert [t["gbps"] for t in (server["tests"][1], client["tests"][1])] == [
        SERVER_GBPS, CLIENT_GBPS]
    assert server["tests"][0]["seconds"] < 4


def test_gpudirect_only_where_the_binary_takes_it_and_a_gpu_is_named(
        tmp_path: Path, replay: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    roots = (_host(tmp_path / "n0", ["mlx5_0", "mlx5_1"]),
             _host(tmp_path / "n1", ["mlx5_0", "mlx5_1"]))
    gpus = {"mlx5_0": 3}.get
    # Debian's build: no --use_cuda in its help, so host memory whatever the caller asks.
    assert perftest.available()["cuda"] is False
    server, _ = _pair(_free_port(), roots, duration_s=1, timeout_s=5, gpu_for=gpus)
    assert [t["gdr"] for t in server["tests"]] == [False, False]
    assert not any("--use_cuda=3" in c["argv"] for c in _calls(replay))
    monkeypatch.setenv("PERFTEST_REPLAY_CUDA", "1")
    replay.unlink()
    server, client = _pair(_free_port(), roots, duration_s=1, timeout_s=5, gpu_for=gpus)
    assert [t["gdr"] for t in server["tests"]] == [True, False]
    assert [t["gdr"] for t in client["tests"]] == [True, False]
    cuda = [c for c in _calls(replay) if "--use_cuda=3" in c["argv"]]
    assert {c["role"] for c in cuda} == {"client", "server"}  # the client may retry
    assert all(c["device"] == "mlx5_0" for c in cuda)


def test_a_node_without_the_tool_or_a_port_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replay: Path) -> None:
    assert perftest.pair_test(0, "127.0.0.1", _free_port(),
                              str(FIXTURES / "network/soft-roce-rxe/sys"), timeout_s=0.5) == {
        "tool": "ib_write_bw", "role": "server", "skipped": "no active RDMA port",
        "paired_by": None, "tests": []}
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert perftest.pair_test(1, "127.0.0.1", _free_port(),
                              _host(tmp_path / "n1", ["mlx5_0"]), timeout_s=0.5) == {
        "tool": "ib_write_bw", "role": "client",
        "skipped": "ib_write_bw is not installed (Debian/Ubuntu: apt-get install perftest)",
        "paired_by": None, "tests": []}


def test_gpudirect_is_asked_of_the_gpu_under_the_nics_switch(tmp_path: Path) -> None:
    # Paths as a capture records them (`<path>.link`): GPU 0 and mlx5_0 below one PCIe
    # switch (PIX); mlx5_1 on another root bus, its NUMA node unknown: host memory.
    switch = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    gpus = tmp_path / "sys/bus/pci/drivers/nvidia"
    gpus.mkdir(parents=True)
    (gpus / "0000:1a:00.0.link").write_text(f"{switch}/0000:02:00.0/0000:1a:00.0\n")
    (gpus / "0000:9a:00.0.link").write_text(
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0/0000:9a:00.0\n")
    for name, where in (("mlx5_0", f"{switch}/0000:02:01.0/0000:1b:00.0"),
                        ("mlx5_1", "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0")):
        _port(tmp_path, name, 1)
        (tmp_path / f"sys/class/infiniband/{name}/device.link").write_text(where + "\n")
    near = perftest.gpu_near(str(tmp_path))
    assert (near("mlx5_0"), near("mlx5_1"), near("mlx5_9")) == (0, None, None)

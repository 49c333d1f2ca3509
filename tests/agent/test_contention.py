"""Who else is on a GPU (agent/timing/contention.py), where a host copy runs from
(agent/gpu/numa.py), and what NCCL says it used (agent/node/collective.py): each from the raw
answers a host gives, as files and recordings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent.gpu import numa
from agent.node import collective
from agent.source.nvml import ReplayNvml
from agent.timing import contention
from tests.conftest import FIXTURES

NCCL = FIXTURES / "nccl"


def _proc(tmp_path: Path, pid: int, uid: int) -> str:
    folder = tmp_path / "proc" / str(pid)
    folder.mkdir(parents=True)
    (folder / "status").write_text(f"Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    return str(tmp_path / "proc")


def _gpu(processes: list[dict[str, Any]], utilization: int | None = None) -> ReplayNvml:
    answers: dict[str, Any] = {"nvmlDeviceGetComputeRunningProcesses": processes,
                               "nvmlDeviceGetGraphicsRunningProcesses": []}
    if utilization is not None:
        answers["nvmlDeviceGetUtilizationRates"] = {"gpu": utilization, "memory": 0}
    return ReplayNvml({"format": "nvml-recording/1", "source": "constructed",
                       "system": {}, "devices": [answers]})


def test_another_users_process_is_named_with_its_owner(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 4242, 65534)
    (tmp_path / "proc" / str(os.getpid())).mkdir()
    nvml = _gpu([{"pid": 4242, "usedGpuMemory": 1 << 30},
                 {"pid": os.getpid(), "usedGpuMemory": 1 << 30}], utilization=100)
    seen = contention.others(nvml, nvml.device(0), proc=proc)
    # The agent itself is never "another process".
    assert [p["pid"] for p in seen] == [4242]
    assert seen[0]["uid"] == 65534 and seen[0]["own"] is (os.getuid() == 65534)
    lines = contention.reasons(seen, contention.utilization(nvml, nvml.device(0)))
    assert lines[0].startswith("other processes on the GPU: pid 4242 (user ")
    assert "not the agent's user" in lines[0] or os.getuid() == 65534
    assert lines[1] == "GPU utilization 100% before the measurement started"


def test_the_renters_own_process_and_an_invisible_one(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 77, os.getuid())
    nvml = _gpu([{"pid": 77, "usedGpuMemory": 0}, {"pid": 88, "usedGpuMemory": 0}])
    seen = contention.others(nvml, nvml.device(0), ours=(), proc=proc)
    assert [p["own"] for p in seen] == [True, None]
    text = contention.reasons(seen, 3)[0]
    assert "pid 77 (user " in text and "the agent's own user" in text
    assert "pid 88 (owner not visible from the agent)" in text
    # 3% busy is a monitoring agent's sampling, not contention.
    assert len(contention.reasons(seen, 3)) == 1
    # The agent's own children (the all-reduce's ranks) are not others.
    assert contention.others(nvml, nvml.device(0), ours=(77, 88), proc=proc) == []


def test_no_nvml_sees_nothing_and_says_nothing() -> None:
    assert contention.others(None, None) == []
    assert contention.utilization(None, None) is None
    assert contention.reasons([], None) == []


def test_cpu_lists_and_bus_ids() -> None:
    assert numa.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert numa.cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert numa.sysfs_address("00000000:06:00.0") == "0000:06:00.0"
    assert numa.sysfs_address("00000001:C1:00.0") == "0001:c1:00.0"
    assert numa.sysfs_address(None) is None and numa.sysfs_address("garbage") is None


def _sysfs(tmp_path: Path, address: str, node: str, cpus: str) -> str:
    device = tmp_path / "devices" / address
    device.mkdir(parents=True)
    (device / "numa_node").write_text(node + "\n")
    (device / "local_cpulist").write_text(cpus + "\n")
    return str(tmp_path / "devices")


def test_a_gpu_on_the_second_socket_of_a_two_socket_host(tmp_path: Path) -> None:
    # Constructed: a two-socket host whose GPU hangs off socket 1 (CPUs 32-63), as
    # sysfs shows such a host; NVML's affinity answer, where it has one, wins.
    sys_pci = _sysfs(tmp_path, "0000:c1:00.0", "1", "32-63")
    gpu = {"pci_bus_id": "00000000:C1:00.0"}
    found = numa.locality(gpu, None, None, sys_pci=sys_pci)
    assert found == {"numa_node": 1, "cpus": list(range(32, 64)), "source": "sysfs"}
    words = [0, 0xFFFF]  # NVML: CPUs 64-79 (the second unsigned long)
    nvml = ReplayNvml({"format": "nvml-recording/1", "source": "constructed", "system": {},
                       "devices": [{f"nvmlDeviceGetCpuAffinity({n})": words
                                    for n in range(1, 9)}]})
    found = numa.locality(gpu, nvml, nvml.device(0), sys_pci=sys_pci)
    assert found["numa_node"] == 1 and found["cpus"] == list(range(64, 80))
    assert found["source"] == "nvml"


def test_a_one_node_host_says_no_node(tmp_path: Path) -> None:
    sys_pci = _sysfs(tmp_path, "0000:06:00.0", "-1", "0-15")
    found = numa.locality({"pci_bus_id": "00000000:06:00.0"}, None, None, sys_pci=sys_pci)
    assert found["numa_node"] is None and found["cpus"] == list(range(16))
    assert numa.locality({}, None, None, sys_pci=sys_pci) == {
        "numa_node": None, "cpus": None, "source": None}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_pinning_runs_on_the_gpus_cpus_and_puts_the_thread_back() -> None:
    before = os.sched_getaffinity(0)
    one = min(before)
    with numa.pinned_to([one, 100_000]) as ran_on:
        assert ran_on == [one] and os.sched_getaffinity(0) == {one}
    assert os.sched_getaffinity(0) == before
    # None of the GPU's CPUs allowed (a container's cpuset): not pinned, said so.
    with numa.pinned_to([100_000]) as ran_on:
        assert ran_on is None and os.sched_getaffinity(0) == before


def test_nccl_transports_from_its_own_log_lines() -> None:
    healthy = collective.transports([(NCCL / "h100x2-healthy.log").read_text()])
    assert set(healthy["transports"]) == {"P2P"}
    assert all(p.startswith("P2P/") for p in healthy["paths"])
    off = collective.transports([(NCCL / "h100x2-p2p-off.log").read_text()])
    assert "P2P" not in off["transports"] and off["transports"]
    assert "NCCL_P2P_DISABLE=1" in off["set_by_environment"]


def test_the_settings_a_run_is_under() -> None:
    env = {"NCCL_P2P_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "0,1", "PATH": "/bin",
           "AWS_SECRET_ACCESS_KEY": "x", "NCCL_SOCKET_IFNAME": "y" * 500}
    got = collective.settings(env)
    assert got == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_P2P_DISABLE": "1",
                   "NCCL_SOCKET_IFNAME": "y" * 128}


def _holder(tmp_path: Path, pid: int, targets: list[str], comm: str = "python3") -> str:
    """A /proc entry for `pid` whose open files point at `targets`."""
    folder = tmp_path / "proc" / str(pid)
    (folder / "fd").mkdir(parents=True)
    (folder / "status").write_text(f"Name:\t{comm}\nUid:\t{os.getuid()}\t0\t0\t0\n")
    (folder / "comm").write_text(comm + "\n")
    for fd, target in enumerate(targets):
        os.symlink(target, folder / "fd" / str(fd))
    return str(tmp_path / "proc")


def test_a_listed_pid_is_seen_only_where_it_holds_a_gpu(tmp_path: Path) -> None:
    # Issue 54's renter process: the pid NVML lists, /dev/nvidia2 among its open files.
    proc = _holder(tmp_path, 4242, ["/dev/null", "/dev/nvidiactl", "/dev/nvidia2"])
    seen = contention.seen_from_here({"pid": 4242, "used_memory_mib": 134956}, proc)
    assert (seen["visible"], seen["name"], seen["own"]) == (True, "python3", True)
    assert seen["used_memory_mib"] == 134956

    # In a container NVML may list a host pid; the container's own pid of that number is
    # another program, holding no GPU: not the holder, and nothing of it named.
    proc = _holder(tmp_path / "c", 4243, ["/dev/null", "pipe:[1234]"], comm="bash")
    seen = contention.seen_from_here({"pid": 4243}, proc)
    assert (seen["visible"], seen["name"], seen["user"]) == (False, None, None)

    assert contention.seen_from_here({"pid": 999}, proc)["visible"] is False


def test_a_listed_pid_whose_files_cannot_be_read_is_not_settled(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 77, uid=0)  # /proc/77 without fd/: another user's, unread
    seen = contention.seen_from_here({"pid": 77}, proc)
    assert seen["visible"] is None
    assert (seen["name"], seen["user"]) == (None, "root")

"""Each RDMA port's error counters (agent/network/counters.py), read from a sysfs tree laid
out as the kernel lays it out (drivers/infiniband/core/sysfs.c: ports/N/counters/NAME,
one decimal number a file), before and after a step."""

from __future__ import annotations

from pathlib import Path

from agent.network import counters


def _port(root: Path, device: str, port: int, **values: int) -> Path:
    at = root / "sys/class/infiniband" / device / "ports" / str(port) / "counters"
    at.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (at / name).write_text(f"{value}\n")
    return at


def test_every_ports_error_counters_are_read_and_traffic_is_not(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", 1, link_downed=0, symbol_error=3, port_rcv_errors=0,
          port_xmit_data=123456789)
    _port(tmp_path, "mlx5_1", 1, link_downed=2)
    # A port whose counters are not numbers (a driver's "N/A") reads as none.
    (_port(tmp_path, "mlx5_2", 1) / "symbol_error").write_text("N/A\n")
    assert counters.read_counters(str(tmp_path)) == {
        "mlx5_0/1": {"link_downed": 0, "symbol_error": 3, "port_rcv_errors": 0},
        "mlx5_1/1": {"link_downed": 2}}
    assert counters.read_counters(str(tmp_path / "nothing-here")) == {}


def test_what_rose_is_named_and_a_reset_is_not_a_rise() -> None:
    before = {"mlx5_0/1": {"link_downed": 1, "symbol_error": 10, "port_rcv_errors": 5},
              "mlx5_1/1": {"link_downed": 0}, "mlx5_2/1": {"symbol_error": 0}}
    after = {"mlx5_0/1": {"link_downed": 2, "symbol_error": 37, "port_rcv_errors": 0},
             "mlx5_1/1": {"link_downed": 0}, "mlx5_3/1": {"symbol_error": 9}}
    assert counters.rises(before, after) == {
        "ports": 2, "rose": {"mlx5_0/1": {"link_downed": 1, "symbol_error": 27}},
        "reset": ["mlx5_0/1 port_rcv_errors"]}


def test_the_models_counters_are_the_agents() -> None:
    from typing import get_args

    from fleet.model.cluster import Counter

    assert set(get_args(Counter)) == set(counters.ERROR_COUNTERS)

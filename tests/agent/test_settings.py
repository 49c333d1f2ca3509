"""The settings a run measured under (agent/source/settings.py) and the all-reduce measured
again without them (agent/node/rerun.py), on the CPU path with real gloo ranks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent.node import suite as node
from agent.source import settings
from fleet.document import parse_document
from fleet.errors import AgentError

MiB = 1 << 20


def test_only_the_families_are_recorded_each_with_its_source(tmp_path: Path) -> None:
    user, system = tmp_path / "user.conf", tmp_path / "etc.conf"
    user.write_text("# a comment=1\nNCCL_ALGO=Ring\nNCCL_PROTO=Simple\nnot a setting\n")
    system.write_text("NCCL_PROTO=LL\nNCCL_MAX_NCHANNELS=1\nHOME=/x\n")
    environ = {"NCCL_ALGO": "Tree", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PATH": "/bin",
               "AWS_SECRET_ACCESS_KEY": "x", "OMP_NUM_THREADS": "4",
               "FLEET_INVENTORY_ENV": "CUDA_DEVICE_MAX_CONNECTIONS,PATH"}
    found = settings.collect(environ, files=[str(user), str(system)])
    table = [(s["name"], s["value"], s["source"], s["family"], s["applies"]) for s in found]
    assert table == [
        ("CUDA_DEVICE_MAX_CONNECTIONS", "1", "inventory", "cuda", True),
        ("NCCL_ALGO", "Tree", "environment", "nccl", True),
        ("OMP_NUM_THREADS", "4", "environment", "openmp", True),
        # The environment wins over the user's file, which wins over /etc/nccl.conf.
        ("NCCL_ALGO", "Ring", f"nccl.conf:{user}", "nccl", False),
        ("NCCL_PROTO", "Simple", f"nccl.conf:{user}", "nccl", True),
        ("NCCL_PROTO", "LL", f"nccl.conf:{system}", "nccl", False),
        ("NCCL_MAX_NCHANNELS", "1", f"nccl.conf:{system}", "nccl", True)]


def test_nccl_reads_the_named_file_instead_of_the_home_one_then_etc() -> None:
    assert settings.conf_files({"NCCL_CONF_FILE": "/x/my.conf"}) == ["/x/my.conf",
                                                                     "/etc/nccl.conf"]
    home = settings.conf_files({})
    assert home[0].endswith("/.nccl.conf") and home[1] == "/etc/nccl.conf"


@pytest.mark.parametrize(("name", "value"), [
    ("NCCL_IB_PKEY", "0x8001"),  # a harmless key, but its name says key: withheld
    ("NCCL_NET_PLUGIN", "https://user:pw@example.com/plugin"),
    ("TORCH_HUB_TOKEN", "abc"),
    ("CUDA_X", "ghp_" + "a1B2" * 10),
    ("NCCL_TOPO_FILE", "/a" * 200),
])
def test_a_value_that_may_be_a_secret_is_withheld(name: str, value: str) -> None:
    [found] = settings.collect({name: value}, files=[])
    assert found["value"] is None and found["withheld"]


def test_what_moves_which_figure() -> None:
    assert settings.moves("NCCL_ALGO", "allreduce")
    assert not settings.moves("NCCL_ALGO", "memory_copy")
    assert settings.moves("CUDA_DEVICE_MAX_CONNECTIONS", "peer_copy")
    assert not settings.moves("CUDA_VISIBLE_DEVICES", "allreduce")  # placement
    assert settings.moves("TORCH_NCCL_BLOCKING_WAIT", "allreduce")
    assert not settings.moves("NCCL_VERSION", "allreduce")  # a container's label
    assert settings.kept("NCCL_NVLS_ENABLE") and settings.kept("TORCH_SYMM_MEM_DISABLE_MULTICAST")


def _short(size: int) -> dict[str, Any]:
    """A floor no CPU reaches, as if the catalog had a gloo entry: the figure is short."""
    return {"allreduce": [{"variant": None, "gpus_in_run": 2, "size_bytes": size,
                           "dtype": "fp32", "backend": "gloo", "floor_gbs": 1e6,
                           "expected_gbs": 2e6, "records": ["test"]}]}


def test_a_short_allreduce_runs_again_without_the_settings_that_can_move_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    cfg = node.Config.for_cpu()
    cfg.floors = _short(4 * MiB)
    said: list[str] = []
    outcome = node.run(cfg, [], None, said.append)
    assert outcome.errors == []
    reduce = [r for r in outcome.results if r["kind"] == "allreduce"]
    assert [r["size_bytes"] for r in reduce] == [MiB, 4 * MiB]
    for result in reduce:
        rerun = result["rerun"]
        assert rerun["without"] == ["CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_ALGO"]
        assert rerun["kept"] == ["NCCL_NVLS_ENABLE"]
        # What rank 0 itself ran under: without them, with what fleet keeps as found.
        assert "NCCL_ALGO" not in rerun["ran_with"]
        assert "CUDA_DEVICE_MAX_CONNECTIONS" not in rerun["ran_with"]
        assert {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST"} <= set(
            rerun["ran_with"])
        assert rerun["gbs"] > 0 and rerun["floor_gbs"] == 1e6
    assert any("again without CUDA_DEVICE_MAX_CONNECTIONS, NCCL_ALGO" in s for s in said)
    assert os.environ["NCCL_ALGO"] == "Tree"  # the agent's own environment untouched
    document = _document(outcome.results)
    parse_document(document, "the rerun's document")
    # A rerun that says it ran with what it took out contradicts itself.
    reduce[0]["rerun"]["ran_with"] = ["NCCL_ALGO"]
    with pytest.raises(AgentError, match="ran without NCCL_ALGO and its rank ran with it"):
        parse_document(_document(outcome.results), "edited")


def test_a_healthy_allreduce_or_one_without_settings_is_not_run_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    cfg = node.Config.for_cpu()
    cfg.floors = {"allreduce": [dict(_short(4 * MiB)["allreduce"][0], floor_gbs=0.0)]}
    outcome = node.run(cfg, [], None, lambda _: None)
    assert [r.get("rerun") for r in outcome.results if r["kind"] == "allreduce"] == [None] * 2
    monkeypatch.delenv("NCCL_ALGO")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")  # kept as found: nothing to take out
    cfg.floors = _short(4 * MiB)
    outcome = node.run(cfg, [], None, lambda _: None)
    assert [r.get("rerun") for r in outcome.results if r["kind"] == "allreduce"] == [None] * 2


def _document(results: list[dict[str, Any]]) -> dict[str, Any]:
    from agent.collect import collect

    document = collect(probe_torch=False)
    document["node"] = results
    return document

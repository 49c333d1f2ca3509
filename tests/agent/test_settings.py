"""The settings a run measured under (agent/source/settings.py) and the all-reduce measured
again without them (agent/rerun/allreduce.py), on the CPU path with real gloo ranks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent import suites
from agent.node import floors
from agent.node import suite as node
from agent.rerun import allreduce as allreduce_rerun
from agent.source import settings
from fleet.errors import AgentError
from fleet.model.document import parse_document

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
    outcome = suites.run_node(cfg, [], None, said.append)
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
        # Each size with its own floor; 1 MiB has none and is measured again all the same.
        assert rerun["gbs"] > 0
        assert rerun["floor_gbs"] == (1e6 if result["size_bytes"] == 4 * MiB else None)
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
    outcome = suites.run_node(cfg, [], None, lambda _: None)
    assert [r.get("rerun") for r in outcome.results if r["kind"] == "allreduce"] == [None] * 2
    monkeypatch.delenv("NCCL_ALGO")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")  # kept as found: nothing to take out
    cfg.floors = _short(4 * MiB)
    outcome = suites.run_node(cfg, [], None, lambda _: None)
    assert [r.get("rerun") for r in outcome.results if r["kind"] == "allreduce"] == [None] * 2


def _document(results: list[dict[str, Any]]) -> dict[str, Any]:
    from agent.collect import collect

    document = collect(probe_torch=False)
    document["node"] = results
    return document


def test_a_conf_line_nccl_cannot_read_as_a_name_is_not_recorded(tmp_path: Path) -> None:
    # NCCL strips nothing: "NCCL_PROTO = LL" sets a variable "NCCL_PROTO ", never read as
    # NCCL_PROTO. Recorded, it would fail the whole document and every probe of the host.
    user = tmp_path / "user.conf"
    user.write_text("NCCL_PROTO = LL\nNCCL_BAD-NAME=1\n NCCL_X=1\nNCCL_ALGO=Ring\n")
    found = settings.collect({"NCCL_ODD.NAME": "1"}, files=[str(user)])
    assert [(s["name"], s["value"]) for s in found] == [("NCCL_ALGO", "Ring")]
    document = _document([])
    document["settings"] = found
    parse_document(document, "a badly written nccl.conf")


def test_a_long_conf_path_is_cut_to_what_the_controller_stores(tmp_path: Path) -> None:
    deep = tmp_path
    for _ in range(6):
        deep = deep / ("d" * 100)
    deep.mkdir(parents=True)
    conf = deep / "nccl.conf"
    conf.write_text("NCCL_ALGO=Ring\n")
    [found] = settings.collect({}, files=[str(conf)])
    assert len(found["source"]) == settings.MAX_SOURCE
    document = _document([])
    document["settings"] = [found]
    parse_document(document, "a deep nccl.conf")


def test_an_aws_style_secret_key_is_withheld_by_the_agent() -> None:
    [found] = settings.collect({"CUDA_X": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
                               files=[])
    assert found["value"] is None and found["withheld"] == "it looks like a token or key"
    # A lower-case path with digits is no key.
    [path] = settings.collect({"CUDA_X": "/usr/local/cuda12/targets/x86/lib64/stubs"},
                              files=[])
    assert path["value"] == "/usr/local/cuda12/targets/x86/lib64/stubs"


def _figure(size: int, gbs: float) -> dict[str, Any]:
    return {"size_bytes": size, "gbs": gbs, "dtype": "fp32", "backend": "gloo",
            "datasheet_gbs": None}


def _table(*floors_: tuple[int, float]) -> dict[str, Any]:
    return {"allreduce": [{"variant": None, "gpus_in_run": 2, "size_bytes": size,
                           "dtype": "fp32", "backend": "gloo", "floor_gbs": floor,
                           "expected_gbs": floor * 2, "records": ["test"]}
                          for size, floor in floors_]}


def _setting(name: str, source: str = "environment", applies: bool = True
             ) -> dict[str, Any]:
    return {"name": name, "value": "1", "withheld": None, "source": source,
            "family": settings.family_of(name), "applies": applies}


def test_a_name_etc_nccl_conf_also_sets_is_kept_not_taken_out() -> None:
    # Taken out of the environment, NCCL would take /etc's value: the rerun would still
    # run under one while its record said it ran without it.
    from agent.rerun import allreduce as rerun

    recorded = [_setting("NCCL_ALGO"), _setting("NCCL_PROTO"),
                _setting("NCCL_ALGO", "nccl.conf:/etc/nccl.conf", applies=False)]
    table = _table((MiB, 100.0))
    plan = rerun.decide([_figure(MiB, 1.0)], recorded, table, None, 2)
    assert plan is not None
    assert (plan["without"], plan["kept"]) == (["NCCL_PROTO"], ["NCCL_ALGO"])
    # Named by the file itself where the record did not reach it.
    plan = rerun.decide([_figure(MiB, 1.0)], recorded[:2], table, None, 2,
                        system=["NCCL_PROTO"])
    assert plan is not None
    assert (plan["without"], plan["kept"]) == (["NCCL_ALGO"], ["NCCL_PROTO"])


def test_a_short_small_size_is_enough_to_run_again() -> None:
    from agent.rerun import allreduce as rerun

    figures = [_figure(MiB, 1.0), _figure(4 * MiB, 500.0)]
    plan = rerun.decide(figures, [_setting("NCCL_ALGO")],
                        _table((MiB, 100.0), (4 * MiB, 200.0)), None, 2)
    assert plan is not None and plan["short"] == [MiB]
    assert plan["floors"][4 * MiB][0] == 200.0
    healthy = [_figure(MiB, 150.0), _figure(4 * MiB, 500.0)]
    assert rerun.decide(healthy, [_setting("NCCL_ALGO")],
                        _table((MiB, 100.0), (4 * MiB, 200.0)), None, 2) is None


def test_what_a_rerun_names_is_capped_at_what_the_controller_stores() -> None:
    from agent.rerun import allreduce as rerun

    recorded = [_setting(f"NCCL_X{i:03d}") for i in range(80)]
    plan = rerun.decide([_figure(MiB, 1.0)], recorded, _table((MiB, 100.0)), None, 2)
    assert plan is not None and len(plan["without"]) == rerun.MAX_NAMES


def test_nvls_set_only_in_the_users_conf_reaches_the_reruns_ranks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.rerun import allreduce as rerun

    user = tmp_path / "user.conf"
    user.write_text("NCCL_ALGO=Ring\nNCCL_NVLS_ENABLE=0\n# NCCL_ALGO=Tree\n")
    environ = {"NCCL_CONF_FILE": str(user), "NCCL_PROTO": "LL",
               "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    # Recorded as if past the cap: nothing of the file in what the agent wrote down.
    recorded = [s for s in settings.collect(environ, files=[]) if s["name"] != "NCCL_CONF_FILE"]
    recorded.append(_setting("NCCL_ALGO", f"nccl.conf:{user}"))
    ran: dict[str, Any] = {}

    def collective_run(devices: Any, backend: str, sizes: Any, *args: Any,
                       env: dict[str, str]) -> Any:
        ran["env"] = env
        ran["conf"] = Path(env["NCCL_CONF_FILE"]).read_text()
        return [{"size": MiB, "ms": [1.0, 1.0, 1.0], "env": sorted(env)}], {}

    monkeypatch.setattr(rerun.collective, "run", collective_run)
    figures = [_figure(MiB, 1.0)]
    failed = rerun.settle(figures, recorded, _table((MiB, 100.0)), None, [None, None],
                          "gloo", [MiB], 10.0, 1, 3, lambda _: None, environ=environ)
    assert failed is None and figures[0]["rerun"]["without"] == ["NCCL_ALGO", "NCCL_PROTO"]
    assert ran["conf"] == "NCCL_NVLS_ENABLE=0\n# NCCL_ALGO=Tree\n"
    env = ran["env"]
    assert "NCCL_PROTO" not in env and env["NCCL_CONF_FILE"] != str(user)
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    # Belt and braces: what fleet keeps as found stays even where asked to go.
    assert settings.without({"NCCL_NVLS_ENABLE": "0", "NCCL_ALGO": "Tree"},
                            ["NCCL_NVLS_ENABLE", "NCCL_ALGO"]) == {"NCCL_NVLS_ENABLE": "0"}


@pytest.mark.parametrize("where", ["settle", "floors"])
def test_a_rerun_that_raises_keeps_the_original_figures(
        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    monkeypatch.setenv("NCCL_ALGO", "Tree")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise (KeyError("size") if where == "settle" else ValueError("corrupt floors.json"))

    cfg = node.Config.for_cpu()
    if where == "settle":
        cfg.floors = _short(4 * MiB)
        monkeypatch.setattr(allreduce_rerun, "settle", broken)
    else:
        monkeypatch.setattr(floors, "load", broken)
    outcome = suites.run_node(cfg, [], None, lambda _: None)
    reduce = [r for r in outcome.results if r["kind"] == "allreduce"]
    assert [r["size_bytes"] for r in reduce] == [MiB, 4 * MiB]
    assert all("rerun" not in r for r in reduce)
    [error] = outcome.errors
    assert "did not run" in error["message"] and "original figures stand" in error["message"]


def test_a_rerun_another_process_shared_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    settle = allreduce_rerun.settle
    rerunning: list[bool] = []

    def watched_settle(*args: Any, **kwargs: Any) -> Any:
        rerunning.append(True)
        return settle(*args, **kwargs)

    class Crowded(node._Watch):
        # A process arrives between the two measurements: NVML shows it after the rerun.
        def __exit__(self, *exc: Any) -> None:
            if rerunning:
                self.seen.append({"pid": 4242, "own": False, "user": "bob"})

    monkeypatch.setattr(allreduce_rerun, "settle", watched_settle)
    monkeypatch.setattr(node, "_Watch", Crowded)
    cfg = node.Config.for_cpu()
    cfg.floors = _short(4 * MiB)
    said: list[str] = []
    outcome = suites.run_node(cfg, [], None, said.append)
    reduce = [r for r in outcome.results if r["kind"] == "allreduce"]
    assert len(reduce) == 2 and all("rerun" not in r for r in reduce)
    assert all(r["contention"] == [] for r in reduce)  # the first run was alone
    [error] = outcome.errors
    assert "dropped, another process was on the GPUs (other processes on the GPU: pid 4242" \
        in error["message"]
    assert any("dropped" in s for s in said)

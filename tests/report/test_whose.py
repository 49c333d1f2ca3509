"""Whose a short all-reduce is, settled by the agent's rerun (fleet/analysis/node/whose.py), on
the lent 4x H200 node's real document (tests/fixtures/nodes/h200-sxm-x4-lent/) made to
read as the issue's NCCL_ALGO=Tree run did (71% of a healthy node), stored through the
real ingest path (SQLite and PostgreSQL) and reported alone."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.errors import AgentError
from fleet.model.document import parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.report.build import Report
from fleet.store.ingest import Ingest, Origin, RunInfo
from fleet.store.node import read_node_results
from fleet.store.settings import read_settings
from tests.conftest import FIXTURES

H200X4 = FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json"
TREE = {"name": "NCCL_ALGO", "value": "Tree", "withheld": None, "source": "environment",
        "family": "nccl", "applies": True}
KEPT = {"name": "NCCL_NVLS_ENABLE", "value": "0", "withheld": None, "source": "environment",
        "family": "nccl", "applies": True}


def _scaled(stats: dict[str, Any], share: float) -> dict[str, Any]:
    out = dict(stats, median_gbs=stats["median_gbs"] * share,
               min_gbs=stats["min_gbs"] * share, max_gbs=stats["max_gbs"] * share,
               samples_gbs=[s * share for s in stats["samples_gbs"]])
    if stats.get("ci95_gbs"):
        out["ci95_gbs"] = [v * share for v in stats["ci95_gbs"]]
    return out


def _tree(rerun_share: float | None, recorded: bool = True) -> dict[str, Any]:
    """The healthy node's document with its all-reduce at 71% under NCCL_ALGO=Tree and,
    where `rerun_share` is given, a rerun without it at that share of the healthy one."""
    data: dict[str, Any] = copy.deepcopy(json.loads(H200X4.read_text()))
    data["settings"] = [TREE, KEPT] if recorded else None
    for result in data["node"]:
        if result["kind"] != "allreduce":
            continue
        healthy = result["stats"]
        result["stats"] = _scaled(healthy, 0.71)
        result["gbs"], result["algbw_gbs"] = (result["stats"]["median_gbs"],
                                              result["algbw_gbs"] * 0.71)
        result["settings"] = {"NCCL_ALGO": "Tree", "NCCL_NVLS_ENABLE": "0"}
        if rerun_share is not None:
            again = _scaled(healthy, rerun_share)
            result["rerun"] = {
                "without": ["NCCL_ALGO"], "kept": ["NCCL_NVLS_ENABLE"], "floor_gbs": 318.33,
                "floor_basis": "records: 353.7 GB/s expected", "gbs": again["median_gbs"],
                "min_gbs": again["min_gbs"], "max_gbs": again["max_gbs"],
                "samples_gbs": again["samples_gbs"], "transports": {"P2P": 96},
                "ran_with": ["NCCL_NVLS_ENABLE"], "wall_s": 9.5}
    return data


def _report(engine: Engine, data: dict[str, Any]) -> Report:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        ingest.store(parse_document(data, "h200x4"), Origin("lent", "h200x4"))
    return build_report(engine, ReportOptions(), "test")


def test_a_rerun_that_is_not_short_makes_it_the_renters_setting(engine: Engine) -> None:
    report = _report(engine, _tree(1.0))
    assert report.dispute == () and report.unsettled == ()
    [found] = report.renter
    assert found.kind == "shortfall"
    assert found.cause is not None
    assert found.cause.startswith("all-reduce 250 GB/s under NCCL_ALGO=Tree (environment), "
                                  "353 without it, measured again in the same run")
    assert "unset it" in found.cause and "NCCL_NVLS_ENABLE=0 (environment) kept as found" \
        in found.cause
    # Stored as sent, on both backends.
    figures = read_node_results(engine, kind="allreduce")
    assert figures["rerun_without"].tolist() == ["NCCL_ALGO"] * 4
    assert figures["rerun_kept"].tolist() == ["NCCL_NVLS_ENABLE"] * 4
    assert set(figures["rerun_transport"]) == {"P2P"}
    assert (figures["rerun_gbs"] > figures["gbs"]).all()
    settings = read_settings(engine)
    assert settings[["name", "value", "source", "family"]].values.tolist() == [
        ["NCCL_ALGO", "Tree", "environment", "nccl"],
        ["NCCL_NVLS_ENABLE", "0", "environment", "nccl"]]
    assert "ALGO=Tree" in render(report, "md")  # Markdown escapes the underscore


def test_without_a_rerun_it_is_unsettled_and_never_disputed(engine: Engine) -> None:
    report = _report(engine, _tree(None))
    assert report.dispute == () and report.renter == ()
    [found] = report.unsettled
    assert found.details == ("NCCL_ALGO=Tree (environment)",)
    assert "not measured again without them" in (found.cause or "")
    assert "Not settled" in render(report, "md") and "Not settled" in render(report, "html")
    assert json.loads(render(report, "json"))["unsettled"][0]["details"] == [
        "NCCL_ALGO=Tree (environment)"]


def test_an_old_document_is_judged_on_what_its_all_reduce_recorded(engine: Engine) -> None:
    report = _report(engine, _tree(None, recorded=False))
    assert report.dispute == ()
    [found] = report.unsettled
    assert found.details == ("NCCL_ALGO=Tree (the all-reduce's record)",)


def test_still_short_without_the_settings_is_the_providers(engine: Engine) -> None:
    report = _report(engine, _tree(0.72))
    assert report.renter == () and report.unsettled == ()
    [found] = [f for f in report.dispute if f.kind == "shortfall"]
    assert "all-reduce" in found.title
    assert (found.cause or "").startswith("measured again in the same run without "
                                          "NCCL_ALGO=Tree (environment): 254 GB/s, still")


def test_a_setting_must_carry_a_value_or_why_not() -> None:
    data = _tree(None)
    data["settings"] = [dict(TREE, value=None)]
    with pytest.raises(AgentError, match=r"settings\.0: Value error, setting NCCL_ALGO: give "
                                         "a value or why it is withheld"):
        parse_document(data, "bad")
    data["settings"] = [dict(TREE, source="somewhere")]
    with pytest.raises(AgentError, match=r"settings\.0\.source"):
        parse_document(data, "bad")


def test_a_suspect_the_rerun_left_in_place_leaves_it_unsettled(engine: Engine) -> None:
    # NCCL_PROTO=LL neither taken out nor said kept (past the agent's cap, or an agent
    # that did not say): the rerun still ran under it, so still short is not the node's.
    data = _tree(0.72)
    proto = dict(TREE, name="NCCL_PROTO", value="LL")
    data["settings"] = [TREE, KEPT, proto]
    report = _report(engine, data)
    assert report.renter == ()
    assert [f for f in report.dispute if f.kind == "shortfall"] == []
    [found] = report.unsettled
    assert found.details == ("NCCL_PROTO=LL (environment)",)
    assert "still short; it ran still under NCCL_PROTO=LL (environment)" in (found.cause or "")


def test_a_secret_a_modified_agent_sends_is_withheld_by_the_controller() -> None:
    data = _tree(None)
    aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS's documented example key
    data["settings"] = [dict(TREE, name="CUDA_X", family="cuda", value=aws),
                        dict(TREE, name="NCCL_IB_PKEY", value="0x8001"),
                        dict(TREE, value="x" * 300), TREE]
    settings = parse_document(data, "a modified agent").settings or []
    assert [(s.name, s.value, s.withheld) for s in settings] == [
        ("CUDA_X", None, "it looks like a token or key"),
        ("NCCL_IB_PKEY", None, "its name says it may be a secret"),
        ("NCCL_ALGO", None, "longer than 256 characters"),
        ("NCCL_ALGO", "Tree", None)]


def test_an_anonymized_report_names_a_settings_file_by_kind_and_hides_odd_values() -> None:
    from fleet.analysis.node.whose import HIDDEN, RunSetting, anonymized

    ran = {1: (RunSetting("NCCL_ALGO", "Tree", "environment"),
               RunSetting("NCCL_PROTO", "LL", "nccl.conf:/home/alice/.nccl.conf"),
               RunSetting("NCCL_COMM_ID", "gpu-a17.corp:29500", "inventory"))}
    shown = {s.name: s for s in anonymized(ran)[1]}
    assert shown["NCCL_ALGO"].text == "NCCL_ALGO=Tree (environment)"
    # The file by its kind: a home directory names its user.
    assert shown["NCCL_PROTO"].text == "NCCL_PROTO=LL (nccl.conf)"
    # A host and port is the renter's machine, hidden as pids and users are.
    assert shown["NCCL_COMM_ID"].value == HIDDEN


def test_a_container_image_s_labels_move_no_figure() -> None:
    from agent.source import settings

    for name in ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NCCL_ALGO"):
        assert any(settings.moves(name, figure) for figure in ("matmul", "allreduce")), name
    for name in ("CUDA_DRIVER_VERSION", "NCCL_HOME", "TORCH_CUDNN_DIR", "CUDA_TOOLKIT_PATH"):
        assert not any(settings.moves(name, figure)
                       for figure in ("matmul", "allreduce", "memory_copy", "job")), name


def _gap_scene(engine: Engine, beta_settings: list[dict[str, Any]] | None) -> Report:
    """The scene's alpha and beta (beta 3% slower), beta's runs under `beta_settings`."""
    from fleet.model.document import AgentDocument
    from tests.report.scene import WHEN, hosts
    from tests.store import factory

    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for provider, host, knobs, listing in hosts()[:4]:
            data = factory.document(host=host, gpus=8, collected_at=WHEN,
                                    **{"harness": "1.3.0", **knobs})
            if provider == "beta" and beta_settings is not None:
                data["settings"] = beta_settings
            ingest.store(AgentDocument.model_validate(data), Origin(provider, host, listing))
    return build_report(engine, ReportOptions(), "test")


def test_a_matmul_gap_whose_slower_side_ran_under_such_settings_is_unsettled(
        engine: Engine) -> None:
    cublas = {"name": "CUBLAS_WORKSPACE_CONFIG", "value": ":0:0", "withheld": None,
              "source": "environment", "family": "cublas", "applies": True}
    report = _gap_scene(engine, [cublas, TREE])
    # Listed as not settled, and counted as listed: never disputed.
    assert report.gaps == () and report.counts()["gap"] == 1
    assert "gap 1 (not settled 1)" in report.findings_line()
    assert not any(f.kind == "gap" for f in report.dispute)
    [found] = [f for f in report.unsettled if f.kind == "gap"]
    assert found.provider == "beta" and found.title.startswith("beta is 3.")
    # The all-reduce's NCCL_ALGO cannot move a matmul: not named.
    assert found.cause == ("beta's H100 SXM5 80GB matmuls were measured under settings that "
                           "can move them and not measured again without them: "
                           "CUBLAS_WORKSPACE_CONFIG=:0:0 (environment); unset them and "
                           "measure again before disputing it")
    assert found.details == ("CUBLAS_WORKSPACE_CONFIG=:0:0 (environment)",)
    page = render(report, "md")
    assert "### Not settled" in page and "CUBLAS\\_WORKSPACE\\_CONFIG=:0:0" in page


def test_the_same_gap_without_such_settings_is_disputed(engine: Engine) -> None:
    report = _gap_scene(engine, [TREE])
    assert [(g.slower, g.faster) for g in report.gaps] == [("beta", "alpha")]
    assert [f.provider for f in report.dispute if f.kind == "gap"] == ["beta"]
    assert not any(f.kind == "gap" for f in report.unsettled)

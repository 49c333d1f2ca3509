"""examples/grafana/fleet.json queries only what `fleet metrics` emits (and, to join on the
GPU's UUID, dcgm-exporter's DCGM_FI_* series), and groups by labels fleet's series carry."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import fleet
from fleet.metrics import metrics_text
from tests.conftest import ROOT
from tests.metrics.test_metrics import fill, parsed
from tests.report.test_not_measured import _failed as failed_job

DASHBOARD = ROOT / "examples" / "grafana" / "fleet.json"
# PromQL's words that look like metric names where they stand.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "inf", "nan"}
CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression: the panels' targets and the template variables' queries."""
    found = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            found.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", text))
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers left once strings, label
    matchers, grouping clauses, function calls, numbers and keywords are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = CLAUSE.sub(" ", text)
    names = set()
    for match in IDENTIFIER.finditer(text):
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or match.group().lower() in KEYWORDS:
            continue
        names.add(match.group())
    return names


def grouping_labels(expr: str) -> set[str]:
    return {name.strip() for _, inside in CLAUSE.findall(expr) for name in inside.split(",")
            if name.strip()}


def test_queries_are_read_as_meant() -> None:
    expr = ('quantile by (provider, variant) (0.5, fleet_gpu_x{a="b{c}", d=~"$d"}) '
            "* on (UUID) group_left (host) DCGM_FI_DEV_GPU_TEMP or vector(0)")
    assert metric_names(expr) == {"fleet_gpu_x", "DCGM_FI_DEV_GPU_TEMP"}
    assert grouping_labels(expr) == {"provider", "variant", "UUID", "host"}


def test_every_metric_the_dashboard_queries_is_one_fleet_metrics_emits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    fill(url, tmp_path)
    # And a node whose GPU 2 could not run its job (tests/report/test_not_measured.py).
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps(failed_job()))
    with fleet.Store(url) as store:
        assert store.ingest([failed], provider="other", host="h100x4")["stored"] == 1
    with fleet.Store(url) as store:
        samples = parsed(metrics_text(store))
    labels = {name for series in samples.values() for got, _ in series for name in got}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = queries(dashboard)
    used = set().union(*(metric_names(e) for e in exprs))
    fleet_names = {n for n in used if n.startswith("fleet_")}
    assert fleet_names and fleet_names <= set(samples), fleet_names - set(samples)
    assert all(n.startswith("DCGM_FI_") for n in used - fleet_names), used - fleet_names
    # Every family with series is on the dashboard, or said here why not: the all-reduce's
    # size is a label's companion; the host's limits and storage (issue 58) have no panel
    # yet (the report's section shows them; alerts read them from Prometheus).
    host = {"fleet_host_collected_timestamp_seconds", "fleet_host_limit",
            "fleet_host_software_info", "fleet_storage_bytes_per_second",
            "fleet_storage_small_files_per_second"}
    apart = set(samples) - fleet_names
    assert "fleet_node_allreduce_size_bytes" in apart
    assert apart - host == {"fleet_node_allreduce_size_bytes"}, apart - host
    grouped = set().union(*(grouping_labels(e) for e in exprs))
    assert grouped <= labels, grouped - labels
    # Panels join dcgm-exporter's series on the label both export.
    assert any("on (UUID)" in e and "DCGM_FI_" in e for e in exprs)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


# What fleet keeps night after night, each with a time-series panel of its own: the figures
# a sweep measures again every night, the health of each card, the findings by side.
KEPT = {"fleet_gpu_matmul_flops_per_second", "fleet_gpu_job_tokens_per_second",
        "fleet_gpu_memory_copy_bytes_per_second", "fleet_node_allreduce_bus_bytes_per_second",
        "fleet_open_findings", "fleet_gpu_health"}


def series_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels that draw a series over time, the nights."""
    return [p for p in dashboard["panels"] if p["type"] == "timeseries"]


def test_each_kept_series_has_a_panel_over_the_nights() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = series_panels(dashboard)
    drawn = set().union(*(metric_names(t["expr"]) for p in panels for t in p["targets"]))
    assert drawn == KEPT, drawn ^ KEPT
    for panel in panels:
        # A night's figure stands until the next night's: steps, over a month of nights.
        assert panel["fieldConfig"]["defaults"]["custom"]["lineInterpolation"] == "stepAfter"
        assert all(t.get("range") and not t.get("instant") for t in panel["targets"])
    assert dashboard["time"]["from"] == "now-30d"
    # Each GPU's own nights, as the sweep compares a GPU with its past.
    assert any("{{gpu}}" in t["legendFormat"] and "fleet_gpu_matmul" in t["expr"]
               for p in panels for t in p["targets"])
    # No two panels overlap on the grid.
    cells = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, p["title"]
        cells |= mine

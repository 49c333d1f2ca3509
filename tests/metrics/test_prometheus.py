"""A real Prometheus server (Debian's `prometheus` package; .ci/run installs it) scrapes
`fleet metrics` output served over HTTP with OpenMetrics' content type, and its query API
answers with fleet's series, labels and values as exported."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import fleet
from fleet.metrics import metrics_text
from tests.conftest import ROOT
from tests.metrics.test_dashboard import DASHBOARD, queries, series_panels
from tests.metrics.test_metrics import HOSTNAME, PROVIDER, fill
from tests.report.test_not_measured import _failed as failed_job
from tests.sweep.conftest import stop

PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# The H200 node's GPU 0 (its provider's name holds quotes: escaped as PromQL reads them).
GPU0 = f"fleet_gpu_matmul_flops_per_second{{gpu=\"0\", provider={json.dumps(PROVIDER)}}}"
SEQUENTIAL = ROOT / "bench" / "records" / "2026-11-26-h200x4-node-probe" / "sequential.jsonl"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    """`fleet metrics` of the filled store on a local HTTP server, as a scrape target; a
    night's sweep replaces what it serves (`body`)."""

    address: str
    body: bytes


@pytest.fixture
def served(store_url: str, tmp_path: Path) -> Iterator[Served]:
    fill(store_url, tmp_path)
    with fleet.Store(store_url) as store:
        target = Served("", metrics_text(store).encode("utf-8"))

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = target.body
            self.send_response(200)
            self.send_header("Content-Type", OPENMETRICS)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    target.address = f"127.0.0.1:{server.server_address[1]}"
    yield target
    server.shutdown()
    server.server_close()


def _next_night(store_url: str, tmp_path: Path) -> bytes:
    """The H200 node measured again (its sequential run, 2026-11-26, the same four GPUs
    seven minutes later: bench/records/2026-11-26-h200x4-node-probe) as the next night's
    newest document, a node with a stage not measured beside it, and what `fleet metrics`
    then serves."""
    for line in SEQUENTIAL.read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "document":
            data = event["document"]
    data["host"]["hostname"] = HOSTNAME
    data["collected_at"] = "2026-11-27T01:44:34+00:00"
    path = tmp_path / "night-2.json"
    path.write_text(json.dumps(data))
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps(failed_job()))
    with fleet.Store(store_url) as store:
        assert store.ingest([path], provider=PROVIDER, host="h200x4")["stored"] == 1
        assert store.ingest([failed], provider="other", host="h100x4")["stored"] == 1
        return metrics_text(store).encode("utf-8")


def _range(api: str, promql: str, start: float, end: float) -> list[dict[str, Any]]:
    url = f"{api}/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"})
    with urllib.request.urlopen(url, timeout=5) as answer:
        data = json.load(answer)
    assert data["status"] == "success", data
    return list(data["data"]["result"])


def _query(api: str, promql: str) -> list[dict[str, Any]]:
    url = f"{api}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as answer:
        data = json.load(answer)
    assert data["status"] == "success", data
    return list(data["data"]["result"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_real_prometheus_scrapes_fleet_metrics(served: Served, store_url: str,
                                                 tmp_path: Path) -> None:
    if PROMETHEUS is None:
        pytest.skip("no prometheus binary on this machine (Debian: apt-get install "
                    "prometheus; .ci/run installs it)")
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: fleet
    static_configs:
      - targets: ["{served.address}"]
""")
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT)
    api = f"http://127.0.0.1:{port}"
    try:
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not found:
            time.sleep(0.5)
            if process.poll() is not None:
                pytest.fail(f"prometheus exited: {log.read_text()[-2000:]}")
            try:
                found = _query(api, "fleet_gpu_matmul_flops_per_second")
            except OSError:
                continue  # not listening yet
        assert found, f"no scrape in 60 s: {log.read_text()[-2000:]}"
        assert len(found) == 4
        gpu0 = next(r for r in found if r["metric"]["gpu"] == "0")
        assert gpu0["metric"]["Hostname"] == HOSTNAME  # escaped out, read back whole
        assert gpu0["metric"]["provider"] == PROVIDER and gpu0["metric"]["job"] == "fleet"
        assert float(gpu0["value"][1]) == pytest.approx(663.159211e12, rel=1e-8)
        health = _query(api, 'fleet_gpu_health{verdict="degraded"} == 1')
        assert [(r["metric"]["gpu"], r["metric"]["variant"]) for r in health] == [
            ("1", "H100-SXM5-80GB")]
        up = _query(api, 'up{job="fleet"}')
        assert [r["value"][1] for r in up] == ["1"]
        # The scrape read OpenMetrics: the unit and type reached Prometheus' metadata.
        with urllib.request.urlopen(f"{api}/api/v1/metadata?metric="
                                    "fleet_gpu_memory_copy_bytes_per_second", timeout=5) as r:
            meta = json.load(r)["data"]["fleet_gpu_memory_copy_bytes_per_second"][0]
        assert meta["type"] == "gauge" and meta["unit"] == "bytes_per_second"
        # A second night: the node measured again, and a 4x H100 whose GPU 2's job ran
        # out of memory (tests/report/test_not_measured.py); Prometheus keeps both nights.
        started = time.time() - 30
        served.body = _next_night(store_url, tmp_path)
        gpu0_now = 0.0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.5)
            answer = _query(api, GPU0)
            gpu0_now = float(answer[0]["value"][1])
            if gpu0_now != pytest.approx(663.159211e12, rel=1e-8):
                break
        assert gpu0_now == pytest.approx(665.3e12, rel=1e-3), "the second night never came"
        time.sleep(1.5)  # a scrape or two of the second night
        end = time.time()
        # Every query of the Grafana dashboard is PromQL this server runs, and those on
        # fleet's series alone find some (the dcgm-exporter join is empty here); every
        # time-series panel's query draws from the scrapes over both nights.
        dashboard = json.loads(DASHBOARD.read_text())
        for expr in queries(dashboard):
            answer = _query(api, _all(expr))
            assert answer or "DCGM_FI_" in expr, expr
        for panel in series_panels(dashboard):
            for target in panel["targets"]:
                lines = _range(api, _all(target["expr"]), started, end)
                assert lines and all(line["values"] for line in lines), panel["title"]
        # Each GPU's nights: GPU 0's line holds both nights' figures.
        (line,) = _range(api, GPU0, started, end)
        nights = sorted({round(float(v) / 1e12, 1) for _, v in line["values"]})
        assert nights == [663.2, 665.3], nights
    finally:
        stop(process)


def _all(expr: str) -> str:
    """A dashboard query with its variables at "all"."""
    return expr.replace("$provider", ".*").replace("$variant", ".*")

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import fleet
from fleet.metrics import metrics_text
from tests.metrics.test_dashboard import DASHBOARD, queries
from tests.metrics.test_metrics import HOSTNAME, PROVIDER, fill
from tests.sweep.conftest import stop

PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(store_url: str, tmp_path: Path) -> Iterator[str]:
    """`fleet metrics` of the filled store on a local HTTP server, as a scrape target."""
    fill(store_url, tmp_path)
    with fleet.Store(store_url) as store:
        body = metrics_text(store).encode("utf-8")

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
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
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _query(api: str, promql: str) -> list[dict[str, Any]]:
    url = f"{api}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as answer:
        data = json.load(answer)
    assert data["status"] == "success", data
    return list(data["data"]["result"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_real_prometheus_scrapes_fleet_metrics(served: str, tmp_path: Path) -> None:
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
      - targets: ["{served}"]
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
        # Every query of the Grafana dashboard is PromQL this server runs, and those on
        # fleet's series alone find some (the dcgm-exporter join is empty here).
        dashboard = json.loads(DASHBOARD.read_text())
        for expr in queries(dashboard):
            answer = _query(api, expr.replace("$provider", ".*").replace("$variant", ".*"))
            assert answer or "DCGM_FI_" in expr, expr
    finally:
        stop(process)

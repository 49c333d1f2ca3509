"""From a real `fleet probe` of the loopback SSH hosts to the procurement report."""

from __future__ import annotations

import json
import re

from tests.probe.conftest import Workspace
from tests.report.browser import open_page


def test_probe_then_report_finds_the_mislisted_host(workspace: Workspace) -> None:
    hosts = workspace.good_hosts()
    for spec in hosts.values():
        spec.update(price_per_gpu_hour=2.25, currency="USD", tags=["loopback"])
    inventory = workspace.inventory(hosts)
    html = workspace.root / "probe-report.html"
    probed = workspace.fleet("probe", str(inventory), "--db", str(workspace.db),
                             "--fingerprint-only", "--accept-new-host-keys",
                             "--report", str(html))
    assert probed.returncode == 0, probed.stderr
    assert re.search(rf"Report of run \d+ written to {re.escape(str(html))}", probed.stdout)
    # The mislisted host, and its listing hiding two variants (with lambda/a100-sxm4); the
    # two synthetic A100 recordings answer no ECC count, so lambda's health is unknown.
    # Only the kinds found, each counted on every side it is listed.
    assert "(findings: mismatch 2, health 1)" in " ".join(probed.stdout.split())

    report = workspace.fleet("report", "--db", str(workspace.db), "--format", "json",
                             "-o", "-", "--fail-on", "mismatch")
    assert report.returncode == 1, report.stderr
    data = json.loads(report.stdout)
    assert data["hosts"] == 4 and data["gpus_fingerprinted"] == 5
    assert [(m["provider"], m["host"], m["listed"], m["found"]) for m in data["mismatches"]] == [
        ("lambda", "a100-pcie", "A100 SXM4 80GB", "1 x A100-PCIe-80GB")]
    assert [(m["provider"], m["listed"], m["evidence"]) for m in data["mixed"]] == [
        ("lambda", "A100 SXM4 80GB",
         "A100-PCIe-80GB on 1 GPU of 1 host; A100-SXM4-80GB on 1 GPU of 1 host")]
    # Fingerprints only: nothing to compare or price, and the report says so.
    assert data["comparisons"] == [] and data["cost"] == [] and data["gpus_measured"] == 0

    page = open_page(html.as_uri(), workspace.root)
    assert page.console == []
    assert "a100-pcie" in page.dom and "found A100-PCIe-80GB" in page.dom

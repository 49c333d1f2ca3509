"""The network end to end: the lent 4x H200 node's own document, carrying a network the
agent reads from a published 8x H100 InfiniBand node (tests/fixtures/network/, with a
constructed fault where named), stored through the real ingest path on SQLite and
PostgreSQL and reported: a fault is in "What to dispute" with its action, a healthy
fabric raises nothing, and a host's strings reach the page as text."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Engine

from fleet.model.document import parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.report.build import Report
from fleet.store.ingest import Ingest, Origin, RunInfo
from tests.store import network_factory


def _store(engine: Engine, *documents: tuple[str, dict[str, Any]]) -> Report:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for host, data in documents:
            ingest.store(parse_document(data, host), Origin("lent", host))
    return build_report(engine, ReportOptions(), "test")


def _section(html: str) -> str:
    found = re.search(r'<section id="network">(.*?)</section>', html, re.S)
    assert found is not None
    return found.group(1)


def test_a_port_down_is_disputed_with_its_action(engine: Engine) -> None:
    report = _store(engine, ("node-a", network_factory.document("h100-8x-ib-port-down")))
    (host,) = report.network.hosts
    assert host.summary == "8 fabric NICs: 7 InfiniBand at 400 Gb/s; 1 InfiniBand down"
    assert [(f.rule, f.severity, f.devices) for f in host.findings] == [
        ("port-down", "fault", ("mlx5_5",))]
    assert report.counts()["network"] == 1
    (disputed,) = [f for f in report.dispute if f.kind == "network"]
    assert (disputed.provider, disputed.title) == ("lent",
                                                    "node-a: 1 of 8 fabric ports not active")
    assert disputed.evidence == "mlx5_5: state Down, physical state Disabled"
    assert disputed.details[0].startswith("action: Ask the provider to bring the ports up")
    md, html = render(report, "md"), render(report, "html")
    assert "**network**, lent: node-a: 1 of 8 fabric ports not active" in md
    assert "Action: Ask the provider to bring the ports up" in md
    section = _section(html)
    assert "node-a: 1 of 8 fabric ports not active" in section
    assert "action: Ask the provider to bring the ports up" in section
    assert "mlx5_5" in section and "PIX to GPU 5" in section


def test_a_healthy_fabric_raises_nothing(engine: Engine) -> None:
    report = _store(engine, ("node-a", network_factory.document("h100-8x-ib-ndr")))
    (host,) = report.network.hosts
    assert host.summary == "8 fabric NICs: 8 InfiniBand at 400 Gb/s"
    assert (host.gdr, host.findings) == ("on", ())
    assert report.counts()["network"] == 0
    assert not [f for f in report.dispute if f.kind == "network"]
    assert "8 fabric NICs: 8 InfiniBand at 400 Gb/s" in render(report, "md")


def test_fewer_nics_than_its_siblings(engine: Engine) -> None:
    short = network_factory.document("h100-8x-ib-ndr", hostname="node-c")
    short["network"]["devices"] = [d for d in short["network"]["devices"]
                                   if d["name"] != "mlx5_7"]
    short["network"]["fabric_nics"] = 7
    report = _store(engine, ("node-a", network_factory.document("h100-8x-ib-ndr")),
                    ("node-b", network_factory.document("h100-8x-ib-ndr", "node-b")),
                    ("node-c", short))
    found = {h.host: [f.rule for f in h.findings] for h in report.network.hosts}
    assert found == {"node-a": [], "node-b": [], "node-c": ["fewer-than-siblings"]}
    (disputed,) = [f for f in report.dispute if f.kind == "network"]
    assert disputed.title == "node-c: 7 fabric NICs, its lent H200-SXM-141GB siblings 8"


def test_the_lent_node_without_a_fabric_is_information(engine: Engine) -> None:
    report = _store(engine, ("h100", network_factory.document("lent-h100-1x", "h100")))
    (host,) = report.network.hosts
    assert host.summary == "no fabric NIC: eth0 (virtual, virtio_net) only"
    assert [(f.rule, f.severity) for f in host.findings] == [("no-fabric", "info")]
    # Its modules could do DMA-BUF, but it has nothing to use GPUDirect RDMA with.
    assert host.gdr == "not in use, no fabric NIC"
    assert report.counts()["network"] == 0
    assert "no fabric NIC: eth0 (virtual, virtio\\_net) only" in render(report, "md")


def test_a_hosts_strings_are_text_on_the_page(engine: Engine) -> None:
    data = network_factory.document("h100-8x-ib-port-down")
    mark = "<img src=x onerror=alert(1)>*_[x]"
    for device in data["network"]["devices"]:
        if device["name"] == "mlx5_5":
            device["name"] = mark
            device["firmware"] = "<b>fw</b>"
    report = _store(engine, ("node-a", data))
    html, md = render(report, "html"), render(report, "md")
    assert "<img src=x" not in html and "<b>fw" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in _section(html)
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;\\*\\_\\[x\\]" in md


def test_an_anonymized_report_names_the_host_by_its_alias(engine: Engine) -> None:
    _store(engine, ("node-a", network_factory.document("h100-8x-ib-port-down")))
    report = build_report(engine, ReportOptions(anonymize=True), "test")
    (host,) = report.network.hosts
    assert host.host != "node-a" and host.provider != "lent"
    text = render(report, "md") + render(report, "html") + render(report, "json")
    assert "node-a" not in text


def test_a_node_sold_with_a_fabric_is_judged_against_its_listing(engine: Engine) -> None:
    from fleet.store.ingest import Listing

    sold = Listing(expect={"fabric_nics": 8, "fabric_rate_gbps": 400})
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        # The lent 1x H100 VM (virtio eth0 only) listed as a training node with 8 x NDR.
        ingest.store(parse_document(network_factory.document("lent-h100-1x", "vm"), "vm"),
                     Origin("lent", "vm", sold))
        # The published 8x H100 NDR node with one port at HDR 200, listed the same.
        ingest.store(parse_document(network_factory.document("h100-8x-ib-hdr-port", "ndr"),
                                    "ndr"), Origin("lent", "ndr", sold))
        # The healthy 8x NDR node, listed the same: nothing.
        ingest.store(parse_document(network_factory.document("h100-8x-ib-ndr", "ok"), "ok"),
                     Origin("lent", "ok", sold))
    report = build_report(engine, ReportOptions(), "test")
    disputed = {(f.title.split(":")[0], f.kind) for f in report.dispute if f.kind == "network"}
    assert ("vm", "network") in disputed and ("ndr", "network") in disputed
    assert not any(f.title.startswith("ok:") for f in report.dispute if f.kind == "network")
    vm = next(h for h in report.network.hosts if h.host == "vm")
    assert ("fewer-than-sold", "fault") in [(f.rule, f.severity) for f in vm.findings]

"""The host's limits, storage and patches end to end (issue 58): the lent 4x H200 node's
own document carrying the limits the agent reads from tests/fixtures/host_limits/ and
storage figures, stored through the real ingest path on SQLite and PostgreSQL and
reported: each finding on its side by whose it is, a healthy node raising nothing, and a
host's strings reaching the page as text."""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import Engine, select

from fleet.model.document import parse_document
from fleet.report import ReportOptions, build_report, render
from fleet.report.build import Report
from fleet.store import models
from fleet.store.host_storage import read_host_limits, read_storage
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from tests.conftest import FIXTURES
from tests.store import host_storage_factory as make

LENT = FIXTURES / "nodes" / "h200-lent-host-storage" / "document.json"


def _store(engine: Engine, *documents: tuple[str, dict[str, Any], dict[str, Any] | None],
           ) -> Report:
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for host, data, expect in documents:
            ingest.store(parse_document(data, host),
                         Origin("lent", host, Listing(expect=expect)))
    return build_report(engine, ReportOptions(), "test")


def _sides(report: Report, host: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for side, f in report.listed():
        if f.kind in ("host_limit", "storage", "bulletin") and f.title.startswith(host):
            found.setdefault(side, []).append(f.title)
    return found


def test_a_renters_container_is_the_renters_and_an_unnamed_one_not_settled(
        engine: Engine) -> None:
    limits = make.limits("docker-default")
    report = _store(
        engine,
        ("mine", make.document("mine", "vm+container", limits), {"container": "renter"}),
        ("theirs", make.document("theirs", "vm+container", limits), {"container": "provider"}),
        ("unsaid", make.document("unsaid", "vm+container", limits), None))
    # 8 CPUs of the cgroup's quota for 4 GPUs: 2 a GPU, not under the floor; its 64 GiB
    # for four 141 GB GPUs is, and is the container's like its /dev/shm.
    for host, side in (("mine", "renter"), ("theirs", "provider"), ("unsaid", "unsettled")):
        assert _sides(report, host) == {side: [
            f"{host}: /dev/shm 64 MiB, under 1 GiB",
            f"{host}: 17 GB of memory a GPU, less than the GPU's 151"]}
    unsaid = next(f for f in report.unsettled if f.title.startswith("unsaid: /dev/shm"))
    assert "set expect: {container: renter} or {container: provider}" in unsaid.evidence
    assert unsaid.details[0] == "action: run the container with --shm-size=16g (or --ipc=host)"
    assert report.counts()["host_limit"] == 6


def test_a_misconfigured_bare_metal_node_is_the_providers_to_fix(engine: Engine) -> None:
    report = _store(engine, ("hgx", make.document(
        "hgx", "bare-metal", make.limits("hgx-bare-metal", toolkit="1.16.1",
                                         fabric_manager="570.86.15")), None))
    assert _sides(report, "hgx") == {"provider": [
        "hgx: CPU governor powersave on 2 CPUs",
        "hgx: IOMMU translates the DMA of 1 GPUs",
        "hgx: PCIe ACS redirects peer traffic on 2 bridges",
        "hgx: NVIDIA Container Toolkit 1.16.1 under 3 NVIDIA bulletins 5582 "
        "(CVE-2024-0132), 5616 (CVE-2025-23359), 5659 (CVE-2025-23266)",
        "hgx: fabric manager 570.86.15, driver 580.159.04"]}
    (acs,) = [f for f in report.dispute if "ACS" in f.title]
    assert acs.evidence.startswith("ACS P2P redirect on 0000:17:00.0, 0000:17:01.0")
    (line,) = report.host_storage.hosts
    # 4 CPUs for 4 GPUs is what the machine has: said, not disputed, with nothing listed.
    assert line.notes[0].startswith("1.0 CPUs a GPU, under 2 (4 CPUs for 4 GPUs): what "
                                    "the machine has, nothing listed to dispute")
    assert ("locked memory", "unlimited") in line.limits
    assert ("ACS", "redirect on 2 of 4 bridges") in line.limits
    md = render(report, "md")
    assert "**dispute**: hgx: PCIe ACS redirects peer traffic on 2 bridges" in md


def test_storage_against_its_listing_and_its_siblings(engine: Engine) -> None:
    healthy = make.limits("hgx-bare-metal", governors={"performance": 4},
                          iommu={"groups": 0, "gpu_domains": {}, "cmdline": []},
                          acs={"endpoints": 0, "bridges": [], "readable": False},
                          cpus_usable=64)
    listed = {"scratch_read_gbps": 6, "shared_fs": ["/mnt/data"]}

    def node(name: str, read: float, *more: dict[str, Any]) -> tuple[str, dict[str, Any],
                                                                     dict[str, Any]]:
        block = make.storage(make.target("/scratch", read=read), *more)
        return name, make.document(name, "bare-metal", healthy, block), listed

    shared = make.target("/mnt/data", role="shared", fs_type="nfs4", read=1.1)
    report = _store(engine, node("n1", 6.5, shared), node("n2", 6.4, shared),
                    node("n3", 6.6, shared), node("n4", 3.0, shared),
                    node("n5", 6.5, make.target("/mnt/data", role="shared",
                                                refused="no such folder", write_gbps=None,
                                                read_gbps=None)))
    assert _sides(report, "n1") == {}
    assert _sides(report, "n4") == {"provider": [
        "n4: scratch /scratch read 3.00 GB/s, listed 6",
        "n4: scratch read 3.00 GB/s, 46% of its siblings' 6.50"]}
    assert _sides(report, "n5") == {"provider": [
        "n5: shared filesystem /mnt/data not there: no such folder"]}
    assert report.counts()["storage"] == 3
    hosts = {h.host: h for h in report.host_storage.hosts}
    assert hosts["n1"].storage[1].sequential == "write 3.10, read 1.10 GB/s (O_DIRECT)"
    assert hosts["n5"].storage[1].sequential == "not measured: no such folder"


def test_the_blocks_read_back_as_sent_and_hostile_paths_are_text(engine: Engine) -> None:
    hostile = "/mnt/<script>alert(1)</script>"
    limits = make.limits("docker-default")
    block = make.storage(make.target(hostile, role="shared", fs_type="nfs4"))
    report = _store(engine, ("x", make.document("x", "container", limits, block), None))
    with engine.connect() as conn:
        document_id = conn.execute(select(models.Document.id)).scalar_one()
    assert read_storage(engine, documents=[document_id])[document_id].targets[0].path == hostile
    assert read_host_limits(engine, documents=[document_id])[document_id].shm_bytes == 64 << 20
    section = re.search(r'<section id="host-storage">(.*?)</section>',
                        render(report, "html"), re.S)
    assert section is not None
    assert "<script>alert" not in section.group(1)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section.group(1)


def test_the_lent_h200s_own_document_is_told_and_disputes_nothing(engine: Engine) -> None:
    # bench/records/2026-11-29-h200-host-storage: the agent on a lent 1x H200 VM.
    data = json.loads(LENT.read_text())
    report = _store(engine, ("h200", data, None))
    assert _sides(report, "h200") == {}
    (line,) = report.host_storage.hosts
    assert ("import torch", "6.2 s") in line.limits and ("locked memory", "unlimited") \
        in line.limits
    assert line.notes[0].startswith("135 GB of memory a GPU, less than the GPU's 151")
    (scratch,) = line.storage
    assert (scratch.path, scratch.fs_type) == ("/tmp", "ext4")
    assert scratch.sequential == "write 1.98, read 1.92 GB/s (O_DIRECT)"
    assert scratch.checkpoint == "2.0 GiB: written 0.74, read 1.44 GB/s"

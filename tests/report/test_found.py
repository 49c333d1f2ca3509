"""The report's "fleet as found": every host with its GPUs, in Chromium, Markdown and JSON.

The fleet, stored through the real ingest path:
- alpha-01: 8 x H100 SXM5, GPU 5 capped at 500 W (shown apart); alpha-02: 8 alike.
- beta-01: 4 x H100 SXM5 and 4 x A100 SXM4 in one node (two rows).
- gamma-01: a vGPU guest, one RTX A6000 24Q slice, its power not visible to the tenant.
- delta-01: an H100 SXM5 with MIG on (3g.40gb twice, 1g.10gb), whose tenant may set the
  power limit (and nobody could tell whether ECC); its host and provider names are hostile
  HTML.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from agent.gpu.variants import classify_variant
from fleet.cli import main
from fleet.model.document import AgentDocument
from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from tests.report.browser import open_page, screenshot
from tests.store import factory
from tests.store.conftest import migrated_sqlite

WHEN = dt.datetime(2026, 11, 24, 3, 0, tzinfo=dt.UTC)
EVIL_PROVIDER = '<script>document.title="pwned-provider"</script>'
EVIL_HOST = '<img src=x onerror="document.title=\'pwned-host\'">'
MIG = [("3g.40gb", 40192, 60), ("3g.40gb", 40192, 60), ("1g.10gb", 9984, 16)]


def _alpha_01() -> dict[str, Any]:
    data = factory.document(host="alpha-01", gpus=8, collected_at=WHEN, harness="1.3.0")
    data["gpus"][5].update(power_limit_w=500.0, power_limit_enforced_w=500.0)
    return data


def _beta_01() -> dict[str, Any]:
    return factory.document(host="beta-01", gpus=8, collected_at=WHEN, harness="1.3.0",
                            variants=["H100 SXM5 80GB"] * 4 + ["A100 SXM4 80GB"] * 4)


def _vgpu_guest() -> dict[str, Any]:
    data = factory.document(host="gamma-01", gpus=1, collected_at=WHEN, harness="1.3.0",
                            tflops=120.0)
    name, pci = "NVIDIA RTXA6000-24Q", "0x223010DE"
    data["gpus"][0].update(
        name=name, pci_device_id=pci, virtualization_mode="vgpu", memory_total_mib=24576,
        power_limit_w=None, power_limit_enforced_w=None, power_limit_default_w=None,
        power_limit_min_w=None, power_limit_max_w=None, nvlink_links_active=0,
        nvlink_links_total=0, ecc_enabled=False, architecture="Ampere",
        # What the agent says of this card, from its id, name and virtualization mode.
        variant=classify_variant(int(pci, 16), name, "vgpu"))
    AgentDocument.model_validate(data)
    return data


def _mig_host() -> dict[str, Any]:
    data = factory.document(host=EVIL_HOST, gpus=1, collected_at=WHEN, harness="1.3.0")
    data["gpus"][0].update(mig_enabled=True, mig_devices=[
        {"index": i, "name": f"MIG {p} Device {i}", "profile": p, "uuid": f"MIG-{i}",
         "memory_total_mib": mib, "sm_count": sms, "gpu_instance_id": i + 1,
         "compute_instance_id": 0} for i, (p, mib, sms) in enumerate(MIG)])
    data["gpus"][0]["capabilities"]["power_limit"] = factory.capability("yes")
    data["gpus"][0]["capabilities"]["ecc"] = factory.capability("unknown")
    return data


@pytest.fixture(scope="module")
def found_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = migrated_sqlite(tmp_path_factory.mktemp("found") / "fleet.db")
    engine = open_engine(resolve(url))
    sxm = Listing({"variant": "H100 SXM5 80GB", "gpu_count": 8}, 2.49, "USD", ())
    hosts = [("alpha", "alpha-01", _alpha_01(), sxm),
             ("alpha", "alpha-02", factory.document(host="alpha-02", gpus=8,
                                                    collected_at=WHEN, harness="1.3.0"), sxm),
             ("beta", "beta-01", _beta_01(), sxm),
             ("gamma", "gamma-01", _vgpu_guest(), Listing({}, 1.10, "USD", ())),
             (EVIL_PROVIDER, EVIL_HOST, _mig_host(), Listing({}, 2.0, "USD", ()))]
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for provider, host, data, listing in hosts:
            ingest.store(AgentDocument.model_validate(data), Origin(provider, host, listing))
    engine.dispose()
    return url


def _report(url: str, path: Path, *args: str) -> str:
    done = CliRunner().invoke(main, ["report", "-o", str(path), *args, "--db", url],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return path.read_text()


def _rows(dom: str) -> list[list[str]]:
    """The found section's rows as the reader sees them: each cell's text, without the
    time under a host's name."""
    section = re.search(r'<section id="found">(.*?)</section>', dom, re.S)
    assert section is not None
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", section.group(1), re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>",
                           re.sub(r'<div class="evidence">.*?</div>', "", row), re.S)
        if cells:
            rows.append([html.unescape(" ".join(re.sub(r"<[^>]+>", "", c).split()))
                         for c in cells])
    return rows


def test_every_host_is_shown_as_found_in_chromium(found_url: str, tmp_path: Path) -> None:
    out = tmp_path / "found.html"
    _report(found_url, out)
    page = open_page(out.as_uri(), tmp_path)
    assert page.console == []
    rows = _rows(page.dom)
    by_host = {row[0]: row for row in rows}
    # Host, GPUs, variant, driver, power (settable), SM clock max / under load (the memory
    # clock's max beneath), virtualization (MIG and ECC beneath), PCIe, NVLink, tenant may
    # change, health (these agents read no health counters: never shown as healthy).
    assert by_host["alpha-02"] == [
        "alpha-02", "8", "H100 SXM5 80GB", "580.159.04 (13.0)", "700 W (200-700)",
        "1980 / 1410 MHz", "passthrough", "Gen5 x16", "18 of 18 links up", "nothing",
        "not read"]
    assert '<div class="evidence">memory 2619 MHz</div>' in page.dom
    assert '<div class="evidence">MIG off, ECC on</div>' in page.dom
    assert page.dom.count('<div class="evidence">2026-11-24 03:00 UTC</div>') == 5
    # alpha-01: seven GPUs alike, GPU 5 apart with what differs.
    at = rows.index(by_host["alpha-01"])
    assert rows[at][1:3] == ["7 (0, 1, 2, 3, 4, 6, 7)", "H100 SXM5 80GB"]
    assert rows[at + 1][:5] == ["differs power limit", "1 (5)", "H100 SXM5 80GB",
                                "580.159.04 (13.0)", "500 W (200-700)"]
    # beta-01: one node, two variants.
    at = rows.index(by_host["beta-01"])
    assert rows[at][1:3] == ["4 (0, 1, 2, 3)", "H100 SXM5 80GB"]
    assert rows[at + 1][0].startswith("differs variant")
    assert rows[at + 1][1:3] == ["4 (4, 5, 6, 7)", "A100 SXM4 80GB"]
    # The vGPU guest: a slice of an RTX A6000, its profile decoded, its power not visible.
    guest = by_host["gamma-01"]
    assert guest[1] == "1" and "RTXA6000-24Q" in guest[2] and "vGPU" in guest[2]
    assert guest[4] == "not visible" and guest[6] == "vgpu RTXA6000-24Q"
    assert guest[8] == "none"
    # The MIG host, whose hostile name is text, not an element.
    mig = [row for row in rows if row[0] == EVIL_HOST]
    assert len(mig) == 1 and mig[0][9] == "power_limit (unknown: ecc)"
    assert "MIG on: 3g.40gb, 3g.40gb, 1g.10gb" in page.dom
    assert "<img" not in page.dom and "&lt;img src=x onerror=" in page.dom
    assert "pwned" not in re.search(r"<title>(.*?)</title>", page.dom, re.S).group(1)  # type: ignore[union-attr]
    summaries = re.findall(r"<summary><strong>(.*?)</strong>: (.*?)</summary>", page.dom)
    assert ("alpha", "2 hosts, 16 GPUs") in summaries and ("gamma", "1 host, 1 GPU") in summaries
    screenshot(out.as_uri(), "report-found.png", tmp_path)


def test_the_found_section_follows_the_filters(found_url: str, tmp_path: Path) -> None:
    out = tmp_path / "found.html"
    _report(found_url, out)
    page = open_page(out.as_uri() + "#provider=gamma", tmp_path)
    shown = re.findall(r'<details open="" data-provider="([^"]*)"( class="filtered-out")?',
                       page.dom)
    assert len(shown) == 4
    assert [p for p, hidden in shown if not hidden] == ["gamma"]
    page = open_page(out.as_uri() + "#variant=A100%20SXM4%2080GB", tmp_path)
    visible = [row for row in re.findall(r'<tr data-provider="[^"]*" data-variant="([^"]*)"'
                                         r'( class="[^"]*filtered-out[^"]*")?', page.dom)
               if not row[1]]
    assert visible and {variant for variant, _ in visible} == {"A100 SXM4 80GB"}


def test_markdown_and_json_carry_the_same_hosts(found_url: str, tmp_path: Path) -> None:
    data = json.loads(_report(found_url, tmp_path / "found.json"))
    hosts = {(h["provider"], h["host"]): h for h in data["found"]}
    assert set(hosts) == {("alpha", "alpha-01"), ("alpha", "alpha-02"), ("beta", "beta-01"),
                          ("gamma", "gamma-01"), (EVIL_PROVIDER, EVIL_HOST)}
    alpha = hosts[("alpha", "alpha-01")]
    assert alpha["gpu_count"] == 8 and alpha["differs"] == ["power limit"]
    assert [s["gpus"] for s in alpha["setups"]] == [[0, 1, 2, 3, 4, 6, 7], [5]]
    assert [s["power_limit_w"] for s in alpha["setups"]] == [700.0, 500.0]
    guest = hosts[("gamma", "gamma-01")]["setups"][0]
    assert (guest["form_factor"], guest["vgpu_profile"], guest["memory_gb"]) == (
        "vGPU", "RTXA6000-24Q", 24)
    assert hosts[(EVIL_PROVIDER, EVIL_HOST)]["setups"][0]["mig_devices"] == [
        "3g.40gb", "3g.40gb", "1g.10gb"]
    md = _report(found_url, tmp_path / "found.md")
    section = md[md.index("## The fleet as found"):md.index("## Provider gaps")]
    assert "### alpha: 2 hosts, 16 GPUs" in section
    assert "| alpha-01 | 7 (0, 1, 2, 3, 4, 6, 7) | H100 SXM5 80GB |" in section
    assert "| differs (power limit) | 1 (5) | H100 SXM5 80GB |" in section
    assert "vgpu RTXA6000-24Q" in section and "on: 3g.40gb, 3g.40gb, 1g.10gb" in section
    # Markdown escapes what hosts sent: the hostile host is no HTML element there either.
    assert "<img" not in section and "&lt;img src=x onerror=" in section


def test_an_anonymized_report_shows_the_fleet_without_names(found_url: str,
                                                            tmp_path: Path) -> None:
    for fmt in ("json", "html", "md"):
        text = _report(found_url, tmp_path / f"anon.{fmt}", "--anonymize")
        for secret in ("alpha", "beta-01", "gamma", "pwned", "onerror", "SN0000",
                       factory.gpu_uuid("alpha-01", 5), factory.gpu_uuid("gamma-01", 0),
                       "MIG-0", "00000000:", "gpu-01"):
            assert secret not in text, (fmt, secret)
    data = json.loads((tmp_path / "anon.json").read_text())
    # Still the fleet: five hosts, twenty-six GPUs, the node with a capped GPU among them.
    assert len(data["found"]) == 5
    assert sum(h["gpu_count"] for h in data["found"]) == 26
    assert [h["differs"] for h in data["found"]].count(["power limit"]) == 1


def test_the_library_gives_the_same_facts_as_found(found_url: str) -> None:
    import fleet

    with fleet.Store(found_url) as store:
        frame = store.fingerprints()
    rows = {(str(r.host), int(r.gpu_index)): r for r in frame.itertuples()}
    capped = rows[("alpha-01", 5)]
    assert (capped.power_limit_enforced_w, capped.power_limit_min_w,
            capped.power_limit_max_w) == (500.0, 200.0, 700.0)
    guest = rows[("gamma-01", 0)]
    assert guest.vgpu_profile == "RTXA6000-24Q" and guest.form_factor == "vGPU"
    assert guest.nvlink_links_total == 0 and guest.pcie_gen_current == 5
    mig = frame[frame["host"] == EVIL_HOST].iloc[0]
    assert mig["mig_devices"] == ["3g.40gb", "3g.40gb", "1g.10gb"]
    assert guest.mig_devices == []
    assert frame["may_set_power_limit"].dtype == "boolean"
    assert bool(mig["may_set_power_limit"]) and not bool(mig["may_set_compute_mode"])
    assert mig["may_set_ecc"] is pd.NA  # the agent could not tell
    assert not frame.loc[frame["host"] != EVIL_HOST, "may_set_power_limit"].any()

"""The whole analysis on a scene stored through the real ingest path, on both backends."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from sqlalchemy import Engine

from fleet.analysis.dataset import SHARED_REASON, Aliases, Scope, anonymize, load_dataset
from fleet.model.document import AgentDocument
from fleet.report import ReportOptions, build_report, render
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from tests.report.scene import WHEN, hot_hosts, store_scene
from tests.store import factory


def test_each_finding_of_the_scene_is_found_and_nothing_else(engine: Engine) -> None:
    store_scene(engine)
    report = build_report(engine, ReportOptions(), "test")
    assert (report.hosts, report.gpus_measured, report.runs) == (6, 48, 1)

    (mismatch,) = report.mismatches
    assert (mismatch.provider, mismatch.host) == ("gamma", "gamma-01")
    assert mismatch.found == "8 x H100 PCIe 80GB"
    assert any("found H100 PCIe 80GB" in p for p in mismatch.problems)
    (mixed,) = report.mixed
    assert mixed.provider == "gamma" and mixed.listed == "H100 SXM5 80GB"
    assert [v[0] for v in mixed.variants] == ["H100 PCIe 80GB", "H100 SXM5 80GB"]

    drift = {(d.variant, d.attribute): d for d in report.drift}
    assert set(drift) == {("H100 SXM5 80GB", "driver"), ("H100 SXM5 80GB", "power limit"),
                          ("H100 SXM5 80GB", "power limit below datasheet")}
    driver = drift[("H100 SXM5 80GB", "driver")]
    assert driver.usual == "580.159.04" and driver.usual_gpus == 32
    assert [(o.value, o.provider, o.hosts) for o in driver.outliers] == [
        ("535.104.05", "gamma", ("gamma-02",))]
    low = drift[("H100 SXM5 80GB", "power limit below datasheet")]
    assert [(o.value, o.provider, o.gpus) for o in low.outliers] == [("650 W", "beta", 16)]

    gaps = report.gaps
    assert [(g.slower, g.faster, g.within) for g in gaps] == [("beta", "alpha", "variant")]
    # beta is 3% slower than gamma's SXM5 GPUs too, but those are one node: measured and
    # shown, never called a provider gap.
    (one_node,) = [c for c in report.comparisons
                   if (c.slower, c.faster, c.within) == ("beta", "gamma", "variant")]
    assert one_node.single_node and not one_node.systematic and one_node.gap > 0.02
    # Within the listing only pairs that involve gamma's mixed hosts add anything; half
    # PCIe, half SXM5, they spread too widely to call a gap (the mixed listing says why).
    listing = [c for c in report.comparisons if c.within == "listing"]
    assert sorted((c.slower, c.faster) for c in listing) == [("gamma", "alpha"),
                                                             ("gamma", "beta")]
    assert not any(c.systematic for c in listing)
    assert {d.what for d in gaps[0].differences} >= {"power limit", "SM clock under load"}
    # alpha and gamma-02 run the same card at the same settings: not a gap.
    alpha_gamma = [c for c in report.comparisons if {c.faster, c.slower} == {"alpha", "gamma"}
                   and c.within == "variant"]
    assert len(alpha_gamma) == 1 and not alpha_gamma[0].systematic

    (straggler,) = report.stragglers
    assert (straggler.host, straggler.gpu_index) == ("alpha-01", 3)

    cost = {(c.provider, c.variant): c for c in report.cost}
    beta = cost[("beta", "H100 SXM5 80GB")]
    assert beta.price_per_gpu_hour == 2.10 and beta.currency == "USD"
    # beta's 16 GPU results as tests/store/factory.py wrote them (seeded, around 679 TFLOP/s)
    # have a median of 678.9031125487 TFLOP/s (statistics.median of their `tflops`):
    # 2.10 USD / 0.6789031125487 PFLOP/s = 3.0932248817 USD per effective PFLOP-hour.
    assert beta.median_tflops == pytest.approx(678.9031125487, abs=1e-9)
    assert beta.cost_per_pflop_hour is not None
    assert abs(beta.cost_per_pflop_hour - 3.0932248817) < 1e-9
    assert beta.percent_of_peak is not None and 0.68 < beta.percent_of_peak < 0.69
    ranks = [(c.rank, c.provider, c.variant) for c in report.cost]
    assert ranks == [(1, "gamma", "H100 SXM5 80GB"), (2, "beta", "H100 SXM5 80GB"),
                     (3, "gamma", "H100 PCIe 80GB"), (4, "alpha", "H100 SXM5 80GB")]
    assert [b.variant for b in report.buy] == ["H100 PCIe 80GB", "H100 SXM5 80GB"]
    assert report.buy[1].row.provider == "gamma"  # 1.90 USD at alpha's speed

    (failure,) = report.failures
    assert (failure.provider, failure.host, failure.stage) == ("delta", "delta-01", "connect")
    # The scene's agents read no health counters: "not read" is counted, never a finding.
    assert report.counts() == {"mismatch": 2, "gap": 1, "cooling": 0, "drift": 1,
                                "straggler": 1, "regression": 0, "duplicate": 0,
                                "health": 0, "hostlink": 0, "peer": 0, "shortfall": 0,
            "contention": 0, "corruption": 0, "job_shortfall": 0, "network": 0,
            "not_measured": 0, "host_limit": 0, "storage": 0, "bulletin": 0}
    assert [c.not_read for c in report.health.counts] == [16, 16, 16]
    kinds = [f.kind for f in report.dispute]
    assert kinds.count("mismatch") == 2 and kinds.count("gap") == 1
    assert "straggler" in kinds and "drift" in kinds

    # Every result is soaked: the headline says so, and each provider's soak is shown.
    assert report.headline is not None and report.headline.thermal == "soaked"
    thermal = {(t.provider, t.variant): t for t in report.thermal}
    alpha = thermal[("alpha", "H100 SXM5 80GB")]
    assert alpha.gpus == 16 and 69.0 < (alpha.temperature_c or 0) < 71.0
    assert 0.009 < (alpha.drop or 0) < 0.011 and alpha.power_limit_w == 700.0
    assert alpha.first_20s_tflops == pytest.approx(alpha.tflops / (1 - 0.01), rel=0.003)
    # Each GPU's mark in the charts carries its own soak.
    labels = [m.label for chart in report.charts for panel in chart.panels
              for row in panel.rows for m in row.marks if panel.title.startswith("Matmul")]
    assert labels and all("; first 20 s " in label and "°C under load" in label
                          for label in labels)
    # beta's cap differs and gamma's SXM5 cards are one node: compared, never called.
    verdicts = {frozenset((c.hotter.provider, c.cooler.provider)): c.verdict
                for c in report.cooling}
    assert verdicts == {frozenset(("alpha", "beta")): "different power caps",
                        frozenset(("alpha", "gamma")): "too few hosts",
                        frozenset(("beta", "gamma")): "different power caps"}


def test_filters_narrow_what_the_report_rests_on(engine: Engine) -> None:
    store_scene(engine, sweep="nightly")
    later = WHEN + dt.timedelta(days=1)
    store_scene(engine, sweep="adhoc", when=later)
    nightly = build_report(engine, ReportOptions(scope=Scope(sweep="nightly")), "test")
    assert nightly.gpus_measured == 48 and nightly.results == 48
    both = build_report(engine, ReportOptions(), "test")
    assert both.results == 96 and both.runs == 2
    since = build_report(engine, ReportOptions(scope=Scope(since=later)), "test")
    assert since.results == 48 and since.first == later
    until = build_report(engine, ReportOptions(scope=Scope(until=later - dt.timedelta(hours=1))),
                         "test")
    assert until.results == 48 and until.last == WHEN
    beta = build_report(engine, ReportOptions(scope=Scope(providers=("beta",))), "test")
    assert {c.provider for c in beta.cost} == {"beta"} and beta.hosts == 2
    assert beta.comparisons == () and beta.mismatches == ()
    pcie = build_report(engine, ReportOptions(scope=Scope(variants=("H100 PCIe 80GB",))),
                        "test")
    assert {c.variant for c in pcie.cost} == {"H100 PCIe 80GB"}
    assert [m.host for m in pcie.mismatches] == ["gamma-01"] and pcie.stragglers == ()


def test_anonymized_report_names_no_provider_or_host(engine: Engine) -> None:
    store_scene(engine)
    report = build_report(engine, ReportOptions(anonymize=True), "sqlite:///secret/path.db")
    assert report.providers == ("Provider A", "Provider B", "Provider C", "Provider D")
    assert report.store == "(hidden in an anonymized report)"
    (mismatch,) = report.mismatches  # gamma-01, one of gamma's two hosts
    letter = mismatch.provider.removeprefix("Provider ")
    assert letter in "ABCD" and mismatch.host in (f"{letter}-1", f"{letter}-2")
    assert report.failures[0].message == "(hidden in an anonymized report)"
    assert report.counts() == {"mismatch": 2, "gap": 1, "cooling": 0, "drift": 1,
                                "straggler": 1, "regression": 0, "duplicate": 0,
                                "health": 0, "hostlink": 0, "peer": 0, "shortfall": 0,
            "contention": 0, "corruption": 0, "job_shortfall": 0, "network": 0,
            "not_measured": 0, "host_limit": 0, "storage": 0, "bulletin": 0}


def test_an_empty_store_gives_an_empty_report(engine: Engine) -> None:
    report = build_report(engine, ReportOptions(), "test")
    assert (report.hosts, report.gpus_measured, report.comparisons, report.buy) == (
        0, 0, (), ())
    assert report.counts() == {"mismatch": 0, "gap": 0, "cooling": 0, "drift": 0,
                               "straggler": 0, "regression": 0, "duplicate": 0, "health": 0,
                               "hostlink": 0, "peer": 0, "shortfall": 0,
            "contention": 0, "corruption": 0, "job_shortfall": 0, "network": 0,
            "not_measured": 0, "host_limit": 0, "storage": 0, "bulletin": 0}
    assert (report.thermal, report.cooling) == ((), ())


def test_an_anonymized_reports_settings_name_no_provider(engine: Engine) -> None:
    store_scene(engine)
    scope = Scope(providers=("beta", "gamma"))
    report = build_report(engine, ReportOptions(scope=scope, anonymize=True), "test")
    text = render(report, "json")
    settings = json.loads(text)["settings"]["scope"]
    assert settings["providers"] == ["Provider A", "Provider B"]
    assert "beta" not in text and "gamma" not in text


def _extra() -> list[tuple[str, str, dict[str, Any], Listing]]:
    """Two providers whose listings name only a GPU count (one PCIe, one SXM5), and a
    cheaper SXM5 offer priced in another currency."""
    count_only = {"gpu_count": 8}
    return [
        ("p1", "p1-01", {"gpu_tflops": [700.0 + i for i in range(8)]},
         Listing(count_only, 2.0, "USD", ())),
        ("p1", "p1-02", {"gpu_tflops": [700.5 + i for i in range(8)]},
         Listing(count_only, 2.0, "USD", ())),
        ("p2", "p2-01", {"gpu_tflops": [560.0 + i for i in range(8)],
                         "variant": "H100 PCIe 80GB"}, Listing(count_only, 2.0, "USD", ())),
        ("p2", "p2-02", {"gpu_tflops": [700.0 + i for i in range(8)]},
         Listing(count_only, 2.0, "USD", ())),
        ("eps", "eps-01", {"gpu_tflops": [700.0 + i / 3 for i in range(8)]},
         Listing({"variant": "H100 SXM5 80GB"}, 1.5, "GBP", ())),
    ]


def test_listings_that_name_no_hardware_are_not_one_offer(engine: Engine) -> None:
    store_scene(engine, extra=_extra())
    report = build_report(engine, ReportOptions(), "test")
    assert {c.group for c in report.comparisons if c.within == "listing"} == {
        "H100 SXM5 80GB"}
    assert [m.provider for m in report.mixed] == ["gamma"]


def test_what_to_buy_compares_prices_within_one_currency(engine: Engine) -> None:
    store_scene(engine, extra=_extra())
    report = build_report(engine, ReportOptions(), "test")
    sxm = [o for o in report.buy if o.variant == "H100 SXM5 80GB"]
    assert {(o.row.provider, o.row.currency) for o in sxm} == {("eps", "GBP"),
                                                               ("gamma", "USD")}
    assert all("not converted" in o.why for o in sxm)
    (gamma,) = [o for o in sxm if o.row.provider == "gamma"]
    assert "delivered other hardware than listed under H100 SXM5 80GB" in gamma.why


def test_aliases_are_dealt_at_random_not_in_the_names_order() -> None:
    """In sorted order, "Provider A" would be whichever compared provider sorts first."""
    providers = ("aws", "coreweave", "gcp", "lambda")
    hosts = ("gpu-01", "gpu-02", "gpu-03")
    dealt = [Aliases.of({(p, h) for p in providers for h in hosts}) for _ in range(20)]
    for names in dealt:
        assert sorted(names.providers.values()) == [f"Provider {x}" for x in "ABCD"]
        for provider in providers:
            letter = names.provider(provider).removeprefix("Provider ")
            assert sorted(names.host(provider, h) for h in hosts) == [
                f"{letter}-{i}" for i in (1, 2, 3)]
    # 24 ways to letter four providers and 6 to number three hosts: twenty reports that
    # all agree would mean the names' order decides.
    assert len({tuple(names.provider(p) for p in providers) for names in dealt}) > 1
    assert len({tuple(names.host("aws", h) for h in hosts) for names in dealt}) > 1


def test_an_anonymized_reports_rows_follow_the_aliases_not_the_names(engine: Engine) -> None:
    """Hosts listed in their real names' order would let a reader who knows those names
    undo the dealing (every finding and table walks the data in its order)."""
    store_scene(engine)
    data = load_dataset(engine, Scope())
    assert len(data.hosts) >= 6 and data.failures
    for _ in range(10):  # four providers: a sorted dealing is 1 in 24 each time
        hidden = anonymize(data)
        for rows in (hidden.hosts, hidden.failures, hidden.measures):
            keys = [(row.provider, row.host) for row in rows]
            assert keys == sorted(keys)



def test_hosts_that_cool_worse_are_a_cooling_finding_with_its_evidence(engine: Engine) -> None:
    store_scene(engine, extra=hot_hosts())
    report = build_report(engine, ReportOptions(), "test")
    (cooling,) = report.cooling_findings
    assert (cooling.hotter.provider, cooling.cooler.provider) == ("zeta", "alpha")
    assert 9.0 < cooling.temperature_difference_c < 11.0
    assert 0.010 < cooling.drop_difference < 0.014
    assert report.counts()["cooling"] == 1
    # Cooling evidence, not a provider gap: zeta is 1.2% below alpha soaked.
    assert not any({c.slower, c.faster} == {"alpha", "zeta"} and c.systematic
                   for c in report.comparisons)
    (finding,) = [f for f in report.dispute if f.kind == "cooling"]
    assert finding.provider == "zeta"
    assert "hotter than alpha's and lose" in finding.title
    # Each side's figures a line beneath it; the differences and their tests the evidence.
    hotter, cooler = finding.details
    assert hotter.startswith("zeta: 16 GPUs on 2 hosts") and hotter.endswith("700 W cap")
    assert cooler.startswith("alpha: 16 GPUs on 2 hosts") and cooler.endswith("700 W cap")
    assert "at the same power cap: hotter by " in finding.evidence
    # What differs between them, as a gap (called or not) lists it.
    (pair,) = [c for c in report.comparisons if c.within == "variant"
               and {c.slower, c.faster} == {"alpha", "zeta"}]
    differs = {d.what: (d.slower, d.faster) for d in pair.differences}
    assert differs["temperature under load"][0].endswith("°C")
    assert "drop from the first 20 s to soaked" in differs


def _stacks(engine: Engine) -> None:
    """alpha on the scene's stack, omega's two hosts on a newer one, 3% slower."""
    store_scene(engine, extra=[
        ("omega", f"omega-0{i}", {"gpu_tflops": [679.0 + j / 4 for j in range(8)],
                                  "stack": factory.NEW_STACK},
         Listing({"variant": "H100 SXM5 80GB"}, 2.0, "USD", ())) for i in (1, 2)])


def test_results_of_different_stacks_are_compared_apart_unless_asked(engine: Engine) -> None:
    _stacks(engine)
    apart = build_report(engine, ReportOptions(), "test")
    stacks = {c.config.stack for c in apart.comparisons}
    assert "torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2" not in stacks  # omega alone there
    assert not any("omega" in (c.slower, c.faster) for c in apart.comparisons)
    (drift,) = [d for d in apart.drift if d.attribute == "software stack"]
    assert drift.usual == "torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4"
    assert [(o.value, o.provider, o.gpus) for o in drift.outliers] == [
        ("torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2", "omega", 16)]

    across = build_report(engine, ReportOptions(across_stacks=True), "test")
    assert "software stacks compared as one" in across.scope
    (omega,) = [c for c in across.comparisons if c.within == "variant"
                and (c.slower, c.faster) == ("omega", "alpha")]
    assert omega.config.stack == "any software stack"
    differs = {d.what: (d.slower, d.faster) for d in omega.differences}
    assert differs["software stack"] == ("torch 2.13.0+cu130, CUDA 13.0, cuBLAS 13.0.2",
                                         "torch 2.9.0, CUDA 12.8, cuBLAS 12.8.4")


def test_two_hosts_with_the_same_gpus_are_a_finding_and_out_of_the_statistics(
        engine: Engine) -> None:
    """One machine under two inventory names in one probe: both stored, the pair is a
    duplicate finding naming the shared UUIDs, and neither host's results of that run
    count in any measure (so in no gap, cost or chart); a third host of the run still
    does. By hand, one card under two names is no finding (a card moved between hosts)."""
    store_scene(engine)
    before = build_report(engine, ReportOptions(), "test")
    node = factory.document(host="eps-node", gpus=2, collected_at=WHEN, harness="1.3.0")
    alone = factory.document(host="eps-other", gpus=2, collected_at=WHEN, harness="1.3.0")
    with Ingest(engine, RunInfo(kind="probe")) as ingest:
        for name, data in (("eps-a", node), ("eps-b", node), ("eps-c", alone)):
            ingest.store(AgentDocument.model_validate(data), Origin("epsilon", name))
    moved = factory.document(host="moved", gpus=1, collected_at=WHEN, harness="1.3.0")
    with Ingest(engine) as ingest:  # hand ingest: one card's history on two hosts
        ingest.store(AgentDocument.model_validate(moved), Origin("zeta", "z-1"))
        moved["collected_at"] = (WHEN + dt.timedelta(hours=1)).isoformat()
        ingest.store(AgentDocument.model_validate(moved), Origin("zeta", "z-2"))

    report = build_report(engine, ReportOptions(), "test")
    (pair,) = report.shared
    uuids = tuple(sorted(f"uuid:{factory.gpu_uuid('eps-node', i)}" for i in range(2)))
    assert (pair.provider, pair.host, pair.other_host, pair.gpus) == (
        "epsilon", "eps-a", "eps-b", uuids)
    assert report.counts()["duplicate"] == 1
    (finding,) = [f for f in report.dispute if f.kind == "duplicate"]
    assert finding.title == "eps-a has the same GPUs as eps-b"
    assert finding.cause == "one machine listed twice"
    assert finding.details == uuids  # a line each, folded beneath the finding
    assert "remove the other from the inventory" in finding.evidence
    measured = {(m.provider, m.host) for m in load_dataset(engine, Scope()).measures}
    assert ("epsilon", "eps-c") in measured
    assert not measured & {("epsilon", "eps-a"), ("epsilon", "eps-b")}
    assert {(e.host, e.gpu_index, e.reason) for e in report.excluded
            if e.provider == "epsilon"} == {(h, i, SHARED_REASON)
                                            for h in ("eps-a", "eps-b") for i in range(2)}
    assert report.gpus_measured == before.gpus_measured + 2 + 1  # eps-c's two, zeta's one
    html = render(report, "html")
    assert "eps-a has the same GPUs as eps-b" in html and uuids[1] in html

    hidden = build_report(engine, ReportOptions(anonymize=True), "test")
    (pair,) = hidden.shared
    assert pair.gpus == () and pair.gpu_count == 2
    for fmt in ("html", "md", "json"):
        text = render(hidden, fmt)
        assert "eps-" not in text and "epsilon" not in text
        assert not any(uuid.removeprefix("uuid:") in text for uuid in uuids)
    assert "duplicate" in render(hidden, "json")

    # The search honours the report's scope: a time window (which reads the documents'
    # times) and providers (the fingerprints' own hosts).
    hour = dt.timedelta(hours=1)
    for scope, found in ((Scope(since=WHEN - hour, until=WHEN + hour), 1),
                         (Scope(since=WHEN + hour), 0), (Scope(until=WHEN - hour), 0),
                         (Scope(providers=("epsilon",)), 1), (Scope(providers=("alpha",)), 0)):
        assert len(load_dataset(engine, scope).shared) == found, scope

"""Each offer's verdict (fleet/report/offers.py): read from the findings the report lists,
each placed with the offers it is about, worst side first, and said with one reason."""

from __future__ import annotations

import dataclasses

from sqlalchemy import Engine

from fleet.findings.finding import Finding
from fleet.report import ReportOptions, build_report, render
from fleet.report.offers import OfferInput, offer_lines, placed
from tests.report.real_scene import store_real
from tests.report.scene import store_scene


def test_the_scenes_offers_each_get_the_verdict_of_their_findings(engine: Engine) -> None:
    store_scene(engine)
    report = build_report(engine, ReportOptions(), "test")
    verdicts = {(o.provider, o.variant): (o.verdict, o.reason) for o in report.offers}
    # alpha's straggler, beta's gap (and its power limit), gamma's mismatches: each the
    # provider's, each offer disputed with its first finding as the reason.
    assert set(verdicts) == {("alpha", "H100 SXM5 80GB"), ("beta", "H100 SXM5 80GB"),
                             ("gamma", "H100 PCIe 80GB"), ("gamma", "H100 SXM5 80GB")}
    assert {v for v, _ in verdicts.values()} == {"dispute"}
    assert verdicts[("alpha", "H100 SXM5 80GB")][1] == (
        "straggler: alpha-01 GPU 3: 10% below the rest of its node on the matmul")
    assert verdicts[("beta", "H100 SXM5 80GB")][1].startswith("gap: beta is 3.")
    # gamma-01 is PCIe cards listed as SXM5: that offer's reason is its own host's.
    assert verdicts[("gamma", "H100 PCIe 80GB")][1].startswith("mismatch: gamma-01: listed")
    # Every finding the report lists is about an offer of its provider.
    for side, finding in report.listed():
        assert any(f.title == finding.title and f.side == side
                   for o in report.offers if o.provider == finding.provider
                   for f in o.findings), finding.title
    # By variant, the worst verdict first, then the cheapest.
    assert [o.variant for o in report.offers] == sorted(o.variant for o in report.offers)


def test_a_clean_offer_is_bought_or_has_no_price_and_an_unsettled_one_is_not_settled(
        engine: Engine) -> None:
    store_scene(engine)
    report = build_report(engine, ReportOptions(), "test")
    given = OfferInput(report.found, [], report.mismatches, report.cost, report.job.rows)
    clean = offer_lines(given, [])
    by = {(o.provider, o.variant): o for o in clean}
    alpha, beta = by[("alpha", "H100 SXM5 80GB")], by[("beta", "H100 SXM5 80GB")]
    gamma = by[("gamma", "H100 SXM5 80GB")]
    assert alpha.verdict == beta.verdict == gamma.verdict == "buy"
    # gamma's cheap hours on its SXM5 node buy the cheapest PFLOP-hour, then beta's (its
    # 3% slower GPUs notwithstanding), then alpha's.
    assert gamma.reason.startswith("nothing to dispute or fix; ")
    assert gamma.reason.endswith("the cheapest of 3 clean offers of its variant")
    assert beta.reason.endswith("2nd cheapest of 3 clean offers of its variant")
    assert alpha.reason.endswith("3rd cheapest of 3 clean offers of its variant")
    doubt = Finding("shortfall", "alpha", "alpha-02: GPU 1 matmul 650.0 TFLOP/s", "evidence")
    fix = Finding("contention", "gamma", "gamma-02: GPU 0 matmul measured beside other work",
                  "evidence")
    judged = {(o.provider, o.variant): o for o in offer_lines(
        given, [("renter", fix), ("unsettled", doubt)])}
    assert judged[("alpha", "H100 SXM5 80GB")].verdict == "not settled"
    assert judged[("alpha", "H100 SXM5 80GB")].reason == f"shortfall: {doubt.title}"
    assert judged[("gamma", "H100 SXM5 80GB")].verdict == "yours to fix"
    # gamma-02's finding is its SXM5 offer's, not its PCIe one's.
    assert judged[("gamma", "H100 PCIe 80GB")].verdict == "buy"
    # The clean offer ranks among the clean ones, and says a cheaper one has findings.
    assert judged[("beta", "H100 SXM5 80GB")].reason.endswith(
        "the only clean offer of its variant; 1 cheaper offer has findings against it")
    unpriced = dataclasses.replace(given, cost=[dataclasses.replace(
        row, price_per_gpu_hour=None, currency=None) for row in report.cost])
    assert {o.verdict for o in offer_lines(unpriced, [])} == {"no price to compare"}
    # Nothing against an offer never measured is no reason to buy it.
    fingerprinted = dataclasses.replace(given, cost=[], jobs=[])
    assert {(o.verdict, o.reason.split(":")[0]) for o in offer_lines(fingerprinted, [])} == {
        ("not settled", "nothing measured")}


def test_a_finding_is_placed_by_the_host_it_names_first() -> None:
    offers = [("p", "A"), ("p", "B"), ("q", "A")]
    hosts = {("p", "gpu-1"): {"A"}, ("p", "gpu-10"): {"B"}, ("q", "gpu-1"): {"A"}}
    found = placed([("provider", Finding("peer", "p", "gpu-10: pairs 5% slow", "e")),
                    ("provider", Finding("gap", "p", "p is 3.0% slower than q on A", "e")),
                    ("renter", Finding("mismatch", "p", "listing X: 2 variants", "e"))],
                   offers, hosts)
    assert [f.kind for _, f in found[("p", "B")]] == ["peer", "mismatch"]
    assert [f.kind for _, f in found[("p", "A")]] == ["gap", "mismatch"]
    assert ("q", "A") not in found


def test_a_variant_named_inside_a_longer_ones_name_is_not_named() -> None:
    whole, mig = "H100 SXM5 80GB", "H100 SXM5 80GB MIG 1g.10gb"
    offers = [("p", whole), ("p", mig)]
    found = placed([("provider", Finding("gap", "p", f"p is 4% slower than q on {mig}", "e")),
                    ("provider", Finding("gap", "p", f"p is 2% slower than q on {whole}", "e"))],
                   offers, {})
    assert [f.title for _, f in found[("p", mig)]] == [f"p is 4% slower than q on {mig}"]
    assert [f.title for _, f in found[("p", whole)]] == [f"p is 2% slower than q on {whole}"]


def test_offers_are_compared_at_one_configuration_each(engine: Engine) -> None:
    """The lent nodes' real documents: lambda's H100s ran job suite 1.1 on 4 GPUs at once,
    runpod's suite 1.0 on 2 (13.8% apart between suites alone): runpod's training figure
    is said with what it was measured at, not ranked beside lambda's."""
    store_real(engine)
    report = build_report(engine, ReportOptions(), "test")
    h100 = {o.provider: o for o in report.offers if o.variant.startswith("H100")}
    lam, run = h100["lambda"], h100["runpod"]
    assert lam.train_tokens is not None and lam.at("train").startswith("cudnn, suite 1.1, ")
    assert run.train_tokens is None and run.train_cost is None
    assert run.at("train").startswith("not comparable: measured at flash, suite 1.0, 2 GPUs")
    # Nothing of runpod's training enters lambda's ranking (it once said "1 cheaper offer
    # has findings against it", runpod's suite-1.0 figure priced beside it).
    assert lam.reason.endswith("per million training tokens, the only clean offer of its "
                               "variant")
    page = render(report, "html")
    assert "not comparable: measured at flash, suite 1.0" in page
    for o in report.offers:
        if o.tflops is not None:
            assert o.at("matmul").startswith("harness ")

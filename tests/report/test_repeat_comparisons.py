"""The comparisons that take one result per host weigh the cards' repeat intervals
(issue #31): stragglers, provider gaps with one host a side, regressions. Expected margins
are worked by hand beside each test; bench/false_flags.py's rates on a few draws."""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import select

from agent.timing.repeat import variant_spread
from fleet.analysis.compare import GapOptions
from fleet.analysis.dataset import GpuMeasure
from fleet.analysis.matmul.gaps import compare_providers
from fleet.analysis.matmul.stragglers import find_stragglers
from fleet.analysis.sweep.history import GpuState, HostNight, Night, compare_night
from fleet.analysis.sweep.nights import read_nights
from fleet.model.document import AgentDocument
from fleet.store.database import open_engine, resolve
from fleet.store.ingest import Ingest, Listing, Origin, RunInfo
from fleet.store.models import BenchmarkResult
from fleet.store.sweeps import create_run, finish_run
from tests.bench import scripts
from tests.report.synthetic import SOAKED, dataset, measure
from tests.store import factory
from tests.store.conftest import migrated_sqlite

ROOT = Path(__file__).resolve().parents[2]
H100 = "H100-SXM5-80GB"  # agent/timing/repeat.py's spread: 9 dof, so 13 with five nights
SIBLINGS = [699.0, 700.0, 701.0, 700.0, 699.5, 700.5, 700.0]  # median 700.0


def soaked(provider: str, host: str, index: int, tflops: float, sd: float | None,
           results: int = 1) -> GpuMeasure:
    return dataclasses.replace(measure(provider, host, index, tflops, config=SOAKED),
                               repeat_sd=sd, results=results)


def node(slow_sd: float | None, sibling_sd: float = 0.003) -> list[GpuMeasure]:
    """Seven GPUs at a median of 700.0 and GPU 7 at 675.5, 3.5% below them."""
    return ([soaked("p", "n-00", i, v, sibling_sd) for i, v in enumerate(SIBLINGS)]
            + [soaked("p", "n-00", 7, 675.5, slow_sd)])


def test_a_straggler_beyond_both_figures_repeat_runs_is_flagged() -> None:
    # The old rule holds: 24.5 below 700 is 3.5% (>= 3%) and > 4 x max(1.4826 x MAD 0.5,
    # 0.25% x 700 = 1.75) = 7.0. The margin, sds 0.3% all: 1.959964 x sqrt((675.5 x
    # 0.003)^2 / 1 + (pi/2) x (700 x 0.003)^2 / 7) = 1.959964 x sqrt(4.10670 + 0.98960)
    # = 4.4246 TFLOP/s, 0.63% of 700: 24.5 is beyond it.
    (straggler,) = find_stragglers(dataset(node(0.003)))
    assert straggler.gpu_index == 7
    assert straggler.repeat.margin == pytest.approx(4.4246, abs=1e-4)
    assert (straggler.repeat.gpu_sd, straggler.repeat.node_sd) == (0.003, 0.003)
    assert straggler.repeat.node_results == 7
    assert "beyond its repeat interval of ±0.6%" in straggler.evidence
    assert "run-to-run sds of 0.30% for the GPU and 0.30% for the others" in straggler.evidence


def test_a_card_that_wanders_is_not_a_straggler_within_its_repeat_interval() -> None:
    # GPU 7 states a run-to-run sd of 2%: 1.959964 x sqrt((675.5 x 0.02)^2 + 0.98960) =
    # 1.959964 x sqrt(182.5201 + 0.98960) = 26.551 TFLOP/s, more than its 24.5 shortfall.
    assert find_stragglers(dataset(node(0.02))) == []
    # Its sd measured over four results: 182.5201 / 4 + 0.98960 = 46.6196, margin 13.382.
    four = node(0.02)
    four[7] = dataclasses.replace(four[7], results=4)
    (straggler,) = find_stragglers(dataset(four))
    assert straggler.repeat.margin == pytest.approx(13.382, abs=1e-3)


def test_a_gpu_without_a_stated_sd_takes_its_variants_spread() -> None:
    spread = variant_spread(H100)[0].sd  # measured, and revised as more cards are
    unstated = [dataclasses.replace(g, repeat_sd=None, variant=H100) for g in node(None)]
    stated = [dataclasses.replace(g, repeat_sd=spread) for g in unstated]
    (straggler,) = find_stragglers(dataset(unstated))
    assert straggler.repeat.gpu_sd == straggler.repeat.node_sd == spread
    assert straggler.repeat == find_stragglers(dataset(stated))[0].repeat


FASTER = [699.0, 699.5, 699.8, 700.0, 700.0, 700.2, 700.5, 701.0]  # median 700.0
SLOWER = [v - 17.5 for v in FASTER]  # median 682.5: 2.5% below


def one_host_a_side(slow_sd: float, results: int = 1) -> list[GpuMeasure]:
    return ([soaked("a", "a-00", i, v, 0.003) for i, v in enumerate(FASTER)]
            + [soaked("b", "b-00", i, v, slow_sd, results) for i, v in enumerate(SLOWER)])


def test_a_gap_of_one_host_a_side_is_called_beyond_the_hosts_repeat_runs() -> None:
    # The GPU-level rule holds (8 GPUs a side apart: rank p = 2 / C(16, 8) = 1.6e-4).
    # The margin, 0.3% a host, one run each: 1.959964 x sqrt((700 x 0.003)^2 + (682.5 x
    # 0.003)^2) / 700 = 1.959964 x 2.93296 / 700 = 0.821%: the 2.5% gap is beyond it.
    (gap,) = compare_providers(dataset(one_host_a_side(0.003)), GapOptions(min_hosts=1))
    assert gap.single_node and gap.host_p_adjusted is None
    assert gap.gap == pytest.approx(0.025)
    assert gap.repeat_margin == pytest.approx(0.008212, abs=1e-6)
    assert gap.systematic
    assert "repeat runs of the two hosts could make a gap of ±0.8%, and this one is beyond" \
        in gap.evidence
    # The default still wants two hosts a side before it calls a provider's gap.
    (shown,) = compare_providers(dataset(one_host_a_side(0.003)))
    assert not shown.systematic and shown.repeat_margin == gap.repeat_margin


def test_a_gap_within_a_wandering_hosts_repeat_runs_is_not_called() -> None:
    # b's GPUs state 2%; its eight GPUs share one run, so still n = 1: 1.959964 x
    # sqrt(2.1^2 + 13.65^2) / 700 = 1.959964 x 13.8106 / 700 = 3.867% > 2.5%.
    (gap,) = compare_providers(dataset(one_host_a_side(0.02)), GapOptions(min_hosts=1))
    assert gap.repeat_margin == pytest.approx(0.038669, abs=1e-6)
    assert not gap.systematic and "this one is within it" in gap.evidence
    # Four results a GPU (four runs of the host): 13.65 / 2 = 6.825, sqrt(2.1^2 +
    # 6.825^2) = 7.14077, x 1.959964 / 700 = 1.999%: called.
    (four,) = compare_providers(dataset(one_host_a_side(0.02, results=4)),
                                GapOptions(min_hosts=1))
    assert four.repeat_margin == pytest.approx(0.019994, abs=1e-6)
    assert four.systematic


def test_two_hosts_a_side_keep_the_host_test_alone() -> None:
    gpus = one_host_a_side(0.02) + [dataclasses.replace(g, host=g.host[:2] + "01")
                                    for g in one_host_a_side(0.02)]
    (gap,) = compare_providers(dataset(gpus))
    assert gap.repeat_margin is None and "repeat runs" not in gap.evidence


LABEL = "bf16 8192x8192x8192 sustained soaked cold-L2 concurrent harness 1.4.0"
START = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC)
PAST = [700.0, 700.5, 699.5, 700.2, 699.8]  # median 700.0, 1.4826 x MAD 0.2 = 0.2965


def nights(past_sd: float | None, tonight_sd: float | None, tonight: float = 675.5
           ) -> list[Night]:
    found = []
    for i, (value, sd) in enumerate([(v, past_sd) for v in PAST] + [(tonight, tonight_sd)]):
        gpu = GpuState(0, "GPU-0", H100, {}, {LABEL: value},
                       repeat_sd={} if sd is None else {LABEL: sd})
        found.append(Night(i + 1, START + dt.timedelta(days=i),
                           {"p/a": HostNight("p", "a", "stored", (gpu,))}))
    return found


def test_a_regression_beyond_the_nights_repeat_runs() -> None:
    # dof 9 + 5 - 1 = 13, t975 2.160; 2.160 x sqrt((pi/2) x 0.003^2 / 5 + 0.003^2) =
    # 0.7428%: the threshold stays 700 - max(4 x 0.2965, 3% x 700 = 21, 5.20) = 679.0,
    # and 675.5 (3.5% down) is under it.
    (regression,) = compare_night(nights(0.003, 0.003)).regressions
    assert regression.repeat_margin == pytest.approx(0.0074285, abs=1e-7)
    assert regression.threshold == pytest.approx(679.0)
    assert "repeat margin 0.7%" in regression.describe()


def test_a_drop_within_tonights_repeat_interval_is_no_regression() -> None:
    # Tonight states 2%: 2.160 x sqrt((pi/2) x 0.003^2 / 5 + 0.02^2) = 4.3352%, threshold
    # 700 x (1 - 0.043352) = 669.65; 675.5 is above it. 665.0 (5% down) is not.
    assert compare_night(nights(0.003, 0.02)).regressions == ()
    (regression,) = compare_night(nights(0.003, 0.02, tonight=665.0)).regressions
    assert regression.threshold == pytest.approx(669.653, abs=1e-3)


def test_nights_without_a_stated_sd_take_the_variants_spread() -> None:
    spread = variant_spread(H100)[0].sd
    (regression,) = compare_night(nights(None, None)).regressions
    (stated,) = compare_night(nights(spread, spread)).regressions
    assert regression.repeat_margin == stated.repeat_margin < 0.03
    assert regression.threshold == pytest.approx(679.0)


def test_nights_carry_each_labels_median_repeat_sd_from_the_store(tmp_path: Path) -> None:
    engine = open_engine(resolve(migrated_sqlite(tmp_path / "fleet.db")))
    try:
        for day, harness in enumerate(("1", "1.3.0", "1.3.0"), start=1):
            run_id = create_run(engine, RunInfo(kind="sweep", sweep="n", inventory="i.yaml"))
            document = factory.document(host="b", gpus=2, seed=day, harness=harness,
                                        results_per_gpu=3,
                                        collected_at=START + dt.timedelta(days=day))
            with Ingest(engine, RunInfo(kind="sweep", sweep="n", run_id=run_id)) as ingest:
                ingest.store(AgentDocument.model_validate(document),
                             Origin("coreweave", "b", Listing()))
            finish_run(engine, run_id)
        with engine.connect() as conn:
            stored: dict[tuple[int, int], list[float]] = {}
            for run, index, sd in conn.execute(select(
                    BenchmarkResult.probe_run_id, BenchmarkResult.gpu_index,
                    BenchmarkResult.repeat_sd)):
                if sd is not None:
                    stored.setdefault((run, index), []).append(sd)
        cool, *soaked_nights = read_nights(engine, "n")
    finally:
        engine.dispose()
    # A cool-start night states none; a soaked one the median of its three results' sds.
    assert all(gpu.repeat_sd == {} for gpu in cool.hosts["coreweave/b"].gpus)
    for night in soaked_nights:
        for gpu in night.hosts["coreweave/b"].gpus:
            (label,) = gpu.tflops
            assert gpu.repeat_sd == {
                label: statistics.median(stored[(night.run_id, gpu.index)])}


def _bench() -> ModuleType:
    return scripts.load("false_flags")


def test_false_flags_bench_keeps_the_new_rule_at_or_below_the_old_and_finds_stragglers(
        ) -> None:
    bench = _bench()
    rows = bench.measure(trials=100, seed=31)
    assert {(r.case, r.wander) for r in rows} >= {("straggler", "H100 SXM5"),
                                                 ("gap, 1 host a side", "H100, 2 points"),
                                                 ("regression", "H200 SXM")}
    for r in rows:
        old_false, new_false, old_found, new_found = r.rates()
        assert new_false <= old_false and new_found <= old_found, r
    steady = [r for r in rows if r.case == "straggler" and r.stated_sd < 0.01]
    assert len(steady) == 2 and all(r.rates()[3] > 0.9 for r in steady)
    assert len(bench.table(rows).splitlines()[2]) <= 80


def test_the_report_states_the_repeat_margin_of_a_one_host_a_side_gap(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from fleet.cli import main

    url = migrated_sqlite(tmp_path / "fleet.db")
    engine = open_engine(resolve(url))
    try:
        # One 8-GPU soaked host a provider, 2.5% apart. Each result's sd is the widest
        # measured spread (the factory's "H100 SXM5 80GB" is no catalog label): 0.571%,
        # one result a host, so the margin is 1.96 x hypot(680 x 0.571%, 663 x 0.571%)
        # / 680 = 1.56% of the faster median.
        for provider, level in (("fast", 680.0), ("slow", 663.0)):
            data = factory.document(host=f"{provider}-1", gpus=8, harness="1.3.0",
                                    gpu_tflops=[level] * 8)
            with Ingest(engine) as ingest:
                ingest.store(AgentDocument.model_validate(data), Origin(provider, f"{provider}-1"))
    finally:
        engine.dispose()
    done = CliRunner().invoke(main, ["report", "--format", "md", "-o", "-", "--db", url])
    assert done.exit_code == 0, done.output
    [row] = [line for line in done.output.splitlines() if "| slow (" in line]
    margin = 1.96 * ((680 * 0.00571) ** 2 + (663 * 0.00571) ** 2) ** 0.5 / 680
    # Shown, never called: one node a side is no provider's evidence, whatever its size.
    assert "one node: not a provider's evidence" in row
    assert f"(repeat runs could make ±{margin:.1%})" in row
    data = json.loads(CliRunner().invoke(
        main, ["report", "--format", "json", "-o", "-", "--db", url]).stdout)
    [gap] = [c for c in data["comparisons"] if c["slower"] == "slow"]
    assert gap["repeat_margin"] == pytest.approx(margin, rel=2e-3)

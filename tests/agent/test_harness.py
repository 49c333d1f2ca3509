"""The harness's code path on the CPU (small sizes), and clock locking against recordings.

The real figures come from the GPU (bench/harness_fidelity.py, bench/RESULTS.md); here
the protocol's logic must hold: the gate catches a wrong product, results carry their
statistics, flags and provenance, and locking restores the clock and records refusals.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import torch  # CI installs the CPU build: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch", reason="the harness tests need torch: "
                                "pip install torch==2.13.0 (a CPU build)")

from agent.matmul import harness
from agent.source.nvml import ReplayNvml
from fleet.model.document import parse_document
from tests.conftest import ROOT


def small(**overrides: Any) -> harness.Config:
    """The quick protocol at a small size (its warm-up and measurement logic); `soaked()`
    gives the soaked one."""
    base: dict[str, Any] = dict(m=96, n=80, k=64, device="cpu", measure_s=0.2, window_s=0.05,
                                max_warmup_s=0.3, max_total_s=0.8, flush_bytes=1 << 20,
                                protocol="quick")
    base.update(overrides)
    return harness.Config(**base)


def soaked(**overrides: Any) -> harness.Config:
    """The soaked protocol with its clock shrunk a hundredfold: 0.02-s windows judged over a
    0.3-s span, a 1.8-s cap, 0.2 s of cool-start level and 0.2 s of measurement."""
    base: dict[str, Any] = dict(protocol="soaked", soak_window_s=0.02, soak_span_s=0.3,
                                soak_cap_s=1.8, soak_first_s=0.2, measure_s=0.2)
    base.update(overrides)
    return small(**base)


def cpu_target(nvml: Any = None) -> harness.GpuTarget:
    target = harness.GpuTarget(0, 0 if nvml else None, None)
    if nvml is not None:
        target.nvml, target.handle = nvml, nvml.device(0)
    return target


def measure(cfg: harness.Config, target: harness.GpuTarget) -> dict[str, Any]:
    coordinator = harness.SoakCoordinator(1) if cfg.soaked else harness.Coordinator(1)
    return harness.measure(torch, cfg, target, coordinator, 1, lambda m: None)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "tf32", "fp32"])
def test_each_dtype_passes_the_gate_and_reports_consistent_statistics(dtype: str) -> None:
    result = measure(small(dtype=dtype), cpu_target())
    s = result["stats"]
    assert result["correctness"]["passed"], result["correctness"]
    assert result["correctness"]["max_rel_error"] < harness.TOLERANCE[dtype]
    assert s["runs"] == len(result["samples_ms"]) > 0
    assert s["min_ms"] <= s["ci95_low_ms"] <= s["median_ms"] <= s["ci95_high_ms"] <= s["max_ms"]
    # Since 1.4 the headline is the work over the time: every run's FLOP over their
    # summed time, and says so.
    assert result["statistic"] == "mean" and result["harness_version"] == "1.4.0"
    assert result["thermal"] == "cool-start" and result["soak"] is None
    work = 2 * 96 * 80 * 64 * len(result["samples_ms"])
    assert result["tflops"] == pytest.approx(
        work / (math.fsum(result["samples_ms"]) * 1e-3) / 1e12, rel=1e-5)
    assert result["dtype"] == dtype and result["cache"] == "cold"
    assert result["provenance"]["flush_bytes"] == 1 << 20
    assert "torch.float32_matmul_precision" in result["provenance"]["env"]


def test_tf32_and_fp32_set_different_precision() -> None:
    fp32 = measure(small(dtype="fp32"), cpu_target())["provenance"]["env"]
    assert fp32["torch.float32_matmul_precision"] == "highest"
    harness._configure_precision(torch, "tf32")
    try:
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        harness._configure_precision(torch, "fp32")


class WrongProduct:
    """torch, except that matmul leaves a third of the output unwritten."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def matmul(a: Any, b: Any, out: Any) -> Any:
        torch.matmul(a, b, out=out)
        out[: out.shape[0] // 3].zero_()
        return out


def test_the_correctness_gate_fails_a_wrong_product() -> None:
    runner = harness.Runner(WrongProduct(), small(), cpu_target())
    err, rows = runner.check()
    assert rows == 64
    assert err > 0.1


def test_warm_cache_and_burst_modes_are_labelled() -> None:
    result = measure(small(warm_l2=True, mode="burst", pause_ms=5.0), cpu_target())
    assert result["cache"] == "warm" and result["provenance"]["flush_bytes"] == 0
    assert result["mode"] == "burst" and result["pause_ms"] == 5.0
    # Each burst run sleeps 5 ms first: the measurement's length bounds their number.
    seconds = result["measurement"]["seconds"]
    assert seconds >= 0.2
    assert 1 <= result["stats"]["runs"] <= seconds / 0.005 + 1


def lock_recording(set_answer: Any, reset_answer: Any = None) -> ReplayNvml:
    data = json.loads((ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json")
                      .read_text())
    device = data["devices"][0]
    device["nvmlDeviceSetGpuLockedClocks(1410,1410)"] = set_answer
    device["nvmlDeviceResetGpuLockedClocks"] = reset_answer
    return ReplayNvml(data)


def test_clock_lock_is_applied_restored_and_marked() -> None:
    nvml = lock_recording(None)
    result = measure(small(lock_clocks_mhz=1410), cpu_target(nvml))
    assert result["flags"]["clocks_locked"] is True
    assert result["clock_lock"] == {"requested_mhz": 1410, "applied": True, "error": None}
    # Telemetry came from NVML (here the recording) through the measurement window.
    assert result["telemetry"]["samples"] > 0
    assert result["telemetry"]["sm_clock_mhz_median"] == 345


def test_a_refused_clock_lock_is_recorded_and_nothing_is_reset() -> None:
    nvml = lock_recording({"nvml_error": "NVML_ERROR_NO_PERMISSION"},
                          {"nvml_error": "NVML_ERROR_UNKNOWN"})
    result = measure(small(lock_clocks_mhz=1410), cpu_target(nvml))
    assert result["flags"]["clocks_locked"] is False
    assert result["clock_lock"]["error"] == "NVML_ERROR_NO_PERMISSION"
    assert "unlock_error" not in result["clock_lock"]


def test_a_failed_reset_after_locking_is_reported() -> None:
    nvml = lock_recording(None, {"nvml_error": "NVML_ERROR_NO_PERMISSION"})
    result = measure(small(lock_clocks_mhz=1410), cpu_target(nvml))
    assert result["clock_lock"]["unlock_error"] == "NVML_ERROR_NO_PERMISSION"


def test_other_processes_on_the_gpu_flag_contention() -> None:
    data = json.loads((ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json")
                      .read_text())
    data["devices"][0]["nvmlDeviceGetComputeRunningProcesses"] = [
        {"pid": 999999, "usedGpuMemory": 1 << 30}]
    result = measure(small(), cpu_target(ReplayNvml(data)))
    assert result["flags"]["contended"] is True
    assert "999999" in result["contention"][0]


def test_bad_options_are_refused() -> None:
    with pytest.raises(harness.HarnessError, match="dtype"):
        small(dtype="int8").validate()
    with pytest.raises(harness.HarnessError, match="mode"):
        small(mode="peak").validate()
    with pytest.raises(harness.HarnessError, match="protocol"):
        small(protocol="slow").validate()
    with pytest.raises(harness.HarnessError, match="longer span"):
        soaked(soak_span_s=0.03).validate()


def test_agent_bench_on_cpu_emits_a_valid_document(tmp_path: Path) -> None:
    env = dict(os.environ, FLEET_NVML_REPLAY=str(
        ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json"))
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "bench", "--cpu", "--size", "64", "--measure-s", "0.2",
         "--soak-window-s", "0.05", "--soak-span-s", "0.5", "--soak-cap-s", "1.5"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert any(e["event"] == "progress" and e["stage"] == "benchmark" for e in events)
    document = parse_document(events[-1]["document"], "agent bench")
    assert len(document.benchmarks) == 1
    result = document.benchmarks[0]
    assert result.m == 64 and result.stats.runs > 0
    assert result.statistic == "mean"
    # Soaked by default: the soak's own settings, as given, travel with the result.
    assert result.thermal == "soaked" and result.soak is not None
    assert (result.soak.window_s, result.soak.span_s, result.soak.cap_s) == (0.05, 0.5, 1.5)
    assert result.soak.curve and result.soak.first_20s_tflops


def test_quick_and_burst_are_cool_start_figures() -> None:
    env = dict(os.environ, FLEET_NVML_REPLAY=str(
        ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json"))
    for flags in (["--quick"], ["--pause-ms", "1"]):
        # The matmul alone: the suites after it have tests of their own.
        proc = subprocess.run(
            [sys.executable, "-m", "agent", "bench", "--cpu", "--suite", "gemm", "--size", "64",
             "--measure-s", "0.2", "--max-warmup-s", "0.3", "--max-total-s", "0.8", *flags],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
        result = parse_document(json.loads(proc.stdout.splitlines()[-1])["document"],
                                "agent bench").benchmarks[0]
        assert result.thermal == "cool-start" and result.soak is None, flags
        assert not result.flags.not_soaked


def test_without_torch_the_agent_says_which_python_lacks_it_and_what_to_do() -> None:
    # `python3 -S` sees no site-packages: a host's Python without torch.
    env = dict(os.environ, FLEET_NVML_REPLAY=str(
        ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json"))
    proc = subprocess.run([sys.executable, "-S", "-m", "agent", "bench"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    document = json.loads(proc.stdout.splitlines()[-1])["document"]
    assert document["benchmarks"] == []
    [error] = [e for e in document["errors"] if e["stage"] == "benchmark"]
    assert error["message"].startswith(f"torch is not importable by {sys.executable} (")
    assert "install torch for it" in error["message"]
    assert "`python:` for this host in the inventory" in error["message"]


def bench_text(document: Any) -> str:
    from rich.console import Console

    from fleet.cli.display import bench_table

    console = Console(record=True, width=300)
    console.print(bench_table(document))
    return console.export_text()


def test_the_bench_table_gives_each_version_its_own_interval_and_the_median_beside(
        ) -> None:
    from tests.store import factory

    data = factory.document(gpus=1)
    result = data["benchmarks"][0]
    # An 8192^3 result: median 1.6 ms (687.2 TFLOP/s), its interval 1.59-1.61 ms
    # (682.9-691.5), trimmed mean 1.62 ms (678.7), batch-means interval 670.0-690.0.
    result.update(m=8192, n=8192, k=8192, harness_version="1.2.0", statistic="trimmed_mean",
                  tflops=2 * 8192**3 / 1.62e-3 / 1e12)
    result["stats"].update(median_ms=1.6, trimmed_mean_ms=1.62, ci95_low_ms=1.59,
                           ci95_high_ms=1.61)
    result["measurement"] = {"seconds": 6.5, "sub_windows": 6, "extended": False,
                             "band": 0.01, "sub_window_trimmed_means_ms": [1.62] * 6,
                             "operating_points": [], "tflops_ci95": [670.0, 690.0]}
    text = bench_text(parse_document(data, "test"))
    # The batch-means interval is the within-run one, under that name; a cool-start
    # result has no repeat interval ("next run" is "-").
    assert "678.7" in text and "670.0-690.0" in text and "within run" in text
    assert "682.9-691.5" not in text and "next run: where" in text
    [row] = [line for line in text.splitlines() if line.startswith("0 ")]
    assert row.split()[1:4] == ["678.7", "-", "670.0-690.0"]
    # The same result from before 1.2 (no statistic): figure and interval are the median's.
    result.update(harness_version="1.1.0", statistic=None, tflops=2 * 8192**3 / 1.6e-3 / 1e12)
    text = bench_text(parse_document(data, "test"))
    assert "682.9-691.5" in text and "670.0-690.0" not in text


def test_the_bench_table_keeps_every_figure_whole_in_80_columns() -> None:
    from rich.console import Console

    from fleet.cli.display import bench_table

    real = json.loads((ROOT / "tests/fixtures/gpus/h100-sxm5-lent-device/"
                       "bench-document.json").read_text())
    console = Console(record=True, width=80)
    console.print(bench_table(parse_document(real, "fleet bench on the lent H100")))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].startswith("Standard harness: 1 x H100-SXM5-80GB, bf16 8192³ sustained")
    [row] = [line for line in lines if line.startswith("0 ")]
    # A cool-start result (harness 1.2.0): no first-20-s level; its warm-up as the soak.
    assert row.split()[:10] == ["0", "692.6", "-", "690.6-694.6", "-", "70.0%", "10",
                                "s", "67", "1380"]


def test_a_soaked_result_shows_where_the_next_run_lands_in_80_columns() -> None:
    from rich.console import Console

    from fleet.cli.display import bench_table

    # The lent H100's soaked document (harness 1.3.0): 679.8 TFLOP/s, one operating point,
    # its soaked windows within 0.14%, so the variant's spread sets the width: sd 0.571%
    # over 9 dof, t = 2.262, half-width 2.262 x sqrt(2) x 0.571% = 1.827%: 667.4-692.2.
    real = json.loads((ROOT / "tests/fixtures/nodes/h100-sxm5-lent/document.json").read_text())
    console = Console(record=True, width=80)
    console.print(bench_table(parse_document(real, "fleet bench on the lent H100")))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    [row] = [line for line in text.splitlines() if line.startswith("0 ")]
    assert row.split()[1:3] == ["679.8", "667-692"]
    assert "GPU 0: next run ±1.83% from the variant's run-to-run spread" in " ".join(
        text.split())


def test_a_result_must_say_its_statistic_from_1_2_and_its_interval_in_order() -> None:
    from fleet.errors import AgentError
    from tests.store import factory

    data = factory.document(gpus=1)
    result = data["benchmarks"][0]
    result.update(harness_version="1.2.0")
    with pytest.raises(AgentError, match="statistic"):
        parse_document(data, "test")
    result.update(statistic="trimmed_mean", cache="flushed", measurement={
        "seconds": 6.5, "sub_windows": 2, "extended": False, "band": 0.01,
        "sub_window_trimmed_means_ms": [1.6, 1.6], "operating_points": [],
        "tflops_ci95": [690.0, 670.0]})
    with pytest.raises(AgentError, match=r"\[low, high\]"):
        parse_document(data, "test")
    result["measurement"]["tflops_ci95"] = [670.0, 690.0]
    # The factory's figure is the median's; a trimmed-mean result must carry its own.
    with pytest.raises(AgentError, match="contradicts its own times"):
        parse_document(data, "test")
    flops = 2.0 * result["m"] * result["n"] * result["k"]
    result["tflops"] = flops / (result["stats"]["trimmed_mean_ms"] * 1e-3) / 1e12
    assert parse_document(data, "test").benchmarks[0].cache == "flushed"


def test_a_headline_that_does_not_follow_from_its_times_is_refused() -> None:
    from fleet.errors import AgentError
    from tests.store import factory

    data = factory.document(gpus=1)
    result = data["benchmarks"][0]
    assert parse_document(data, "test").benchmarks[0].tflops == result["tflops"]
    result["tflops"] *= 1.01  # a figure 1% better than its own median says
    with pytest.raises(AgentError, match=r"stats\.median_ms.*contradicts"):
        parse_document(data, "test")


class FakeClock:
    """The harness's clock (its `time` module): time passes only as the fake runs and the
    harness's own sleeps take it, so that a busy machine cannot stretch a window."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


def fake_runs(monkeypatch: pytest.MonkeyPatch, level_ms: Any, per_run: bool = False) -> None:
    """Runner.cpu_runs, except that every run takes 1 ms of the harness's (fake) clock and
    reports `level_ms(seconds since the first run)`: a card whose operating point we
    choose. The level is read once per call, or with `per_run` at each run's own time."""
    clock = FakeClock()
    t0: list[float] = []

    def cpu_runs(self: harness.Runner, runs: int) -> list[float]:
        now = clock.perf_counter()
        t0.append(t0[0] if t0 else now)
        clock.sleep(runs * 0.001)
        if per_run:
            return [level_ms(now - t0[0] + i * 0.001) for i in range(runs)]
        return [level_ms(now - t0[0])] * runs

    monkeypatch.setattr(harness.Runner, "cpu_runs", cpu_runs)
    monkeypatch.setattr(harness, "time", clock)


def test_a_settled_card_is_measured_for_the_minimum_only(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_runs(monkeypatch, lambda t: 1.0)
    cfg = small(measure_s=0.3, max_total_s=2.0)
    result = measure(cfg, cpu_target())
    assert result["warmup"]["state"] == "settled" and result["warmup"]["steady"]
    m = result["measurement"]
    assert 0.3 <= m["seconds"] < 0.6 and not m["extended"]
    assert len(m["operating_points"]) == 1 and m["operating_points"][0]["share"] == 1.0
    assert not result["flags"]["operating_point_switch"]
    parse_result(result)


def test_a_measurement_spanning_two_operating_points_is_extended_and_described(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 1.0 ms (the warm-up settles in about 0.2 s), 3% slower from 0.3 s to 0.7 s, back: the
    # 0.3 s minimum of measuring sees both levels wherever in 0.2-0.4 s it starts.
    fake_runs(monkeypatch, lambda t: 1.03 if 0.3 <= t < 0.7 else 1.0)
    cfg = small(measure_s=0.3, max_total_s=1.8)
    result = measure(cfg, cpu_target())
    m = result["measurement"]
    assert m["extended"] and result["flags"]["operating_point_switch"]
    # It went on until the run's cap (set-up and warm-up included), not past it by much.
    assert 1.8 <= result["wall_s"] < 1.8 + 0.5
    # The majority's level first, then the other; a sub-window holding the switch itself
    # may make a third, small level between them.
    fast, slow = m["operating_points"][:2]
    assert fast["share"] > slow["share"] >= 0.15
    assert len(m["operating_points"]) <= 3
    ratio = fast["tflops"] / slow["tflops"]
    assert ratio == pytest.approx(1.03, abs=0.002)
    assert result["stats"]["median_ms"] == 1.0  # the majority's level
    # The headline is the work done per second across both levels, not the majority's
    # level, and its interval from the sub-windows is wide enough to hold both.
    flops = 2 * 96 * 80 * 64 / 1e9
    assert flops / 1.03 < result["tflops"] < flops / 1.0 * 0.998
    low, high = m["within_run_ci95"]
    assert low < result["tflops"] < high and high - low > 0.005 * result["tflops"]
    parse_result(result)


def test_the_headline_moves_with_the_split_between_levels_not_by_the_whole_gap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Two levels 3% apart, the slow one held 45% and then 55% of the time: the split a
    # power-capped H100 shows (bench/records/2026-11-23-harness-1.2.0.md). A median jumps from the
    # fast level to the slow one, 3%; the headline moves by about a tenth of that (0.37%
    # here, after trimming), as the work done per second does.
    figures = []
    for slow_share in (0.45, 0.55):
        fake_runs(monkeypatch, lambda t, s=slow_share: 1.03 if (t / 0.02) % 1 < s else 1.0,
                  per_run=True)
        result = measure(small(measure_s=0.6, max_warmup_s=0.5, max_total_s=1.5),
                         cpu_target())
        figures.append((result["tflops"], 2 * 96 * 80 * 64 / result["stats"]["median_ms"] / 1e9))
    (tm_45, median_45), (tm_55, median_55) = figures
    assert median_45 / median_55 == pytest.approx(1.03, abs=0.001)  # the median jumps
    # The headline, the work over the time, moves by the split's change times the gap:
    # 10% of the runs moved 3% slower, 0.3% of the time.
    assert tm_45 / tm_55 == pytest.approx(1 + 0.1 * 0.03 / 1.0165, abs=0.0015)


def held_every(monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    """A card steady at 1.0 ms whose every `every`-th run is held 4 ms by something else."""
    count = [0]

    def level(t: float) -> float:
        count[0] += 1
        return 4.0 if count[0] % every == 0 else 1.0

    fake_runs(monkeypatch, level, per_run=True)


def test_interrupted_runs_are_excluded_by_name_and_flagged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The headline is the card's 1.0 ms, the held runs named in its contention.
    held_every(monkeypatch, 50)
    result = measure(small(measure_s=0.3, max_total_s=2.0), cpu_target())
    excluded = result["measurement"]["excluded_runs"]
    assert excluded and all(ms == 4.0 for _, ms in excluded)
    assert result["samples_ms"] and set(result["samples_ms"]) == {1.0}
    assert result["tflops"] == pytest.approx(2 * 96 * 80 * 64 / 1e-3 / 1e12)
    assert result["flags"]["contended"]
    [said] = [c for c in result["contention"] if "interrupted" in c]
    assert f"run {int(excluded[0][0])} (4.000 ms)" in said
    parse_result(result)


def test_a_soaked_result_leaves_interrupted_runs_out_of_its_level_and_its_drop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    held_every(monkeypatch, 40)
    result = measure(soaked(), cpu_target())
    assert result["measurement"]["excluded_runs"] and result["flags"]["contended"]
    assert result["tflops"] == pytest.approx(2 * 96 * 80 * 64 / 1e-3 / 1e12)
    # The first 20 s (0.2 s here) leave theirs out too: the card did not slow, so no drop.
    assert result["soak"]["first_20s_tflops"] == pytest.approx(result["tflops"])
    assert result["soak"]["drop"] == pytest.approx(0.0, abs=1e-9)
    parse_result(result)


def test_slow_runs_count_when_the_card_itself_slowed() -> None:
    # NVML saw a hardware slowdown: the slow runs are the card's, and the figure keeps them.
    kept, excluded = harness.interrupted([1.0, 1.0, 4.0, 1.0], card_slowed=True)
    assert kept == [1.0, 1.0, 4.0, 1.0] and excluded == []
    kept, excluded = harness.interrupted([1.0, 1.0, 4.0, 1.0, 1.49], card_slowed=False)
    assert kept == [1.0, 1.0, 1.0, 1.49] and excluded == [(2, 4.0)]


def test_a_card_alternating_in_warm_up_starts_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0.1 s on each level, windows of 0.05 s: two tight levels, back and forth.
    fake_runs(monkeypatch, lambda t: 1.0 if int(t / 0.1) % 2 == 0 else 1.03)
    cfg = small(measure_s=0.3, max_warmup_s=1.0, max_total_s=1.6)
    result = measure(cfg, cpu_target())
    assert result["warmup"]["state"] == "alternating" and result["warmup"]["steady"]
    assert result["warmup"]["seconds"] < 1.0  # well before the cap
    assert not result["flags"]["not_steady"]
    assert result["flags"]["operating_point_switch"]


def test_a_drifting_card_is_not_steady(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_runs(monkeypatch, lambda t: 1.0 + 0.1 * t)  # 0.5% slower every 50 ms window
    result = measure(small(max_warmup_s=0.5, max_total_s=1.0), cpu_target())
    assert result["warmup"]["state"] == "drifting"
    assert result["flags"]["not_steady"] and not result["warmup"]["steady"]


def parse_result(result: dict[str, Any]) -> None:
    """The controller's strict model accepts the result as the agent emits it."""
    from fleet.model.document import BenchmarkResult

    parsed = BenchmarkResult.model_validate(json.loads(json.dumps(result)))
    assert parsed.measurement is not None and parsed.warmup.state == result["warmup"]["state"]


def test_the_flush_is_left_out_only_where_the_operands_evict_the_l2_themselves() -> None:
    # 96x64 @ 64x80 in bf16: 38 KiB, far below the 1 MiB flush: flushed before every run.
    small_case = harness.Runner(torch, small(), cpu_target())
    assert small_case.flush is not None and small_case.flush_note.startswith("every run")
    # 512^3 in bf16: A, B and C are 1.5 MiB, more than the 1 MiB flush buffer: not flushed
    # by default (flush="auto" since 1.2); with flush="always", flushed all the same, and
    # its results are "flushed", never compared with the default's as "cold".
    assert harness.Config().flush == "auto"
    forced = harness.Runner(torch, small(m=512, n=512, k=512, flush="always"), cpu_target())
    assert forced.flush is not None and forced.cache == "flushed"
    assert small_case.cache == "cold"
    big = small(m=512, n=512, k=512)
    runner = harness.Runner(torch, big, cpu_target())
    assert runner.working_set_bytes == 3 * 512 * 512 * 2
    assert runner.flush is None and runner.flush_note.startswith("none: A, B and C")
    # Burst keeps it: the flush takes the card's wake from each pause out of the timed run.
    burst = harness.Runner(torch, small(m=512, n=512, k=512, mode="burst"), cpu_target())
    assert burst.flush is not None and burst.cache == "cold"
    assert harness.Runner(torch, small(m=512, n=512, k=512, warm_l2=True),
                          cpu_target()).cache == "warm"
    # fp32's 4-byte elements count double.
    assert harness.Runner(torch, small(m=384, n=384, k=384, dtype="fp32", flush="auto"),
                          cpu_target()).flush is None
    assert harness.Runner(torch, small(m=384, n=384, k=384, flush="auto"),
                          cpu_target()).flush is not None
    assert harness.Runner(torch, small(flush="auto"), cpu_target()).flush is not None
    result = measure(big, cpu_target())
    assert result["cache"] == "cold" and result["provenance"]["flush_bytes"] == 0
    assert result["provenance"]["l2_flush"] == runner.flush_note
    parse_result(result)
    with pytest.raises(harness.HarnessError, match="flush"):
        small(flush="never").validate()


@pytest.mark.parametrize(("flags", "refused"), [
    (["--flush-auto"], False),  # 1.1's opt-in, 1.2's default: older scripts still run
    (["--warm-l2", "--flush-always"], True),
    (["--flush-always", "--flush-auto"], True),
])
def test_the_agents_flush_flags(flags: list[str], refused: bool) -> None:
    env = dict(os.environ, FLEET_NVML_REPLAY=str(
        ROOT / "tests/fixtures/gpus/h100-sxm5-passthrough/nvml-recording.json"))
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "bench", "--cpu", "--suite", "gemm", "--size", "64",
         "--measure-s", "0.2", "--max-warmup-s", "0.3", "--max-total-s", "0.8", "--quick",
         *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    if refused:
        assert proc.returncode == 2 and "not allowed with argument" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        document = parse_document(json.loads(proc.stdout.splitlines()[-1])["document"], "x")
        assert document.benchmarks[0].cache == "cold"


def test_a_card_that_falls_then_holds_is_measured_soaked_with_its_drop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 1.4% slower over the first 0.6 s (a hundredfold the H100's first minute), then held.
    fake_runs(monkeypatch, lambda t: 1.0 + 0.014 * min(t, 0.6) / 0.6)
    result = measure(soaked(), cpu_target())
    soak = result["soak"]
    assert result["thermal"] == "soaked" and soak["soaked"]
    assert not result["flags"]["not_soaked"] and not result["flags"]["not_steady"]
    # Not before the fall ended and a span more had shown it flat.
    assert soak["settled_s"] >= 0.6 and soak["seconds"] >= soak["settled_s"]
    assert soak["seconds"] < 1.8  # well before the cap
    flops = 2 * 96 * 80 * 64 / 1e9
    assert result["tflops"] == pytest.approx(flops / 1.014, rel=0.002)
    # The first 0.2 s averaged ~0.23% of the fall; the soaked level lost the rest of it.
    assert soak["first_20s_tflops"] == pytest.approx(flops / 1.0023, rel=0.002)
    assert soak["drop"] == pytest.approx(1 - 1.0023 / 1.014, abs=0.002)
    # The curve starts at the first launch and goes on through the measurement.
    curve = soak["curve"]
    assert curve[0][0] < 0.1 and curve[-1][0] >= soak["seconds"] + 0.15
    assert curve[0][1] > curve[-1][1]
    assert result["measurement"]["seconds"] == pytest.approx(0.2, abs=0.05)
    parse_result(result)


def test_a_card_that_never_settles_is_measured_at_the_cap_and_flagged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_runs(monkeypatch, lambda t: 1.0 + 0.02 * t)  # 2% a second: never flat
    result = measure(soaked(), cpu_target())
    soak = result["soak"]
    assert result["flags"]["not_soaked"] and not soak["soaked"] and soak["settled_s"] is None
    assert 1.8 <= soak["seconds"] < 1.8 + 0.1
    assert result["warmup"]["state"] == "drifting" and not result["warmup"]["steady"]
    assert soak["throughput_change"] < -0.003
    parse_result(result)


def test_every_gpu_starts_loading_together_and_nobody_waits_for_a_failed_one() -> None:
    import threading
    import time

    coordinator = harness.SoakCoordinator(3)
    started: dict[int, float] = {}

    def gpu(index: int, setup_s: float) -> None:
        time.sleep(setup_s)
        coordinator.arrive(index, timeout=60.0)
        started[index] = time.perf_counter()

    threads = [threading.Thread(target=gpu, args=(i, 0.3 * i)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    time.sleep(0.8)
    assert not started  # GPU 2 is still setting up: nobody loads yet
    withdrawn = time.perf_counter()
    coordinator.withdraw(2)  # its set-up failed
    for thread in threads:
        thread.join()
    # Both let go by the withdrawal, not by their timeout of 60 s.
    assert set(started) == {0, 1}
    assert withdrawn <= min(started.values()) and max(started.values()) - withdrawn < 30
    assert not coordinator.all_ready()
    coordinator.report_ready(0)
    coordinator.report_ready(1)
    assert coordinator.all_ready()  # the withdrawn GPU is not waited for
    coordinator.report_finished(1)
    assert not coordinator.all_finished()
    coordinator.report_finished(0)
    assert coordinator.all_finished()

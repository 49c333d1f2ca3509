"""fleet passes the harness only what the user chose: the agent's own defaults otherwise."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fleet.cli import main
from fleet.probe.local import BenchOptions
from tests.conftest import ROOT


def test_the_harness_defaults_are_the_agents_own() -> None:
    args = BenchOptions().agent_args()
    assert args == ["--dtype", "bf16", "-m", "8192", "-n", "8192", "-k", "8192"]


def test_chosen_settings_reach_the_agent() -> None:
    args = BenchOptions(measure_s=8.0, max_warmup_s=20.0, max_total_s=30.0,
                        flush_always=True, pause_ms=50.0).agent_args()
    for expected in (["--measure-s", "8.0"], ["--max-warmup-s", "20.0"],
                     ["--max-total-s", "30.0"], ["--pause-ms", "50.0"]):
        i = args.index(expected[0])
        assert args[i:i + 2] == expected
    assert "--flush-always" in args and "--warm-l2" not in args
    quick = BenchOptions(quick=True, soak_cap_s=60.0).agent_args()
    assert "--quick" in quick and quick[quick.index("--soak-cap-s") + 1] == "60.0"


def test_a_soaked_node_costs_one_soak_and_a_sequential_one_a_soak_a_gpu() -> None:
    # Soaked (the default): 180 s cap + 30 s span + 2 x 20 s of measurement + 90 s of
    # start-up and tail, then 30 s a GPU for its inputs and gate.
    gemm = "gemm"
    assert BenchOptions(suite=gemm).timeout_s(8) == 180 + 30 + 40 + 90 + 30 * 8
    assert BenchOptions(sequential=True, suite=gemm).timeout_s(2) == \
        2 * (180 + 30 + 40 + 90 + 30)
    assert BenchOptions(soak_cap_s=60.0, measure_s=5.0, suite=gemm).timeout_s(1) == \
        60 + 30 + 10 + 90 + 30
    # --quick and burst: under 20 s a GPU, given 120.
    assert BenchOptions(quick=True).timeout_s(8) == BenchOptions(pause_ms=50.0).timeout_s(8)
    assert BenchOptions(quick=True, suite=gemm).timeout_s(8) == 120 * 8


def test_the_node_and_job_suites_add_their_own_time_and_can_run_alone() -> None:
    # 150 s for the node suite's start and all-reduce guard, then 10 s a GPU; the job
    # suite soaks to the matmul's cap after the matmul as alone (the cards cool during
    # the node suite), then a span, 60 s beyond the soak and a 90-s margin.
    # With --job-compile, each GPU's compile of the training step, one at a time.
    # The storage suite (issue 58): its 30-s budget and a 30-s margin.
    job, storage = 180 + 30 + 60 + 90, 30 + 30
    assert BenchOptions().timeout_s(8) == (180 + 30 + 40 + 90 + 30 * 8 + 150 + 10 * 8 + job
                                           + storage)
    assert BenchOptions(suite="storage").timeout_s(8) == storage
    assert BenchOptions(suite="node").timeout_s(4) == 150 + 10 * 4
    assert BenchOptions(suite="job").timeout_s(4) == job
    assert BenchOptions(suite="job", job_compile=True).timeout_s(4) == job + 45 * 4
    assert BenchOptions(suite="job", sequential=True, job_compile=True).timeout_s(4) == \
        4 * (job + 45)
    # A shorter soak cap shortens the job's soak too: the agent gives it to both.
    assert BenchOptions(suite="job", soak_cap_s=60.0).timeout_s(1) == 60 + 30 + 60 + 90
    assert BenchOptions(suite="job", job_compile=True).agent_args()[-3:] == \
        ["--suite", "job", "--job-compile"]
    assert BenchOptions(suite="node").agent_args()[-2:] == ["--suite", "node"]
    assert "--suite" not in BenchOptions().agent_args()


@pytest.mark.parametrize("flags", [["--warm-l2", "--flush-always"],
                                   ["--warm-l2", "--flush-auto"],
                                   ["--flush-always", "--flush-auto"]])
def test_contradicting_flush_choices_are_refused(flags: list[str]) -> None:
    result = CliRunner().invoke(main, ["bench", *flags])
    assert result.exit_code == 2
    assert f"{flags[0]} and {flags[1]} contradict each other" in result.output


def test_flush_auto_is_still_accepted_and_is_the_default() -> None:
    # Harness 1.1's opt-in, named in schedules installed then: it must not break them.
    from fleet.cli.options import HarnessArgs

    base = dict(dtype="bf16", size=8192, m=None, n=None, k=None, pause_ms=None, quick=False,
                soak_cap_s=None, warm_l2=False, sequential=False, gpus=None, flush_always=False,
                measure_s=None, max_warmup_s=None, max_total_s=None, lock_clocks=None,
                cpu=False, gemm_only=False, suite=None, job_compile=False)
    assert (HarnessArgs(**base, flush_auto=True).bench_options()  # type: ignore[arg-type]
            == HarnessArgs(**base, flush_auto=False).bench_options())  # type: ignore[arg-type]
    assert "--flush-auto" not in CliRunner().invoke(main, ["bench", "--help"]).output


def test_gemm_only_and_a_node_suite_contradict_each_other() -> None:
    result = CliRunner().invoke(main, ["bench", "--gemm-only", "--suite", "node"])
    assert result.exit_code == 2
    assert "--gemm-only and --suite node contradict each other" in result.output


@pytest.mark.parametrize(("flags", "said"), [
    (["--gemm-only", "--suite", "job"], "--gemm-only and --suite job contradict each other"),
    (["--suite", "node", "--job-compile"], "--job-compile asks for the job suite"),
    (["--gemm-only", "--job-compile"], "--job-compile asks for the job suite"),
])
def test_job_choices_that_contradict_are_refused(flags: list[str], said: str) -> None:
    for command in ("bench", "probe"):
        inventory = [str(ROOT / "inventory" / "example.yaml")] if command == "probe" else []
        args = [command, *flags, *inventory]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (command, result.output)
        assert said in result.output


def test_probe_and_sweep_take_the_suite() -> None:
    for command in ("probe", "sweep", "bench"):
        text = CliRunner().invoke(main, [command, "--help"], terminal_width=80).output
        assert "--suite" in text and "--job-compile" in text, command

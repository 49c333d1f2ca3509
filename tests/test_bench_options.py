"""fleet passes the harness only what the user chose: the agent's own defaults otherwise."""

from __future__ import annotations

from click.testing import CliRunner

from fleet.cli import main
from fleet.local_agent import BenchOptions


def test_the_harness_defaults_are_the_agents_own() -> None:
    args = BenchOptions().agent_args()
    assert args == ["--dtype", "bf16", "-m", "8192", "-n", "8192", "-k", "8192"]


def test_chosen_settings_reach_the_agent() -> None:
    args = BenchOptions(measure_s=8.0, max_warmup_s=20.0, max_total_s=30.0, flush_auto=True,
                        pause_ms=50.0).agent_args()
    for expected in (["--measure-s", "8.0"], ["--max-warmup-s", "20.0"],
                     ["--max-total-s", "30.0"], ["--pause-ms", "50.0"]):
        i = args.index(expected[0])
        assert args[i:i + 2] == expected
    assert "--flush-auto" in args and "--warm-l2" not in args


def test_warm_l2_and_flush_auto_are_refused_together() -> None:
    result = CliRunner().invoke(main, ["bench", "--warm-l2", "--flush-auto"])
    assert result.exit_code == 2
    assert "--warm-l2 and --flush-auto contradict each other" in result.output

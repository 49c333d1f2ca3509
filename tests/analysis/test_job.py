"""The job suite's analysis on constructed frames (fleet/analysis/job/figures.py, job_compare.py,
job_cost.py): per-GPU figures beside the matmul of the same run, the job's shortfall
against its matmul and its cause, what is left out, stragglers, gaps, the synchronous
figure and the cost of a million tokens."""

from __future__ import annotations

import datetime as dt
import random
import re
from typing import Any

import pandas as pd
import pytest

from fleet.analysis.compare import GapOptions
from fleet.analysis.contention import JOINED, find_contention
from fleet.analysis.dataset import CONTENDED_REASON as MATMUL_CONTENDED_REASON
from fleet.analysis.dataset import Excluded, Listing
from fleet.analysis.job.compare import (
    compare_job_providers,
    find_job_stragglers,
    job_sync_nodes,
    sync_tokens_per_s,
)
from fleet.analysis.job.cost import cost_per_million_tokens, job_table
from fleet.analysis.job.figures import (
    CONTENDED_REASON,
    NOT_SOAKED_REASON,
    SHARED_REASON,
    WRONG_REASON,
    JobGpu,
    contended_results,
    find_job_shortfalls,
    job_gpus,
)
from tests.analysis.job_frames import PCIE, WHEN, job_frame, job_row, matmul_frame

TRAIN, DECODE, MATMUL = 79_000.0, 48_000.0, 700.0


def crowd(rng: random.Random | None = None, *, sd: float = 0.0, hosts: int = 2,
          provider: str = "alpha", train: dict[tuple[str, int], float] | None = None,
          decode: dict[tuple[str, int], float] | None = None,
          matmul: dict[tuple[str, int], float] | None = None,
          hot: dict[tuple[str, int], float] | None = None,
          clock: dict[tuple[str, int], float] | None = None, **knobs: Any
          ) -> tuple[list[dict[str, Any]], list[tuple[str, str, int, float]]]:
    """`hosts` nodes of four GPUs: job rows (train and decode) and matmul figures, each
    with `sd` relative noise; the dicts scale one GPU's (host, index) figure or SM clock
    under the job (of 1,980 MHz), or set its temperature under the job."""
    def noise() -> float:
        return 1.0 + (rng.gauss(0.0, sd) if rng is not None and sd else 0.0)
    rows, figures = [], []
    for h in range(hosts):
        host = f"{provider[0]}-{h + 1}"
        for i in range(4):
            key = (host, i)
            temperature = (hot or {}).get(key, 70.0)
            mhz = 1980.0 * (clock or {}).get(key, 1.0)
            rows.append(job_row(provider, host, i, "train",
                                TRAIN * (train or {}).get(key, 1.0) * noise(),
                                temperature_c=temperature, sm_clock_mhz=mhz, **knobs))
            rows.append(job_row(provider, host, i, "decode",
                                DECODE * (decode or {}).get(key, 1.0) * noise(),
                                temperature_c=temperature, sm_clock_mhz=mhz, **knobs))
            figures.append((provider, host, i, MATMUL * (matmul or {}).get(key, 1.0) * noise()))
    return rows, figures


def gpus_of(rows: list[dict[str, Any]], figures: list[tuple[str, str, int, float]]
            ) -> list[JobGpu]:
    found, _ = job_gpus(job_frame(rows), matmul_frame(figures))
    return found


def test_each_gpu_is_set_beside_its_matmul_in_the_same_run() -> None:
    rows, figures = crowd(hosts=1)
    # A second run where the matmul ran at 690 and the job at 78,000: the medians of two.
    more = [dict(r, run_id=2, tokens_per_s=r["tokens_per_s"] * 78_000 / TRAIN,
                 tflops=r["tflops"] * 78_000 / TRAIN)
            for r in rows if r["workload"] == "train"]
    second = matmul_frame([(p, h, i, 690.0) for p, h, i, _ in figures], run_id=2)
    found, excluded = job_gpus(job_frame(rows + more),
                               pd.concat([matmul_frame(figures), second], ignore_index=True))
    assert excluded == []
    train = [g for g in found if g.config.train]
    assert len(train) == 4 and len(found) == 8
    g = train[0]
    assert g.results == 2 and g.tokens_per_s == pytest.approx(78_500.0)
    assert g.matmul_tflops == pytest.approx(695.0)
    assert g.matmul_config == "8192³ bf16, sustained, soaked"
    job_tflops = TRAIN * (6.0 * 872_484_864 + 12.0 * 4 * 4096 * 4096) / 1e12  # 477.2
    assert g.tflops == pytest.approx(job_tflops * 78_500 / 79_000)
    # Kept: the median over the runs of job TFLOP/s / matmul TFLOP/s of that run.
    assert g.kept == pytest.approx((job_tflops / 700.0 + job_tflops * 78 / 79 / 690.0) / 2)
    assert g.config.label.startswith("Training step, llama3-8b 4x4096 h32/8 ffn14336 b2 "
                                     "s4096, bf16, flash attention (headline), eager, "
                                     "concurrent on 4 GPUs")
    assert "4 layers of llama3-8b" in g.config.not_measured
    # Decode ran in the first run only: beside that run's matmul.
    assert all(g.matmul_tflops == 700.0 for g in found if not g.config.train)


def test_a_gpu_whose_job_falls_further_than_its_matmul_at_a_lower_clock_is_named_for_cooling(
        ) -> None:
    rows, figures = crowd(random.Random(1), sd=0.003, train={("a-2", 3): 0.88},
                          hot={("a-2", 3): 82.0}, clock={("a-2", 3): 0.90})
    (found,) = find_job_shortfalls(gpus_of(rows, figures))
    assert (found.host, found.gpu_index, found.cause) == ("a-2", 3, "cooling")
    assert found.job_share == pytest.approx(0.88, abs=0.01)
    assert found.matmul_share == pytest.approx(1.0, abs=0.01)
    assert (found.temperature_c, found.median_temperature_c) == (82.0, 70.0)
    assert "82 °C against the median 70 °C" in found.evidence
    assert "SM clock 1,782 MHz against 1,980" in found.evidence
    assert found.title.startswith("a-2 GPU 3: the training step 12 points further below "
                                  "its variant than the matmul (88.")


def test_a_hot_card_at_its_crowds_clock_is_not_put_down_to_cooling() -> None:
    # The lent 4x H100's GPU 2, shared for real: 8 C over its crowd, as it runs healthy,
    # its clock 2.2% under theirs, training at 77.5% and decode at 81.6% of the median
    # (bench/records/2026-11-26-h100x4-jobs, flags.json): the GPU's time went elsewhere.
    rows, figures = crowd(random.Random(4), sd=0.003, train={("a-1", 2): 0.775},
                          decode={("a-1", 2): 0.816}, hot={("a-1", 2): 78.0},
                          clock={("a-1", 2): 0.978})
    (found,) = find_job_shortfalls(gpus_of(rows, figures))
    assert (found.host, found.gpu_index, found.cause) == ("a-1", 2, "shared")
    assert "nvidia-smi" in found.cause_words
    # A clock deficit that covers half the fall is cooling's, however cool the card.
    rows, figures = crowd(random.Random(4), sd=0.003, train={("a-1", 2): 0.90},
                          decode={("a-1", 2): 0.90}, clock={("a-1", 2): 0.95})
    (found,) = find_job_shortfalls(gpus_of(rows, figures))
    assert found.cause == "cooling"


def test_one_whose_decode_falls_as_far_is_named_for_memory() -> None:
    rows, figures = crowd(random.Random(2), sd=0.003, train={("a-1", 0): 0.90},
                          decode={("a-1", 0): 0.86})
    (found,) = find_job_shortfalls(gpus_of(rows, figures))
    assert (found.host, found.gpu_index, found.cause) == ("a-1", 0, "memory")
    assert found.decode_share == pytest.approx(0.86, abs=0.01)
    assert f"decode at {found.decode_share:.1%} of its variant" in found.evidence


def test_one_as_cool_and_as_fast_on_memory_is_named_for_its_host() -> None:
    rows, figures = crowd(random.Random(3), sd=0.003, train={("a-1", 2): 0.90})
    (found,) = find_job_shortfalls(gpus_of(rows, figures))
    assert (found.host, found.gpu_index, found.cause) == ("a-1", 2, "host")
    assert found.cause_words.startswith("host")


def test_a_gpu_as_slow_on_the_matmul_as_on_the_job_is_no_shortfall() -> None:
    """A card 10% slow on both is the straggler rule's, not this one's."""
    rows, figures = crowd(random.Random(4), sd=0.003, train={("a-1", 1): 0.90},
                          matmul={("a-1", 1): 0.90})
    gpus = gpus_of(rows, figures)
    assert find_job_shortfalls(gpus) == []
    (slow,) = [s for s in find_job_stragglers(gpus) if s.config.train]
    assert (slow.host, slow.gpu_index) == ("a-1", 1)
    assert slow.deficit == pytest.approx(0.10, abs=0.01)


def test_a_fast_matmul_whose_job_stays_at_the_median_is_no_shortfall() -> None:
    """Matmul 6% above its crowd, job 1% above: 5 points apart, but nothing lost."""
    rows, figures = crowd(random.Random(10), sd=0.003, train={("a-1", 3): 1.01},
                          matmul={("a-1", 3): 1.06})
    assert find_job_shortfalls(gpus_of(rows, figures)) == []


def test_healthy_crowds_raise_nothing_and_a_five_percent_fall_is_found() -> None:
    """Sixteen GPUs on four hosts, job and matmul each 0.5% sd GPU to GPU (wider than the
    0.3% a job run knows itself to, about the H100's matmul repeat sd): no finding on 60
    healthy crowds (0 of 200 when measured with more); a GPU whose training step falls 5%
    with its matmul whole is found on nearly every draw."""
    rng = random.Random(5)
    false_flags = found = 0
    draws = 60
    for _ in range(draws):
        rows, figures = crowd(rng, sd=0.005, hosts=4)
        gpus = gpus_of(rows, figures)
        false_flags += len(find_job_shortfalls(gpus)) + len(find_job_stragglers(gpus))
        rows, figures = crowd(rng, sd=0.005, hosts=4, train={("a-3", 2): 0.95})
        found += any((s.host, s.gpu_index) == ("a-3", 2)
                     for s in find_job_shortfalls(gpus_of(rows, figures)))
    assert false_flags == 0
    assert found >= 0.95 * draws


def test_contended_unsoaked_wrong_and_shared_results_are_left_out() -> None:
    rows, figures = crowd(random.Random(6), sd=0.003)
    # Each of these would be a finding if it counted: half the crowd's tokens/s.
    rows.append(job_row("alpha", "a-1", 0, "train", 40_000.0, run_id=2, contended=True))
    rows.append(job_row("alpha", "a-1", 1, "train", 40_000.0, run_id=2, not_soaked=True))
    rows.append(job_row("alpha", "a-1", 2, "train", 40_000.0, run_id=2, correct=False))
    # And a run where another host answered with a-2's GPUs (a duplicate finding).
    rows.append(job_row("alpha", "a-2", 0, "train", 40_000.0, run_id=3))
    gpus, excluded = job_gpus(job_frame(rows), matmul_frame(figures),
                              shared={("alpha", "a-2", 3)})
    assert [(e.host, e.gpu_index, e.workload, e.results, e.reason) for e in excluded] == [
        ("a-1", 0, "train", 1, CONTENDED_REASON), ("a-1", 1, "train", 1, NOT_SOAKED_REASON),
        ("a-1", 2, "train", 1, WRONG_REASON), ("a-2", 0, "train", 1, SHARED_REASON)]
    assert all(g.results == 1 for g in gpus)
    assert min(g.tokens_per_s for g in gpus if g.config.train) > 78_000
    assert find_job_shortfalls(gpus) == [] and find_job_stragglers(gpus) == []


OWN = "other processes on the GPU: pid 31 (user renter, the agent's own user)"
OTHER = "other processes on the GPU: pid 977 (user nobody, not the agent's user)"


def test_contended_job_results_join_their_nodes_contention_finding() -> None:
    """a-1's GPU 0: its matmul beside the renter's own process, its training (both
    attention backends) and decode beside another user's: one finding, another user's
    work named. a-2's GPU 3 trained beside a process the night before too (other words):
    the newest contended result's words only; its decode that failed its float32 check
    is left out for that. A contended result of a shared run is the duplicate's."""
    rows, _ = crowd(random.Random(10))
    rows = [r for r in rows if (r["host"], r["gpu_index"]) not in (("a-1", 0), ("a-2", 3))]
    rows += [dict(job_row("alpha", "a-1", 0, workload, 40_000.0, attention=attention,
                          run_id=2, contended=True),
                  contention=f"{OTHER}; GPU utilization {use}% before the measurement started")
             for workload, attention, use in (("train", "flash", 90), ("train", "cudnn", 100),
                                              ("decode", "flash", 40))]
    older = WHEN - dt.timedelta(days=1)
    rows.append(dict(job_row("alpha", "a-2", 3, "train", 40_000.0, when=older, run_id=2,
                             contended=True), contention="pid 5 (owner not visible)"))
    rows.append(dict(job_row("alpha", "a-2", 3, "train", 40_000.0, run_id=3,
                             contended=True), contention=OTHER))
    rows.append(job_row("alpha", "a-2", 3, "decode", 40_000.0, run_id=3, contended=True,
                        correct=False))
    rows.append(dict(job_row("alpha", "a-2", 2, "decode", 40_000.0, run_id=4,
                             contended=True), contention=OTHER))
    frame = job_frame(rows)
    busy_rows = contended_results(frame, shared={("alpha", "a-2", 4)})
    assert len(busy_rows) == 5 and busy_rows["contended"].all()
    matmul = Excluded("alpha", "a-1", 0, "H100 SXM5 80GB", 3, MATMUL_CONTENDED_REASON)
    first, second = find_contention(pd.DataFrame(), [(matmul, OWN)], busy_rows)
    assert (first.host, first.units) == (
        "a-1", ("GPU 0 matmul", "GPU 0 training step", "GPU 0 decode"))
    # Each process once, the busiest utilization once; one of another user's: another's.
    assert first.seen == (OWN, OTHER, "GPU utilization 100% before the measurement started")
    assert first.own is False and first.cause == "a process of another user"
    assert (second.host, second.units, second.seen) == (
        "a-2", ("GPU 3 training step",), (OTHER,))
    assert find_contention(pd.DataFrame(), [], contended_results(job_frame(crowd()[0]))) == []


def test_a_gpu_run_partly_contended_is_contended_whole() -> None:
    """a-1's GPU 0 decoded beside another process in run 2, its training there not
    flagged (a document not from the agent, which flags a GPU's run together) and at
    half speed: both are left out, the training with the decode's words saying why; its
    run 3, flagged nowhere, counts."""
    rows, figures = crowd(random.Random(11), sd=0.003)
    rows = [r for r in rows if (r["host"], r["gpu_index"]) != ("a-1", 0)]
    rows.append(job_row("alpha", "a-1", 0, "train", 40_000.0, run_id=2))
    rows.append(job_row("alpha", "a-1", 0, "decode", 48_000.0, run_id=2, contended=True))
    rows.append(job_row("alpha", "a-1", 0, "train", 79_000.0, run_id=3))
    frame = job_frame(rows)
    gpus, excluded = job_gpus(frame, matmul_frame(figures))
    assert [(e.host, e.gpu_index, e.workload, e.results, e.reason) for e in excluded] == [
        ("a-1", 0, "decode", 1, CONTENDED_REASON), ("a-1", 0, "train", 1, CONTENDED_REASON)]
    [kept] = [g for g in gpus if (g.host, g.gpu_index) == ("a-1", 0)]
    assert kept.config.train and kept.tokens_per_s == 79_000.0
    assert find_job_shortfalls(gpus) == [] and find_job_stragglers(gpus) == []
    busy = contended_results(frame)
    assert list(zip(busy["workload"], busy["run_id"], busy["contended"], busy["contention"],
                    strict=True)) == [("train", 2, True, JOINED),
                                      ("decode", 2, True, "pid 4242 (python) of user other")]
    [found] = find_contention(pd.DataFrame(), [], busy)
    assert found.units == ("GPU 0 training step", "GPU 0 decode")
    assert found.seen == (f"GPU 0 training step: {JOINED}", "pid 4242 (python) of user other")


def test_configurations_and_variants_are_never_compared() -> None:
    """The same GPUs under cuDNN attention at 90% are not short against flash; a PCIe
    crowd at 60% is not short against the SXM crowd, nor a gap against it."""
    rows, figures = crowd(random.Random(7), sd=0.003)
    rows += [dict(job_row(r["provider"], r["host"], r["gpu_index"], "train",
                          r["tokens_per_s"] * 0.9, attention="cudnn"))
             for r in rows if r["workload"] == "train"]
    pcie, pcie_figures = crowd(random.Random(8), sd=0.003, provider="beta", variant=PCIE)
    pcie = [dict(r, tokens_per_s=r["tokens_per_s"] * 0.6, tflops=r["tflops"] * 0.6)
            for r in pcie]
    gpus = gpus_of(rows + pcie, figures + pcie_figures)
    assert len({(g.config.key, g.variant) for g in gpus if g.config.train}) == 3
    assert find_job_shortfalls(gpus) == [] and find_job_stragglers(gpus) == []
    assert compare_job_providers(gpus) == []


def test_a_provider_gap_on_the_job_is_called_as_the_matmul_gap_is() -> None:
    rng = random.Random(9)
    alpha, alpha_figures = crowd(rng, sd=0.004, hosts=3)
    beta, beta_figures = crowd(rng, sd=0.004, hosts=3, provider="beta")
    beta = [dict(r, tokens_per_s=r["tokens_per_s"] * 0.94, temperature_c=79.0) for r in beta]
    gpus = gpus_of(alpha + beta, alpha_figures + beta_figures)
    train = [c for c in compare_job_providers(gpus, GapOptions()) if c.config.train]
    (gap,) = train
    assert (gap.slower, gap.faster, gap.systematic) == ("beta", "alpha", True)
    assert gap.gap == pytest.approx(0.06, abs=0.01)
    assert [d.what for d in gap.differences] == ["temperature under the job"]
    assert gap.evidence.startswith("training tokens/s: beta 74,")


def test_the_synchronous_figure_and_what_a_million_tokens_cost() -> None:
    """alpha: a-1 at 80,000, 80,000, 76,000, 80,000 tokens/s, a-2 four at 81,000; the
    median of the eight (80,000 + 81,000) / 2 = 80,500; counted at their node's slowest,
    four at 76,000 and four at 81,000, median 78,500. At 2.49 USD per GPU-hour a million
    tokens cost 2.49 / (80,500 x 3600) x 10^6 = 0.0085921 USD, synchronously 2.49 /
    (78,500 x 3600) x 10^6 = 0.0088110. gamma at 2.00 EUR ranks alone in EUR; beta has no
    price."""
    rows = [job_row("alpha", "a-1", i, "train", t)
            for i, t in enumerate((80_000.0, 80_000.0, 76_000.0, 80_000.0))]
    rows += [job_row("alpha", "a-2", i, "train", 81_000.0) for i in range(4)]
    rows += [job_row("beta", "b-1", i, "train", 90_000.0) for i in range(4)]
    rows += [job_row("gamma", "g-1", i, "train", 70_000.0) for i in range(4)]
    gpus, _ = job_gpus(job_frame(rows), None)
    usd = Listing({"variant": "H100 SXM5 80GB"}, 2.49, "USD", ())
    listings = {("alpha", "a-1"): usd, ("alpha", "a-2"): usd,
                ("gamma", "g-1"): Listing(None, 2.00, "EUR", ())}
    (node, _) = [s for s in job_sync_nodes(gpus) if s.provider == "alpha"]
    assert (node.host, node.slowest_gpu, node.sync_tokens_per_s) == ("a-1", 2, 304_000.0)
    assert node.loss == pytest.approx(0.05)
    assert sync_tokens_per_s([g for g in gpus if g.provider == "alpha"]) == 78_500.0

    rows_by = {r.provider: r for r in job_table(gpus, listings)}
    alpha = rows_by["alpha"]
    assert (alpha.tokens_per_s, alpha.sync_tokens_per_s) == (80_500.0, 78_500.0)
    assert alpha.cost_per_million_tokens == pytest.approx(0.0085921325, rel=1e-7)
    assert alpha.sync_cost_per_million_tokens == pytest.approx(0.0088110403, rel=1e-7)
    assert cost_per_million_tokens(2.49, 80_500.0) == pytest.approx(2.49 / 289.8)
    assert cost_per_million_tokens(None, 80_500.0) is None
    assert (alpha.rank, alpha.currency, alpha.matmul_tflops, alpha.kept) == (
        1, "USD", None, None)
    assert (rows_by["gamma"].rank, rows_by["gamma"].currency) == (1, "EUR")
    gamma_cost = rows_by["gamma"].cost_per_million_tokens
    assert gamma_cost == pytest.approx(2.00 / (70_000 * 3600) * 1e6)
    beta = rows_by["beta"]
    assert (beta.rank, beta.prices_note, beta.cost_per_million_tokens) == (
        None, "no price listed", None)
    assert [r.provider for r in job_table(gpus, listings)] == ["gamma", "alpha", "beta"]


def test_decode_states_its_share_of_the_gpus_own_memory_copy_beside_hbm() -> None:
    # Suite 1.1.0 with the node suite: each decode figure carries the share of the same
    # GPU's memory copy in the run (issue 45); the GPU's figure and the cost table's row
    # take the median over the runs, beside the datasheet's share.
    rows = []
    for run, share in ((1, 0.832), (2, 0.834), (3, 0.836)):
        row = job_row("alpha", "a-1", 0, "decode", 31_000.0, run_id=run,
                      when=WHEN + dt.timedelta(hours=run))
        row["copy_share"] = share
        rows.append(row)
    other = job_row("alpha", "a-1", 1, "decode", 31_000.0)  # no node suite in its run
    found, _ = job_gpus(job_frame([*rows, other]))
    shares = {g.gpu_index: g.copy_share for g in found}
    assert shares[0] == pytest.approx(0.834) and shares[1] is None
    # The provider's row: the median over the GPUs that measured one.
    (row,) = job_table(found, {})
    assert row.copy_share == pytest.approx(0.834) and row.hbm_share is not None


def _short_beta(**rerun: Any) -> tuple[list[JobGpu], list[Any], list[Any]]:
    """alpha healthy; beta's every training step at 40% (MFU 0.19, under the agent's
    0.30 floor), its run holding a setting that can move a job, with `rerun`'s columns."""
    rng = random.Random(11)
    alpha, alpha_figures = crowd(rng, sd=0.004, hosts=3)
    beta, beta_figures = crowd(rng, sd=0.004, hosts=3, provider="beta",
                               job_suspects="PYTORCH_NO_CUDA_MEMORY_CACHING=1 (environment)")
    beta = [dict(r, tokens_per_s=r["tokens_per_s"] * 0.4, tflops=r["tflops"] * 0.4,
                 mfu=r["mfu"] * 0.4, **rerun) if r["workload"] == "train" else r
            for r in beta]
    gpus, excluded = job_gpus(job_frame(alpha + beta), matmul_frame(alpha_figures
                                                                    + beta_figures))
    gaps = [c for c in compare_job_providers(gpus, GapOptions()) if c.config.train]
    return gpus, excluded, gaps


def test_a_job_short_under_the_renters_setting_and_whole_without_it_is_the_renters() -> None:
    gpus, excluded, gaps = _short_beta(
        rerun_tokens_per_s=79_100.0, rerun_share=0.48, rerun_floor=49_400.0,
        rerun_without="PYTORCH_NO_CUDA_MEMORY_CACHING", rerun_contended=False)
    # No provider is ranked on it: beta's every figure of those GPU-runs is left out.
    assert gaps == [] and {g.provider for g in gpus} == {"alpha"}
    beta = [e for e in excluded if e.provider == "beta"]
    assert {(e.host, e.gpu_index, e.workload) for e in beta} == {
        (f"b-{h}", i, w) for h in (1, 2, 3) for i in range(4) for w in ("train", "decode")}
    first = next(e for e in beta if (e.host, e.gpu_index, e.workload) == ("b-1", 0, "train"))
    assert re.fullmatch(
        r"the renter's: GPU 0 training step 3[12],\d{3} tokens/s \(MFU 0\.(19|20)\), under "
        r"its floor of 49,400; PYTORCH_NO_CUDA_MEMORY_CACHING=1 \(environment\): "
        r"79,100 tokens/s \(MFU 0\.48\) without it, measured again in the same run: a "
        r"setting of the run's environment costing 60%; unset it", first.reason), first.reason


def test_a_short_job_under_settings_never_measured_without_them_is_unsettled() -> None:
    gpus, excluded, gaps = _short_beta()
    assert gaps == [] and {g.provider for g in gpus} == {"alpha"}
    reasons = {e.reason for e in excluded if e.provider == "beta"}
    assert len(reasons) == 12 and all(r.startswith("unsettled: GPU ") for r in reasons)
    assert all("not measured again without them: PYTORCH_NO_CUDA_MEMORY_CACHING=1 "
               "(environment)" in r for r in reasons)
    # A rerun beside another process settles nothing either.
    _, excluded, gaps = _short_beta(
        rerun_tokens_per_s=79_100.0, rerun_share=0.48, rerun_floor=49_400.0,
        rerun_without="PYTORCH_NO_CUDA_MEMORY_CACHING", rerun_contended=True)
    assert gaps == [] and all("measured again beside another process" in e.reason
                              for e in excluded if e.provider == "beta")


def test_a_job_still_short_without_every_suspect_is_the_providers() -> None:
    gpus, excluded, gaps = _short_beta(
        rerun_tokens_per_s=31_700.0, rerun_share=0.19, rerun_floor=49_400.0,
        rerun_without="PYTORCH_NO_CUDA_MEMORY_CACHING", rerun_contended=False)
    assert [e for e in excluded if e.provider == "beta"] == []
    assert {g.provider for g in gpus} == {"alpha", "beta"}
    (gap,) = gaps
    assert (gap.slower, gap.faster, gap.systematic) == ("beta", "alpha", True)

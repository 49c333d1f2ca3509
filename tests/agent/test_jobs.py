"""The job suite (agent/job/suite.py, agent/job/transformer.py, agent/job/train_step.py,
agent/job/decode.py): the stack's counts against Llama 3 8B's published shapes, the gates
against a kernel made wrong on purpose, and the CPU path end to end as `fleet bench
--cpu --suite job` runs it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from agent.collect import collect  # noqa: E402
from agent.job import decode, train_step, transformer  # noqa: E402
from agent.job import suite as jobs  # noqa: E402
from tests.conftest import ROOT  # noqa: E402


def test_llama3_8b_layer_counts() -> None:
    # From the published config alone: q and o 4096x4096, k and v 4096x1024 (8 heads of
    # 128), three 4096x14336 MLP matrices, two norms a layer; four layers and a final norm.
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert transformer.TRAIN.params == 4 * per_layer + 4096 == 872_452_096
    dense, causal = transformer.TRAIN.train_flop_per_token()
    assert dense == 6 * 872_452_096 + 12 * 4 * 4096 * 4096
    assert causal == 6 * 872_452_096 + 6 * 4 * 4096 * 4096
    # The 79,160 tokens/s on a lent H100 is 478 TFLOP/s by this count.
    assert round(79_160 * dense / 1e12) == 478
    # Decode's bandwidth point: every bf16 weight and the 2 x 4 layers x 128 x 8192 x 8 x
    # 128 cache, once: 18.9 GB a step, the cache ten times the weights.
    cache = 2 * 4 * 128 * 8192 * 8 * 128
    assert transformer.DECODE.decode_bytes_per_step(2) == 2 * (872_452_096 + cache)
    assert transformer.DECODE_POINTS["bandwidth"] is transformer.DECODE
    latency = transformer.DECODE_POINTS["latency"]
    assert (latency.batch, latency.context) == (1, 4096)


@pytest.mark.parametrize("shape", [transformer.CPU_TRAIN, transformer.GATE])
def test_params_formula_matches_the_module(shape: transformer.Shape) -> None:
    model = transformer.Stack(shape, "cpu", torch.float32)
    assert transformer.count_parameters(model) == shape.params


def test_gates_pass_a_healthy_run() -> None:
    verdict = train_step.gate(transformer.CPU_GATE, "cpu", "math")
    assert verdict["passed"] and verdict["loss_finite"]
    # bf16 against float32 on the same weights: off, but by rounding, not by a bug.
    assert 1e-4 < verdict["grad_max_rel_error"] < train_step.TOLERANCE
    assert decode.gate(transformer.CPU_GATE_DECODE, "cpu", "math")["passed"]


def _wrong_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bf16 attention kernel whose output is 20% off: the sort of wrong a broken kernel
    or card gives, while float32 (the reference) stays right."""
    real = torch.nn.functional.scaled_dot_product_attention

    def sdpa(q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(q, k, v, *args, **kwargs)
        return out if q.dtype == torch.float32 else out * 1.2

    monkeypatch.setattr(transformer.F, "scaled_dot_product_attention", sdpa)


def test_native_gqa_is_the_expanded_attention() -> None:
    # SDPA's enable_gqa must compute what repeating the key-value heads computes: the
    # same function, without the copy (issue 45).
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, 8, 16, 32, generator=generator)
    k = torch.randn(2, 2, 16, 32, generator=generator)
    v = torch.randn(2, 2, 16, 32, generator=generator)
    native = transformer._attend(q, k, v, True, False, transformer.GQA_NATIVE)
    expanded = transformer._attend(q, k, v, True, False, transformer.GQA_EXPANDED)
    written = transformer.explicit_attention(q, k, v, True)
    assert torch.allclose(native, expanded, atol=1e-5)
    assert torch.allclose(native, written, atol=1e-5)
    # And a stack set to either way trains the same step.
    stack = transformer.Stack(transformer.CPU_GATE, "cpu", torch.float32)
    x = torch.randn(2, 16, 64, generator=generator)
    stack.gqa = transformer.GQA_EXPANDED
    out_expanded = stack(x)
    stack.gqa = transformer.GQA_NATIVE
    assert torch.allclose(stack(x), out_expanded, atol=1e-5)


def test_a_backend_the_torch_cannot_run_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # A backend that raises for the shape (torch's "No available kernel") is said and
    # skipped; one that cannot take GQA natively runs expanded, and says so.
    real = torch.nn.functional.scaled_dot_product_attention

    def sdpa(q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("enable_gqa"):
            raise RuntimeError("No available kernel. Aborting execution.")
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(transformer.F, "scaled_dot_product_attention", sdpa)
    gqa, verdict, why = train_step.gate_backend(transformer.CPU_GATE, "cpu", "math")
    assert gqa == transformer.GQA_EXPANDED and verdict is not None and verdict["passed"]
    assert why is None

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("No available kernel. Aborting execution.")

    monkeypatch.setattr(transformer.F, "scaled_dot_product_attention", broken)
    gqa, verdict, why = train_step.gate_backend(transformer.CPU_GATE, "cpu", "math")
    assert verdict is None and why is not None and "No available kernel" in why
    # The whole suite: no backend ran, so nothing is measured, and it says why.
    results, errors = jobs.run(jobs.Config.for_cpu(), [], None, lambda message: None)
    assert results == []
    assert any("no math attention on this torch" in e["message"] for e in errors)
    assert any("no attention backend ran the job's gates" in e["message"] for e in errors)


def test_the_headline_is_the_fastest_backend_of_each_workload_and_point() -> None:
    def result(workload: str, attention: str, point: str | None, rate: float
               ) -> dict[str, Any]:
        return {"workload": workload, "attention": attention, "point": point,
                "tokens_per_s": rate}

    results = [result("train", "flash", None, 80_000.0), result("train", "cudnn", None, 84_000.0),
               result("decode", "flash", "bandwidth", 30_000.0),
               result("decode", "cudnn", "bandwidth", 29_000.0),
               result("decode", "flash", "latency", 900.0),
               result("decode", "cudnn", "latency", 950.0)]
    jobs.mark_headlines(results)
    assert [(r["workload"], r["point"], r["attention"]) for r in results if r["headline"]] == [
        ("train", None, "cudnn"), ("decode", "bandwidth", "flash"),
        ("decode", "latency", "cudnn")]


def test_a_backend_is_measured_only_where_every_gpu_passed_it() -> None:
    node = jobs.Agreement()
    node.passed(0, ["flash", "cudnn", "efficient"])
    node.passed(1, ["flash", "efficient"])
    assert node.agreed(("flash", "cudnn", "efficient")) == ["flash", "efficient"]
    assert jobs.Agreement().agreed(("flash",)) == []


def test_decode_reads_its_share_of_the_same_gpus_memory_copy() -> None:
    from agent.job.share import set_copy_shares

    decoded = [{"workload": "decode", "gpu_index": 0, "gbs": 2_550.0},
               {"workload": "decode", "gpu_index": 1, "gbs": 2_500.0},
               {"workload": "train", "gpu_index": 0, "gbs": None}]
    node = [{"kind": "memory_copy", "gpu_index": 0, "gbs": 3_000.0, "contention": []},
            # Measured beside another process: not the card's figure.
            {"kind": "memory_copy", "gpu_index": 1, "gbs": 1_500.0,
             "contention": ["pid 7 (python) of user nobody"]},
            {"kind": "host_to_device", "gpu_index": 0, "gbs": 55.0, "contention": []}]
    set_copy_shares(decoded, node)
    assert decoded[0]["copy_gbs"] == 3_000.0 and decoded[0]["copy_share"] == 0.85
    assert "copy_gbs" not in decoded[1] and "copy_share" not in decoded[2]


def test_gates_fail_a_wrong_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    _wrong_attention(monkeypatch)
    verdict = train_step.gate(transformer.CPU_GATE, "cpu", "math")
    assert not verdict["passed"] and verdict["grad_max_rel_error"] > train_step.TOLERANCE
    assert not decode.gate(transformer.CPU_GATE_DECODE, "cpu", "math")["passed"]


def test_a_failed_gate_measures_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    _wrong_attention(monkeypatch)
    results, errors = jobs.run(jobs.Config.for_cpu(), [], None, lambda message: None)
    assert results == []
    assert len(errors) == 1 and errors[0]["stage"] == "job"
    assert "gate failed" in errors[0]["message"] and "tolerance 0.05" in errors[0]["message"]


def test_training_learns() -> None:
    # Not a benchmark of convergence: a step that did not update the weights (an
    # optimizer left out, gradients lost) would leave the loss where it was.
    trainer = train_step.Trainer(transformer.CPU_TRAIN, "cpu", torch.bfloat16, "math")
    losses = [float(trainer.step()) for _ in range(20)]
    assert losses[-1] < losses[0]


def test_decode_writes_its_slot_and_keeps_the_context() -> None:
    decoder = decode.Decoder(transformer.CPU_DECODE, "cpu", torch.float32, "math", graph=False)
    before = [k.clone() for k, _ in decoder.caches]
    decoder.step()
    after = [k for k, _ in decoder.caches]
    context = transformer.CPU_DECODE.context
    assert context is not None
    for old, new in zip(before, after, strict=True):
        assert torch.equal(old[:, :, : context - 1], new[:, :, : context - 1])
        assert not torch.equal(old[:, :, context - 1], new[:, :, context - 1])
    assert decoder.out is not None and decoder.out.shape == (4, 1, 64)


def test_decode_hands_gqa_over_natively_or_as_query_rows_alike() -> None:
    # The two forms differ in which kernel a GPU runs, not in what is computed: from the
    # same weights, input and cache they give the same output and write the same slots
    # (a later layer's slot to float32's rounding: it follows the earlier layers' output).
    native = decode.Decoder(transformer.CPU_DECODE, "cpu", torch.float32, "math",
                            graph=False, gqa=transformer.GQA_NATIVE)
    grouped = decode.Decoder(transformer.CPU_DECODE, "cpu", torch.float32, "math",
                             graph=False, gqa=transformer.GQA_GROUPED)
    native.step()
    grouped.step()
    assert native.out is not None and grouped.out is not None
    assert torch.allclose(native.out, grouped.out, rtol=1e-5, atol=1e-5)
    for (nk, nv), (gk, gv) in zip(native.caches, grouped.caches, strict=True):
        assert torch.allclose(nk, gk, rtol=1e-5, atol=1e-5)
        assert torch.allclose(nv, gv, rtol=1e-5, atol=1e-5)


def test_a_backend_refusing_enable_gqa_decodes_with_query_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As the memory-efficient backend refuses enable_gqa on some torches: the gate falls
    # back to the query rows instead of expanding the cache, and says so.
    real = torch.nn.functional.scaled_dot_product_attention

    def no_gqa(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("enable_gqa"):
            raise RuntimeError("No available kernel. Aborting execution.")
        out: torch.Tensor = real(*args, **kwargs)
        return out

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", no_gqa)
    form, verdict = decode.gate_backend(transformer.CPU_GATE_DECODE, "cpu", "math",
                                        torch.float32)
    assert form == transformer.GQA_GROUPED and verdict["passed"]
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", real)
    form, verdict = decode.gate_backend(transformer.CPU_GATE_DECODE, "cpu", "math",
                                        torch.float32)
    assert form == transformer.GQA_NATIVE and verdict["passed"]


def _document(tmp_path: Any, *extra: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    done = subprocess.run([sys.executable, "-m", "agent", "bench", "--cpu", "--suite", "job",
                           *extra], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300, check=True)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert any(e["event"] == "progress" and e["stage"] == "job" for e in events)
    return events[-1]["document"]


def test_cpu_path_end_to_end(tmp_path: Any) -> None:
    from fleet.model.document import parse_document

    document = _document(tmp_path)
    assert document["errors"] == [] and document["benchmarks"] == [] and document["node"] == []
    train, decoded, latency = document["jobs"]
    assert (train["workload"], decoded["workload"]) == ("train", "decode")
    assert (decoded["point"], latency["point"]) == ("bandwidth", "latency")
    assert train["follows"] is None and decoded["follows"] == "train/math"
    assert train["shape"] == transformer.CPU_TRAIN.as_dict()
    assert latency["shape"]["batch"] == 1
    # One backend on the CPU: it is every figure's headline.
    assert all(r["headline"] for r in document["jobs"])
    # The math backend takes enable_gqa: training and decode hand GQA over as it is.
    assert (train["gqa"], decoded["gqa"], latency["gqa"]) == ("native", "native", "native")
    for result in (train, decoded, latency):
        seconds = result["seconds"]
        assert result["steps"] > 0 and seconds > 0
        assert math.isclose(result["tokens_per_s"],
                            result["tokens_per_step"] * result["steps"] / seconds)
        assert math.isclose(result["tflops"],
                            result["tokens_per_s"] * result["flop_per_token"] / 1e12)
        assert result["correctness"]["passed"]
        assert result["mfu"] is None  # no datasheet peak on the CPU
    assert train["soak"]["curve"] and decoded["soak"] is None
    assert train["soak"]["warmed_s"] is None  # nothing to keep warm on the CPU
    assert decoded["gbs"] == pytest.approx(
        decoded["bytes_per_step"] * decoded["steps"] / decoded["seconds"] / 1e9)
    # The controller's own checks accept what the agent wrote.
    assert len(parse_document(document, "cpu run").jobs) == 3


def test_collect_without_a_suite_runs_none() -> None:
    # Fingerprinting (`fleet fingerprint`) must not start a minute of training.
    document = collect(probe_torch=False)
    assert document["jobs"] == [] and document["benchmarks"] == []


def test_a_job_figure_takes_the_job_spread() -> None:
    from agent.timing import repeat

    # The job's own run-to-run spread, not the matmul's (0.571% on H100 SXM5).
    spread, measured = repeat.variant_spread("H100-SXM5-80GB", ("train", "flash"))
    assert measured and spread.sd == repeat.JOB_SPREADS[("H100-SXM5-80GB", "train", "flash")].sd
    assert spread.sd != repeat.SPREADS["H100-SXM5-80GB"].sd
    # A variant or backend without records: the widest job spread, said so.
    widest, measured = repeat.variant_spread("H200-SXM-141GB", ("train", "flash"))
    assert not measured and widest.source == repeat.UNMEASURED
    assert widest.sd == max(s.sd for s in repeat.JOB_SPREADS.values())
    got = repeat.interval(74_467.0, "H100-SXM5-80GB", 0.0, job=("train", "flash"))
    assert got.low < 74_467.0 < got.high and got.basis == "variant"


def test_compiled_training_records_its_compile_time(tmp_path: Any) -> None:
    # Measured eager and, where asked, compiled. The compiled figure is its own
    # configuration, gated against float32 as the backends are, timed
    # on the card the eager load soaked, its compile time stored apart.
    from fleet.model.document import parse_document

    document = _document(tmp_path, "--job-compile")
    assert document["errors"] == []
    eager, compiled, decoded, decoded_compiled, latency, latency_compiled = document["jobs"]
    assert (eager["workload"], compiled["workload"]) == ("train", "train")
    assert not eager["compiled"] and eager["compile_s"] is None
    assert compiled["compiled"] and compiled["compile_s"] is not None
    assert compiled["compile_s"] > 0
    assert compiled["follows"] == "train/math" and compiled["soak"] is None
    assert compiled["correctness"]["passed"]
    assert compiled["correctness"]["reference"].startswith("float32, ")
    assert compiled["correctness"]["reference"].endswith("the bf16 stack compiled")
    # The faster form is the training headline, the other not.
    assert eager["headline"] != compiled["headline"]
    # Decode at each point eager and compiled (each in its own CUDA graph on a GPU), the
    # compiled step gated against float32 and its compile time stored apart.
    for point, eager_step, fast in (("bandwidth", decoded, decoded_compiled),
                                    ("latency", latency, latency_compiled)):
        assert (eager_step["point"], fast["point"]) == (point, point)
        assert not eager_step["compiled"] and eager_step["compile_s"] is None
        assert fast["compiled"] and fast["compile_s"] > 0
        assert fast["workload"] == "decode" and fast["follows"] == "train/math"
        assert fast["correctness"]["passed"]
        assert fast["correctness"]["reference"].endswith("the bf16 step compiled")
        assert eager_step["headline"] != fast["headline"]
    assert len(parse_document(document, "cpu run").jobs) == 6


def test_the_node_compiles_with_its_fastest_eager_backend() -> None:
    # One backend for every GPU (tracing sets torch's process-wide switch): the one
    # fastest on the most GPUs, ties to the larger sum, then to the suite's order.
    node = jobs.Agreement()
    assert node.fastest(("flash", "cudnn")) is None
    node.measured(0, {"flash": 80_000.0, "cudnn": 84_000.0, "efficient": 67_000.0})
    node.measured(1, {"flash": 80_500.0, "cudnn": 84_100.0, "efficient": 67_000.0})
    node.measured(2, {"flash": 85_000.0, "cudnn": 84_000.0, "efficient": 67_000.0})
    assert node.fastest(("flash", "cudnn", "efficient")) == "cudnn"
    tie = jobs.Agreement()
    tie.measured(0, {"flash": 80_000.0, "cudnn": 84_000.0})
    tie.measured(1, {"flash": 88_000.0, "cudnn": 83_000.0})
    assert tie.fastest(("flash", "cudnn")) == "flash"
    # Decode's points are chosen by their own figures, not the training step's.
    node.measured(0, {"flash": 1_200.0, "cudnn": 1_380.0}, "latency")
    node.measured(1, {"flash": 1_250.0, "cudnn": 1_100.0}, "latency")
    node.measured(2, {"flash": 1_260.0, "cudnn": 1_100.0}, "latency")
    assert node.fastest(("flash", "cudnn"), "latency") == "flash"
    assert node.fastest(("flash", "cudnn"), "bandwidth") is None
    assert node.fastest(("flash", "cudnn", "efficient")) == "cudnn"


def test_compile_caches_go_beside_the_zipapp(monkeypatch: pytest.MonkeyPatch) -> None:
    # Kept between runs in fleet's own cache directory on the host, unless the run's
    # environment names one; from a source tree, torch's default.
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    inside = "/home/u/.cache/fleet/agent-0123456789abcdef.pyz/agent/job/suite.py"
    assert jobs.compile_cache_dir(inside) == "/home/u/.cache/fleet/torchinductor"
    assert jobs.compile_cache_dir(str(ROOT / "agent" / "job" / "suite.py")) is None
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/scratch/inductor")
    assert jobs.compile_cache_dir(inside) == "/scratch/inductor"


def test_the_job_follows_the_matmul_before_the_node_suite(h100_recording: Any) -> None:
    # Behind the node suite the cards had cooled 22-24 C and took 50-80 s to soak again
    # (agent/collect.py): the job must come straight after the matmul.
    from agent.matmul.harness import Config as HarnessConfig
    from agent.node.suite import Config as NodeConfig

    events: list[dict[str, Any]] = []
    bench = HarnessConfig(device="cpu", m=64, n=64, k=64, protocol="quick", measure_s=0.2,
                          max_warmup_s=0.3, max_total_s=1.0)
    document = collect(str(h100_recording), probe_torch=False, emit=events.append,
                       bench=bench, node=NodeConfig.for_cpu(), job=jobs.Config.for_cpu())
    stages = [e["stage"] for e in events if e["stage"] in ("benchmark", "node", "job")]
    order = [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s]
    assert order == ["benchmark", "job", "node"], stages
    assert document["benchmarks"] and document["jobs"] and document["node"]
    # The node suite's reading after load still covers the whole run.
    assert document["gpus"][0]["health"]["pcie_replays_during_run"] == 0


def test_a_lent_4x_h100_held_at_load_soaked_at_the_first_judgement() -> None:
    # bench/records/2026-11-27-h100x4-jobs-warm: the agent as committed, --suite all.
    import gzip

    from fleet.model.document import parse_document

    path = ROOT / "bench/records/2026-11-27-h100x4-jobs-warm/all-1.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = [json.loads(line) for line in fh]
    stages = [e["stage"] for e in events if e.get("stage") in ("benchmark", "job", "node")]
    assert stages.index("job") < stages.index("node") and stages[-1] == "node"
    document = parse_document(events[-1]["document"], str(path))
    trains = [j for j in document.jobs if j.workload == "train" and j.follows is None]
    assert len(trains) == 4
    for job in trains:
        assert job.soak is not None and job.soak.soaked and not job.flags.not_soaked
        assert job.soak.warmed_s is not None and job.soak.warmed_s > 5
        assert job.soak.settled_s is not None and job.soak.settled_s < 32


@pytest.mark.parametrize("protocol", ["soaked", "quick"])
def test_the_job_soaks_by_the_shorter_span_only_after_a_soaked_matmul(
        h100_recording: Any, protocol: str) -> None:
    # bench/job_soak_span.py: 15 s suffices once a soaked matmul has heated the card;
    # after a cool-start matmul (or none) the card may still be heating: the full span.
    from dataclasses import replace

    from agent.matmul.harness import Config as HarnessConfig

    bench = HarnessConfig(device="cpu", m=64, n=64, k=64, protocol=protocol,
                          measure_s=0.2, max_warmup_s=0.3, max_total_s=1.0,
                          soak_window_s=0.05, soak_span_s=0.2, soak_cap_s=0.5,
                          soak_first_s=0.1)
    cfg = replace(jobs.Config.for_cpu(), span_s=1.0, warm_span_s=0.8)
    document = collect(str(h100_recording), probe_torch=False, bench=bench, job=cfg)
    assert document["benchmarks"], document["errors"]
    train = next(j for j in document["jobs"] if j["workload"] == "train")
    assert train["soak"]["span_s"] == (0.8 if protocol == "soaked" else 1.0)
    assert jobs.Config().after_matmul().span_s == 15.0 < jobs.Config().span_s


def test_a_decode_point_that_fails_leaves_training_and_the_other_point(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Under PYTORCH_NO_CUDA_MEMORY_CACHING=1 no CUDA graph can be captured: that must not
    # take the GPU's training figure with it (nor keep the node's other GPUs waiting).
    from agent.job import decode

    real = decode.Decoder.__init__

    def refusing(self: Any, shape: Any, *args: Any, **kwargs: Any) -> None:
        if shape.batch == 1:
            raise RuntimeError("operation not permitted when stream is capturing")
        real(self, shape, *args, **kwargs)

    monkeypatch.setattr(decode.Decoder, "__init__", refusing)
    results, errors = jobs.run(jobs.Config.for_cpu(), [], None, lambda message: None)
    assert [(r["workload"], r.get("point")) for r in results] == [
        ("train", None), ("decode", "bandwidth")]
    assert all(r["headline"] for r in results)
    [error] = errors
    assert "decode at the latency point failed (RuntimeError: operation not permitted " \
           "when stream is capturing); its training figure and the other decode point " \
           "stand" in error["message"]


def test_a_threads_backend_is_its_own() -> None:
    # The node's GPUs run in threads of one process, and torch's backend switch is
    # process-wide: a thread entering and leaving a backend must never leave another
    # thread's calls under it (on a lent 2x H100 a cuDNN step once found the switch set
    # for a backend that refused its shape). Here one thread keeps asking for the
    # efficient backend, which has no CPU kernel, while another attends with math.
    import threading

    import torch.nn.functional as F

    q = torch.randn(1, 2, 8, 16)
    k = torch.randn(1, 2, 8, 16)
    flags = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled(),
             torch.backends.cuda.mem_efficient_sdp_enabled())
    with transformer.attention_backend("efficient"), pytest.raises(RuntimeError):
        transformer.sdpa(q, k, k)  # the efficient backend truly refuses on the CPU
    stop = threading.Event()
    failures: list[str] = []

    def switcher() -> None:
        while not stop.is_set():
            with transformer.attention_backend("efficient"):
                pass

    def attender() -> None:
        want = F.scaled_dot_product_attention(q, k, k)
        for _ in range(3000):
            with transformer.attention_backend("math"):
                try:
                    got = transformer.sdpa(q, k, k)
                except RuntimeError as exc:
                    failures.append(str(exc))
                    return
            if not torch.allclose(got, want, atol=1e-5):
                failures.append("a wrong result")
                return

    threads = [threading.Thread(target=switcher), threading.Thread(target=attender)]
    for thread in threads:
        thread.start()
    threads[1].join()
    stop.set()
    threads[0].join()
    assert failures == []
    # And the process-wide switch is as it was.
    assert (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled(),
            torch.backends.cuda.mem_efficient_sdp_enabled()) == flags

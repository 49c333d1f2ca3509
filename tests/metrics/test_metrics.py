"""`fleet metrics` over a store filled by ingesting the lent nodes' real documents (a 4x H200
SXM node with the matmul and the node suite, a 2x H100 SXM5 with the job suite and one
degraded card), on SQLite and PostgreSQL, read back by prometheus_client's own parsers."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as text_families

import fleet
from fleet.findings.kinds import FINDING_KINDS
from fleet.metrics import MAX_LABEL, SIDES, metrics_text
from tests.conftest import FIXTURES, ROOT, fleet_in_process

NODE = FIXTURES / "nodes" / "h200-sxm-x4-lent" / "document.json"
JOBS = FIXTURES / "jobs" / "h100x2-lent" / "document.json"
# What a host may send and an inventory may name: quotes, a newline, a backslash.
HOSTNAME = 'gpu"01\nrack 7\\b'
PROVIDER = 'lent "cloud"'
LONG_HOST = "h" * 200
DCGM = ("gpu", "UUID", "modelName", "Hostname")
EMITTED = {
    "fleet_gpu_info", "fleet_host_collected_timestamp_seconds",
    "fleet_gpu_matmul_flops_per_second", "fleet_gpu_matmul_repeat_low_flops_per_second",
    "fleet_gpu_matmul_repeat_high_flops_per_second",
    "fleet_gpu_memory_copy_bytes_per_second", "fleet_gpu_host_copy_bytes_per_second",
    "fleet_gpu_peer_copy_bytes_per_second", "fleet_node_allreduce_bus_bytes_per_second",
    "fleet_node_allreduce_size_bytes", "fleet_gpu_job_tokens_per_second",
    "fleet_gpu_health", "fleet_gpu_health_action", "fleet_not_measured",
    "fleet_open_findings", "fleet_host_limit", "fleet_host_software_info",
    "fleet_storage_bytes_per_second", "fleet_storage_small_files_per_second"}

Samples = dict[str, list[tuple[dict[str, str], float]]]


def fill(url: str, tmp_path: Path) -> None:
    """The two real documents, the H200 node's hostname edited to what a hostile or careless
    host could report (the document model allows it)."""
    data = json.loads(NODE.read_text())
    data["host"]["hostname"] = HOSTNAME
    node = tmp_path / "node.json"
    node.write_text(json.dumps(data))
    with fleet.Store(url) as store:
        assert store.ingest([node], provider=PROVIDER, host="h200x4")["stored"] == 1
        assert store.ingest([JOBS], provider="other", host=LONG_HOST)["stored"] == 1


def parsed(text: str) -> Samples:
    assert text.endswith("# EOF\n")
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        found[family.name] = [(dict(s.labels), s.value) for s in family.samples]
    return found


def one(samples: Samples, name: str, **labels: str) -> float:
    matches = [v for got, v in samples[name] if all(got.get(k) == w for k, w in labels.items())]
    assert len(matches) == 1, (name, labels, samples[name])
    return matches[0]


@pytest.fixture
def filled(store_url: str, tmp_path: Path) -> str:
    fill(store_url, tmp_path)
    return store_url


def test_the_real_documents_come_out_as_their_figures_in_base_units(filled: str) -> None:
    with fleet.Store(filled) as store:
        text = metrics_text(store)
        results = store.results()
    samples = parsed(text)
    assert set(samples) == EMITTED
    node = json.loads(NODE.read_text())
    uuids = {g["index"]: g["uuid"] for g in node["gpus"]}
    # Soaked matmul, TFLOP/s in the store, FLOP/s out, with its repeat interval.
    for row in results.itertuples():
        labels = {"provider": PROVIDER, "gpu": str(row.gpu_index), "UUID": uuids[row.gpu_index],
                  "dtype": "bf16", "shape": "8192x8192x8192"}
        assert one(samples, "fleet_gpu_matmul_flops_per_second", **labels) == pytest.approx(
            row.tflops * 1e12, rel=1e-12)
        low = one(samples, "fleet_gpu_matmul_repeat_low_flops_per_second", **labels)
        high = one(samples, "fleet_gpu_matmul_repeat_high_flops_per_second", **labels)
        assert low < row.tflops * 1e12 < high
        assert low == pytest.approx(row.repeat_low_tflops * 1e12, rel=1e-12)
    assert one(samples, "fleet_gpu_matmul_flops_per_second", gpu="0") == pytest.approx(
        663.159211e12, rel=1e-8)
    # The node suite as the lent node measured it (bench/RESULTS.md, "The whole node").
    assert one(samples, "fleet_gpu_memory_copy_bytes_per_second", gpu="0",
               provider=PROVIDER) == pytest.approx(4219.887e9)
    assert len(samples["fleet_gpu_host_copy_bytes_per_second"]) == 16  # 4 GPUs x 2 x 2
    assert one(samples, "fleet_gpu_host_copy_bytes_per_second", gpu="0",
               direction="host_to_device", memory="pinned") == pytest.approx(54.533e9)
    assert len(samples["fleet_gpu_peer_copy_bytes_per_second"]) == 12  # 6 pairs x 2
    assert one(samples, "fleet_gpu_peer_copy_bytes_per_second", gpu="0", peer="1",
               direction="one_way", peer_UUID=uuids[1]) == pytest.approx(393.69e9)
    # The all-reduce at its largest size (1 GiB), not its first.
    reduce = {"host": "h200x4", "gpus": "4", "backend": "nccl", "dtype": "bf16"}
    assert one(samples, "fleet_node_allreduce_bus_bytes_per_second", **reduce) == \
        pytest.approx(352.642e9)
    assert one(samples, "fleet_node_allreduce_size_bytes", **reduce) == 2 ** 30
    # The job suite's headline rows only: flash (its headline), not the cuDNN training.
    jobs = json.loads(JOBS.read_text())
    sent = {(j["gpu_index"], j["workload"]): j["tokens_per_s"] for j in jobs["jobs"]
            if j["attention"] == "flash"}
    tokens = samples["fleet_gpu_job_tokens_per_second"]
    assert {(labels["gpu"], labels["workload"], labels["backend"]) for labels, _ in tokens} \
        == {(str(g), w, "flash") for g, w in sent}
    for labels, value in tokens:
        assert value == pytest.approx(sent[(int(labels["gpu"]), labels["workload"])])
        assert labels["model"] == "llama3-8b" and labels["modelName"] == "NVIDIA H100 80GB HBM3"


def test_health_is_one_verdict_per_gpu_and_the_degraded_card_is_an_open_finding(
        filled: str) -> None:
    with fleet.Store(filled) as store:
        samples = parsed(metrics_text(store))
    verdicts: dict[tuple[str, str], list[str]] = {}
    for labels, value in samples["fleet_gpu_health"]:
        assert value in (0.0, 1.0)
        if value:
            verdicts.setdefault((labels["host"], labels["gpu"]), []).append(labels["verdict"])
    host = LONG_HOST[:MAX_LABEL]
    assert verdicts == {("h200x4", "0"): ["healthy"], ("h200x4", "1"): ["healthy"],
                        ("h200x4", "2"): ["healthy"], ("h200x4", "3"): ["healthy"],
                        (host, "0"): ["healthy"], (host, "1"): ["degraded"]}
    assert one(samples, "fleet_gpu_health_action", host=host, gpu="1", action="none") == 1
    # The H200 node's agent predates health actions.
    assert one(samples, "fleet_gpu_health_action", host="h200x4", gpu="0",
               action="unknown") == 1
    findings = samples["fleet_open_findings"]
    # Every kind x side x provider, zeros included, so that a finding can be seen to go;
    # not `regression`, which the sweep's history counts per night, with no side.
    assert len(findings) == (len(FINDING_KINDS) - 1) * len(SIDES) * 2
    assert "regression" not in {labels["kind"] for labels, _ in findings}
    assert {labels["provider"] for labels, _ in findings} == {PROVIDER, "other"}
    assert [labels for labels, v in findings if v] == [
        {"kind": "health", "side": "provider", "provider": "other"}]
    assert one(samples, "fleet_open_findings", kind="health", side="provider",
               provider="other") == 1


def test_what_hosts_sent_comes_out_escaped_bounded_and_finite(filled: str) -> None:
    with fleet.Store(filled) as store:
        text = metrics_text(store)
    # The newline went out escaped: no line of the text is a piece of the hostname.
    assert "\nrack 7" not in text and 'Hostname="gpu\\"01\\nrack 7\\\\b"' in text
    samples = parsed(text)
    for name, series in samples.items():
        for labels, value in series:
            assert math.isfinite(value), (name, labels)
            assert all(len(v) <= MAX_LABEL for v in labels.values()), (name, labels)
            if name.startswith("fleet_gpu_"):
                assert set(DCGM) <= set(labels) and labels["provider"], (name, labels)
                assert labels["UUID"].startswith("GPU-")
    hostnames = {labels["Hostname"] for labels, _ in samples["fleet_gpu_info"]}
    # The H100 node's agent reported "vm"; dcgm-exporter on it would say the same.
    assert hostnames == {HOSTNAME, "vm"}
    assert {labels["host"] for labels, _ in samples["fleet_gpu_info"]} == {
        "h200x4", LONG_HOST[:MAX_LABEL]}


def test_the_text_format_holds_the_same_series(filled: str) -> None:
    """What node_exporter's textfile collector and the pushgateway read, by the library's
    parser of that format."""
    with fleet.Store(filled) as store:
        om, text = parsed(metrics_text(store)), metrics_text(store, fmt="text")
    assert "# EOF" not in text and "# UNIT" not in text
    flat: Samples = {}
    for family in text_families(text):
        for sample in family.samples:
            flat.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    # A family without a series has no sample in the text format to be read back by.
    assert flat == {name: series for name, series in om.items() if series}


def fleet_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`fleet ARGS` in this process (tests/conftest.py): each answers at once."""
    code, out, err = fleet_in_process(args, dict(os.environ), ROOT)
    return subprocess.CompletedProcess(["fleet", *args], code, out, err)


def test_fleet_metrics_prints_and_writes_a_file(filled: str, tmp_path: Path) -> None:
    done = fleet_cli("metrics", "--db", filled)
    assert done.returncode == 0, done.stderr
    printed = parsed(done.stdout)
    target = tmp_path / "out" / "fleet.txt"
    target.parent.mkdir()
    done = fleet_cli("metrics", "--db", filled, "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert f"written to {target}" in done.stderr
    assert parsed(target.read_text()) == printed
    assert [p.name for p in target.parent.iterdir()] == ["fleet.txt"]  # no partial left
    assert target.stat().st_mode & 0o444 == 0o444  # node_exporter may be another user


@pytest.mark.parametrize(("args", "said"), [
    (["-o", "/nonexistent/fleet.prom"], "the directory /nonexistent does not exist"),
    (["--sweep", "nightly"], "--sweep nightly: no run of that sweep is stored"),
])
def test_fleet_metrics_refuses_what_it_cannot_do_with_the_way_out(
        filled: str, args: list[str], said: str) -> None:
    done = fleet_cli("metrics", "--db", filled, *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr


def test_a_mistyped_db_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    # An empty store made on the spot would print a valid, empty fleet: "all well".
    missing = tmp_path / "no-such-dir" / "fleet.db"
    done = fleet_cli("metrics", "--db", str(missing))
    assert done.returncode == 2 and "no fleet database at" in done.stderr, done.stderr
    assert not missing.parent.exists()


def test_an_unknown_sweep_names_the_stored_ones(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    stored = fleet_cli("ingest", "--db", db, "--provider", "lent", "--sweep", "nightly",
                       str(NODE))
    assert stored.returncode == 0, stored.stderr
    done = fleet_cli("metrics", "--db", db, "--sweep", "weekly")
    assert done.returncode == 2 and "the stored sweeps are nightly" in done.stderr, done.stderr


def test_an_empty_store_gives_valid_metrics_without_series(tmp_path: Path) -> None:
    with fleet.Store(f"sqlite:///{tmp_path / 'fleet.db'}") as store:
        samples = parsed(metrics_text(store))
    assert set(samples) == EMITTED
    assert all(not series for series in samples.values())


def test_help_shows_real_examples() -> None:
    done = fleet_cli("metrics", "--help")
    assert done.returncode == 0 and "Examples:" in done.stdout
    assert "fleet metrics --format text | curl --data-binary @-" in done.stdout
    done = fleet_cli("sweep", "--help")
    assert "--textfile /var/lib/node_exporter/textfile/fleet.prom" in done.stdout


def test_nothing_personal_or_secret_goes_out(filled: str) -> None:
    # Serials, the agent's user and the store's URL stay in the store: a metrics endpoint
    # is read by more people than the report.
    with fleet.Store(filled) as store:
        text = metrics_text(store)
    node = json.loads(NODE.read_text())
    serials = [g["serial"] for g in node["gpus"] if g.get("serial")]
    assert serials and not any(serial in text for serial in serials)
    assert f'"{node["host"]["user"]}"' not in text and "user=" not in text
    assert "pid" not in text and filled not in text

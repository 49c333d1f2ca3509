"""`fleet fingerprint` as a user runs it: the real command, its output and exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GPU_CASES, ROOT

REQUIRED = {"name", "pci_device_id", "uuid", "driver_version", "cuda_driver_version",
            "power_limit_w", "power_limit_default_w", "power_limit_min_w", "power_limit_max_w",
            "max_sm_clock_mhz", "virtualization_mode", "mig_enabled", "variant"}


def fleet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleet", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120, env=env or dict(os.environ),
                          check=False)


@pytest.mark.parametrize("source", ["nvidia-smi-q.xml", "nvidia-smi-q.txt", "nvml-recording.json"])
def test_json_lists_one_object_per_gpu_for_every_input_form(source: str) -> None:
    proc = fleet("fingerprint", "--json", str(GPU_CASES / "h200-sxm-x2-passthrough" / source))
    assert proc.returncode == 0, proc.stderr
    gpus = json.loads(proc.stdout)
    assert len(gpus) == 2
    for gpu in gpus:
        assert set(gpu) >= REQUIRED
        assert gpu["pci_device_id"] == "0x233510DE"
        variant = gpu["variant"]
        # Found by PCI id from every input form, not guessed from the name, and carrying
        # NVIDIA's H200 SXM datasheet figures (dense, without sparsity).
        assert (variant["matched_by"], variant["vgpu_profile"]) == ("pci_id", None)
        assert {k: v for k, v in variant["datasheet"].items() if k != "source"} == {
            "default_power_w": 700.0, "max_sm_clock_mhz": 1980, "memory_bandwidth_gbs": 4800.0,
            "peak_tflops": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0, "tf32": 495.0}}
        assert (gpu["variant"]["family"], gpu["variant"]["memory_gb"],
                gpu["variant"]["form_factor"], gpu["variant"]["label"]) == (
            "H200", 141, "SXM", "H200-SXM-141GB")
        assert gpu["power_limit_w"] == 700.0 and gpu["virtualization_mode"] == "passthrough"


def test_table_shows_variant_and_verdicts() -> None:
    proc = fleet("fingerprint", str(GPU_CASES / "provider-c-grid-a100d-80c/nvml-recording.json"))
    assert proc.returncode == 0, proc.stderr
    assert "A100D-80C" in proc.stdout and "vgpu" in proc.stdout
    assert "May the tenant change it?" in proc.stdout


def test_health_verdicts_and_their_reasons_read_in_80_columns() -> None:
    proc = fleet("fingerprint", str(GPU_CASES / "v100-sxm2-retired-pages/nvidia-smi-q.txt"),
                 env=dict(os.environ, COLUMNS="80"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if "degraded" in line and "pages 2+1" in line)
    assert row.split("│")[3].strip() == "0/1"  # uncorrectable since boot / in its life
    # The reasons go under the table, one line (wrapped at 80) each.
    text = " ".join(line.strip() for line in lines)
    assert ("GPU 0 degraded: 1 uncorrectable ECC error in the card's life, none since the "
            "driver loaded") in text
    assert "GPU 0 degraded: 1 page retired for double-bit errors" in text


def test_replay_through_the_environment_variable() -> None:
    env = dict(os.environ, FLEET_NVML_REPLAY=str(GPU_CASES / "old-driver-v100/nvml-recording.json"))
    proc = fleet("fingerprint", "--json", "--no-torch", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["variant"]["label"] == "V100-SXM2-32GB"


def test_a_machine_without_a_gpu_says_so_shows_host_facts_and_exits_0() -> None:
    env = {k: v for k, v in os.environ.items() if k != "FLEET_NVML_REPLAY"}
    env["PATH"] = "/nonexistent"  # no nvidia-smi either
    proc = subprocess.run([sys.executable, "-S", "-m", "agent", "fingerprint", "--no-torch"],
                          cwd=ROOT, text=True, capture_output=True, env=env, timeout=60,
                          check=False)
    assert proc.returncode == 0
    document = json.loads(proc.stdout.splitlines()[-1])["document"]
    assert document["gpus"] == [] and "pynvml" in document["no_gpu_reason"]
    assert document["host"]["hostname"]
    # Through the controller too (pynvml is installed there, but no driver is: this machine
    # and CI's have no GPU).
    shown = fleet("fingerprint", "--no-torch", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "No NVIDIA GPU" in shown.stdout and "kernel" in shown.stdout


@pytest.mark.parametrize("content, expected", [
    ("", "empty"),
    ("hello, world\n", "nvidia-smi"),
    ('{"format": "something/9"}', "something/9"),
])
def test_bad_sources_exit_2_naming_the_file(tmp_path: Path, content: str, expected: str) -> None:
    bad = tmp_path / "gpu.txt"
    bad.write_text(content)
    proc = fleet("fingerprint", str(bad))
    assert proc.returncode == 2
    assert str(bad) in proc.stderr
    assert expected in proc.stderr


def test_a_missing_file_exits_2_and_says_what_is_accepted(tmp_path: Path) -> None:
    proc = fleet("fingerprint", str(tmp_path / "nope.xml"))
    assert proc.returncode == 2
    assert "no such file" in proc.stderr and "nvidia-smi -q -x" in proc.stderr


def test_hostile_strings_are_shown_as_text(tmp_path: Path) -> None:
    """A GPU name holding markup and terminal escapes is printed inert."""
    recording = json.loads((GPU_CASES / "h100-sxm5-passthrough/nvml-recording.json").read_text())
    recording["devices"][0]["nvmlDeviceGetName"] = "[red]H100[/red]\x1b]0;owned\x07"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(recording))
    proc = fleet("fingerprint", str(path), env=dict(os.environ, COLUMNS="400"))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout
    assert "[red]H100[/red]\\x1b]0;owned\\x07" in proc.stdout

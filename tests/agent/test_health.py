"""The health counters and the verdict drawn from them (agent/health/card.py, issue #30).

Every expected figure and sentence is written out by hand from the rule in
agent/health/card.py's RULE, never recomputed with the code under test. NVML answers come from
`ReplayNvml` over recordings written here, the backend every fixture replays through.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agent.health import card as health
from agent.source.nvml import Handle, ReplayNvml
from fleet.model.document import Health

ROOT = Path(__file__).resolve().parents[2]
NS = {"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}
ZERO_ECC = {"corrected_volatile": 0, "uncorrected_volatile": 0, "corrected_aggregate": 0,
            "uncorrected_aggregate": 0, "by_location": {}}
CLEAN_ROWS = {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}


def counters(**changes: Any) -> dict[str, Any]:
    """An Ampere-or-later card with nothing wrong, with `changes` made."""
    base: dict[str, Any] = {
        "ecc": dict(ZERO_ECC), "remapped_rows": dict(CLEAN_ROWS), "retired_pages": None,
        "pcie_replays": 0, "pcie_replays_during_run": None, "pcie_gen_load": None,
        "pcie_width_load": None, "throttle_ns": {}, "energy_mj": None, "xid": None,
    }
    base.update(changes)
    return base


def rows(**changes: Any) -> dict[str, Any]:
    return {**CLEAN_ROWS, **changes}


def ecc(**changes: Any) -> dict[str, Any]:
    return {**ZERO_ECC, **changes}


def pages(single: int | None, double: int | None, pending: bool | None) -> dict[str, Any]:
    return {"single_bit": single, "double_bit": double, "pending": pending}


# --- the rule, counter by counter ------------------------------------------------------

@pytest.mark.parametrize(("health", "verdict", "reasons"), [
    (counters(), "healthy", []),
    # Issue 36: a pending remap waits for a reset and unaffected work goes on (NVIDIA's
    # error-recovery flags; DCGM does not fail on it): degraded, ask for a reset.
    (counters(remapped_rows=rows(pending=True)), "degraded",
     ["a row remap is pending: it takes effect only when the GPU is reset"]),
    (counters(remapped_rows=rows(failure=True)), "failing",
     ["a row remapping failed: no spare row was left"]),
    (counters(ecc=ecc(uncorrected_volatile=2, uncorrected_aggregate=2)), "failing",
     ["2 uncorrectable ECC errors since the driver loaded"]),
    (counters(ecc=ecc(uncorrected_volatile=1, uncorrected_aggregate=1)), "failing",
     ["1 uncorrectable ECC error since the driver loaded"]),
    # Corrected errors alone are ECC doing its work.
    (counters(ecc=ecc(corrected_volatile=177, corrected_aggregate=177)), "healthy", []),
    (counters(ecc=ecc(uncorrected_aggregate=3)), "degraded",
     ["3 uncorrectable ECC errors in the card's life, none since the driver loaded"]),
    (counters(remapped_rows=rows(uncorrectable=1)), "degraded",
     ["1 row remapped for uncorrectable errors"]),
    (counters(remapped_rows=rows(correctable=127)), "healthy", []),
    (counters(remapped_rows=rows(correctable=128)), "degraded",
     ["128 remapped rows of 512 spares"]),
    (counters(remapped_rows=rows(correctable=100, uncorrectable=30)), "degraded",
     ["30 rows remapped for uncorrectable errors", "130 remapped rows of 512 spares"]),
    # A pending remap after an uncorrectable error: the pending first, the history after.
    (counters(remapped_rows=rows(uncorrectable=1, pending=True)), "degraded",
     ["a row remap is pending: it takes effect only when the GPU is reset",
      "1 row remapped for uncorrectable errors"]),
], ids=["clean", "remap-pending", "remap-failure", "uncorrectable-2", "uncorrectable-1",
        "corrected-only", "aggregate-only", "uncorrectable-remap", "127-remaps", "128-remaps",
        "130-remaps", "pending-after-uncorrectable"])
def test_ampere_and_later(health: dict[str, Any], verdict: str, reasons: list[str]) -> None:
    assert health_verdict(health) == (verdict, reasons)


@pytest.mark.parametrize(("retired", "verdict", "reasons"), [
    (pages(2, 0, False), "healthy", []),
    (pages(15, 0, False), "healthy", []),
    (pages(16, 0, False), "degraded", ["16 retired pages of 64"]),
    (pages(2, 1, False), "degraded", ["1 page retired for double-bit errors"]),
    # Issue 36: pending until a reset, as DCGM warns (not fails): degraded.
    (pages(0, 1, True), "degraded", ["a page retirement is pending until the GPU is reset",
                                     "1 page retired for double-bit errors"]),
    (pages(60, 4, False), "failing", ["64 retired pages: the table is full at 63 (DCGM)",
                                      "4 pages retired for double-bit errors"]),
    # DCGM_LIMIT_MAX_RETIRED_PAGES = 63: full one page before NVIDIA's 64.
    (pages(63, 0, False), "failing", ["63 retired pages: the table is full at 63 (DCGM)"]),
], ids=["two-single-bit", "15-pages", "16-pages", "one-double-bit", "pending", "table-full",
        "63-pages"])
def test_before_ampere(retired: dict[str, Any], verdict: str, reasons: list[str]) -> None:
    health = counters(remapped_rows=None, retired_pages=retired)
    assert health_verdict(health) == (verdict, reasons)


def health_verdict(counts: dict[str, Any]) -> tuple[str, list[str]]:
    return health.judge(counts)


NO_ECC = "the driver did not answer the uncorrectable ECC count since it loaded"
NO_REPAIRS = "the driver answered neither remapped rows nor retired pages"


@pytest.mark.parametrize(("health", "reasons"), [
    (counters(ecc=None, remapped_rows=None, pcie_replays=None), [NO_ECC, NO_REPAIRS]),
    # A vGPU guest: replays readable, nothing of the memory.
    (counters(ecc=None, remapped_rows=None, pcie_replays=0), [NO_ECC, NO_REPAIRS]),
    (counters(ecc=None), [NO_ECC]),
    (counters(remapped_rows=None), [NO_REPAIRS]),
    # Retired pages with a pending flag but no counts prove nothing.
    (counters(remapped_rows=None, retired_pages=pages(None, None, False)), [NO_REPAIRS]),
    (counters(ecc=ecc(uncorrected_volatile=None)), [NO_ECC]),
], ids=["nothing", "vgpu-guest", "no-ecc", "no-repairs", "pending-flag-only",
        "aggregate-only-read"])
def test_what_the_driver_did_not_tell_is_unknown_never_healthy(
        health: dict[str, Any], reasons: list[str]) -> None:
    assert health_verdict(health) == ("unknown", reasons)


def test_a_decisive_counter_decides_even_when_others_are_not_known() -> None:
    assert health_verdict(counters(ecc=None, remapped_rows=rows(failure=True))) == (
        "failing", ["a row remapping failed: no spare row was left"])
    assert health_verdict(counters(ecc=None, remapped_rows=rows(uncorrectable=2))) == (
        "degraded", ["2 rows remapped for uncorrectable errors"])


def test_throttle_energy_xid_and_replays_at_rest_are_reported_not_judged() -> None:
    noisy = counters(pcie_replays=4000, throttle_ns={"power": 29_259_889_000, "thermal": 10**12},
                     energy_mj=913_377_120,
                     xid={"readable": True, "note": "dmesg", "events": ["NVRM: Xid (PCI:...)"]})
    assert health_verdict(noisy) == ("healthy", [])


@pytest.mark.parametrize(("changes", "maxima", "verdict", "reasons"), [
    ({"pcie_replays_during_run": 0}, (5, 16), "healthy", []),
    # Issue 36: a rate over the run against DCGM's (31 a minute at Gen5 x16), not any rise.
    ({"pcie_replays_during_run": 12, "run_seconds": 60.0}, (5, 16), "healthy", []),
    ({"pcie_replays_during_run": 31, "run_seconds": 60.0}, (5, 16), "healthy", []),
    ({"pcie_replays_during_run": 64, "run_seconds": 120.0}, (5, 16), "degraded",
     ["the PCIe replay counter rose 32 a minute during the run (DCGM warns above 31)"]),
    # Gen4 x8 under load: ceil(0.96 x 8) = 8 a minute.
    ({"pcie_replays_during_run": 9, "run_seconds": 60.0, "pcie_gen_load": 4,
      "pcie_width_load": 8}, (4, 8), "degraded",
     ["the PCIe replay counter rose 9 a minute during the run (DCGM warns above 8)"]),
    # Without the span, a rise is reported, not judged.
    ({"pcie_replays_during_run": 500}, (5, 16), "healthy", []),
    ({"pcie_gen_load": 5, "pcie_width_load": 16}, (5, 16), "healthy", []),
    ({"pcie_gen_load": 4, "pcie_width_load": 16}, (5, 16), "degraded",
     ["the host link ran at Gen4 under load; the card and slot support Gen5"]),
    ({"pcie_gen_load": 5, "pcie_width_load": 8}, (5, 16), "degraded",
     ["the host link ran at x8 under load; the card and slot support x16"]),
    # Without the maxima, or without a reading under load, the link is not judged.
    ({"pcie_gen_load": 1, "pcie_width_load": 1}, (None, None), "healthy", []),
    ({"pcie_gen_load": None, "pcie_width_load": None}, (5, 16), "healthy", []),
], ids=["no-replays", "replays-below-rate", "replays-at-rate", "replays-above-rate",
        "gen4-x8-rate", "no-span", "full-link", "gen4-of-5", "x8-of-16", "no-maxima",
        "not-under-load"])
def test_what_only_load_shows(changes: dict[str, Any], maxima: tuple[Any, Any], verdict: str,
                              reasons: list[str]) -> None:
    assert health.judge(counters(**changes), *maxima) == (verdict, reasons)


# --- reading through NVML ---------------------------------------------------------------

def replay(device: dict[str, Any]) -> tuple[ReplayNvml, Handle]:
    nvml = ReplayNvml({"format": "nvml-recording/1", "source": "test", "system": {},
                       "devices": [device]})
    return nvml, nvml.device(0)


TOTAL = "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_{},NVML_{}_ECC)"
AT = ("nvmlDeviceGetMemoryErrorCounter(NVML_MEMORY_ERROR_TYPE_{},NVML_{}_ECC,"
      "NVML_MEMORY_LOCATION_{})")


def test_an_old_recording_without_the_calls_is_unknown_and_says_so() -> None:
    nvml, handle = replay({"nvmlDeviceGetName": "NVIDIA H100 80GB HBM3"})
    unavailable: dict[str, str] = {}
    judged = health.read_and_judge(nvml, handle, unavailable, architecture=9)
    assert judged["verdict"] == "unknown"
    assert judged["reasons"] == [NO_ECC, NO_REPAIRS]
    assert judged["rule"] == health.RULE
    assert unavailable[TOTAL.format("UNCORRECTED", "VOLATILE")] == "NVML_ERROR_FUNCTION_NOT_FOUND"
    assert unavailable["nvmlDeviceGetRemappedRows"] == "NVML_ERROR_FUNCTION_NOT_FOUND"
    assert unavailable["nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_RELIABILITY)"] == (
        "NVML_ERROR_FUNCTION_NOT_FOUND")
    # No totals, no locations asked: 4 totals, rows, 2 page lists, pending, replays,
    # 8 policies and energy; the recovery action, the bank histogram, the SRAM status, the
    # repair status and the unrepairable flag (issue 36: replayed as unknown). No NVLink
    # link is active, so no link's errors are asked.
    assert not any(k.startswith("nvmlDeviceGetMemoryErrorCounter") for k in unavailable)
    assert len(unavailable) == 23
    assert unavailable["nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"] == (
        "NVML_ERROR_FUNCTION_NOT_FOUND")
    assert judged["action"] is None and judged["recovery_action"] is None
    assert judged["remap_histogram"] is None and judged["nvlink_errors"] is None
    Health.model_validate(judged)


def hopper_device() -> dict[str, Any]:
    device: dict[str, Any] = {
        "nvmlDeviceGetRemappedRows": [0, 2, 0, 0],
        "nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)": NS,
        "nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)": NS,
        "nvmlDeviceGetRetiredPagesPendingStatus": NS,
        "nvmlDeviceGetPcieReplayCounter": 3,
        "nvmlDeviceGetTotalEnergyConsumption": 2_979_033,
        "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_POWER)": {
            "referenceTime": 1_700_000_000_000_000, "violationTime": 29_259_889_000},
        # NVML's "no value" (ULLONG_MAX) is no figure.
        "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL)": {
            "referenceTime": 1, "violationTime": 18446744073709551615},
        "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_RELIABILITY)": NS,
        "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
    }
    for error, volatile, aggregate in (("CORRECTED", 7, 9), ("UNCORRECTED", 0, 2)):
        device[TOTAL.format(error, "VOLATILE")] = volatile
        device[TOTAL.format(error, "AGGREGATE")] = aggregate
        device[AT.format(error, "VOLATILE", "DRAM")] = volatile
        device[AT.format(error, "AGGREGATE", "DRAM")] = aggregate
        device[AT.format(error, "VOLATILE", "SRAM")] = 0
        device[AT.format(error, "AGGREGATE", "SRAM")] = 0
    return device


def test_a_hopper_card_read_through_nvml() -> None:
    nvml, handle = replay(hopper_device())
    unavailable: dict[str, str] = {}
    judged = health.read_and_judge(nvml, handle, unavailable, architecture=9)
    assert judged["verdict"] == "degraded"
    assert judged["reasons"] == [
        "2 rows remapped for uncorrectable errors",
        "2 uncorrectable ECC errors in the card's life, none since the driver loaded"]
    assert judged["ecc"] == {
        "corrected_volatile": 7, "corrected_aggregate": 9, "uncorrected_volatile": 0,
        "uncorrected_aggregate": 2,
        "by_location": {
            "DRAM": {"corrected_volatile": 7, "corrected_aggregate": 9,
                     "uncorrected_volatile": 0, "uncorrected_aggregate": 2},
            "SRAM": {"corrected_volatile": 0, "corrected_aggregate": 0,
                     "uncorrected_volatile": 0, "uncorrected_aggregate": 0}}}
    assert judged["remapped_rows"] == {"correctable": 0, "uncorrectable": 2, "pending": False,
                                       "failure": False}
    assert judged["retired_pages"] is None
    assert judged["pcie_replays"] == 3
    assert judged["throttle_ns"] == {"power": 29_259_889_000}
    assert judged["energy_mj"] == 2_979_033
    assert judged["xid"] is None  # no log handed in
    # Hopper keeps no per-cache counts: those are not asked, so not missing either.
    assert not any("L1_CACHE" in k for k in unavailable)
    assert unavailable["nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_RELIABILITY)"] == (
        "NVML_ERROR_NOT_SUPPORTED")
    Health.model_validate(judged)


def test_a_volta_card_is_asked_for_its_caches_and_counts_its_retired_pages() -> None:
    nvml, handle = replay({
        TOTAL.format("UNCORRECTED", "VOLATILE"): 0,
        AT.format("CORRECTED", "AGGREGATE", "L2_CACHE"): 4,
        "nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)":
            [0xF2A1C, 0xF2A1D],
        "nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)": [],
        "nvmlDeviceGetRetiredPagesPendingStatus": 0,
        "nvmlDeviceGetRemappedRows": NS,
    })
    unavailable: dict[str, str] = {}
    judged = health.read_and_judge(nvml, handle, unavailable, architecture=5)
    assert judged["verdict"] == "healthy"
    assert judged["retired_pages"] == {"single_bit": 2, "double_bit": 0, "pending": False}
    assert judged["ecc"]["by_location"] == {"L2": {
        "corrected_volatile": None, "corrected_aggregate": 4, "uncorrected_volatile": None,
        "uncorrected_aggregate": None}}
    assert AT.format("CORRECTED", "VOLATILE", "REGISTER_FILE") in unavailable
    assert AT.format("CORRECTED", "VOLATILE", "SRAM") not in unavailable  # not asked


# --- after the load ---------------------------------------------------------------------

def test_update_after_load_counts_the_replays_and_judges_the_link() -> None:
    device = hopper_device()
    device["nvmlDeviceGetRemappedRows"] = [0, 0, 0, 0]
    device[TOTAL.format("UNCORRECTED", "AGGREGATE")] = 0
    nvml, handle = replay(device)
    before = health.read_and_judge(nvml, handle, architecture=9)
    assert before["verdict"] == "healthy"

    device["nvmlDeviceGetPcieReplayCounter"] = 8  # 5 more than the fingerprint read
    after = health.update_after_load(before, nvml, handle, 4, 16, 6.0)
    assert after["pcie_replays"] == 3
    assert after["pcie_replays_during_run"] == 5
    assert after["run_seconds"] == 6.0
    assert (after["pcie_gen_load"], after["pcie_width_load"]) == (4, 16)
    assert after["verdict"] == "degraded"
    # 5 in 6 s is 50 a minute; Gen4 x16 allows ceil(0.96 x 16) = 16.
    assert after["reasons"] == [
        "the PCIe replay counter rose 50 a minute during the run (DCGM warns above 16)",
        "the host link ran at Gen4 under load; the card and slot support Gen5"]
    assert after["action"] == "none"
    assert before["verdict"] == "healthy" and before["pcie_gen_load"] is None  # untouched
    Health.model_validate(after)


def test_a_replay_counter_that_went_down_was_reset_and_proves_nothing() -> None:
    device = hopper_device()
    device["nvmlDeviceGetRemappedRows"] = [0, 0, 0, 0]
    device[TOTAL.format("UNCORRECTED", "AGGREGATE")] = 0
    nvml, handle = replay(device)
    before = health.read_and_judge(nvml, handle, architecture=9)
    device["nvmlDeviceGetPcieReplayCounter"] = 1
    after = health.update_after_load(before, nvml, handle, 5, 16)
    assert after["pcie_replays_during_run"] is None
    assert (after["verdict"], after["reasons"]) == ("healthy", [])


def test_update_after_load_without_the_link_maxima_does_not_judge_the_link() -> None:
    device = hopper_device()
    device["nvmlDeviceGetRemappedRows"] = [0, 0, 0, 0]
    device[TOTAL.format("UNCORRECTED", "AGGREGATE")] = 0
    del device["nvmlDeviceGetMaxPcieLinkGeneration"], device["nvmlDeviceGetMaxPcieLinkWidth"]
    nvml, handle = replay(device)
    after = health.update_after_load(health.read_and_judge(nvml, handle), nvml, handle, 1, 1)
    assert (after["verdict"], after["reasons"]) == ("healthy", [])


# --- the kernel log -----------------------------------------------------------------------

# Real lines: stas00/ml-engineering (compute/accelerator/nvidia/debug.md), an A100 at
# 10:1c; leptonai/gpud (components/accelerator/nvidia/error/xid/README.md), a GPU at cb:00.
A100_XID = ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for "
            "remapping, reset gpu to activate.")
OTHER_XID = ("[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, "
             "name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005")
NOT_XID = ("[Fri Aug 30 11:11:22 2024] nvidia-peermem nv_get_p2p_free_callback:127 ERROR "
           "detected invalid context, skipping further processing")


def test_xid_lines_are_kept_for_their_gpu() -> None:
    lines = health.xid_lines([NOT_XID, A100_XID, OTHER_XID])
    assert lines == [A100_XID, OTHER_XID]
    log = health.KernelLog(True, "dmesg", lines)
    assert health.xid(log, "00000000:10:1C.0") == {
        "readable": True, "note": "dmesg", "events": [A100_XID],
        "classified": [{"code": 63, "cause": "hardware", "action": "none",
                        "name": "ECC page retirement or row remap recorded",
                        "bucket": "IGNORE"}]}
    assert health.xid(log, "00000000:CB:00.0")["events"] == [OTHER_XID]
    assert health.xid(log, "00000000:52:00.0")["events"] == []
    assert health.xid(log, None)["events"] == [A100_XID, OTHER_XID]


def test_only_the_newest_xid_lines_are_kept_and_each_is_bounded() -> None:
    lines = [f"[{i}.0] NVRM: Xid (PCI:0000:10:1c): 13, {'x' * 600}" for i in range(100)]
    events = health.xid(health.KernelLog(True, "/dev/kmsg", lines), "00000000:10:1C.0")["events"]
    assert len(events) == 64
    assert events[0].startswith("[36.0] ") and events[-1].startswith("[99.0] ")
    assert all(len(e) == 512 for e in events)


def test_an_unreadable_log_says_why() -> None:
    log = health.KernelLog(False, "/dev/kmsg: Operation not permitted; dmesg: read kernel "
                                  "buffer failed: Operation not permitted", [])
    assert health.xid(log, "00000000:10:1C.0") == {
        "readable": False, "note": "/dev/kmsg: Operation not permitted; dmesg: read kernel "
                                   "buffer failed: Operation not permitted", "events": []}


def test_kmsg_records_read_as_dmesg_prints_them() -> None:
    record = ("4,1234,430954509105,-;NVRM: Xid (PCI:0000:52:00): 48, pid='<unknown>', "
              "name=<unknown>, An uncorrectable double bit error (DBE) has been detected\n"
              " SUBSYSTEM=pci\n DEVICE=+pci:0000:52:00.0\n")
    assert health._kmsg_line(record) == (
        "[430954.509105] NVRM: Xid (PCI:0000:52:00): 48, pid='<unknown>', name=<unknown>, "
        "An uncorrectable double bit error (DBE) has been detected")
    assert health._kmsg_line("no header") is None


def test_this_machines_kernel_log_is_read_or_said_unreadable_within_the_bound() -> None:
    started = time.monotonic()
    log = health.read_kernel_log.__wrapped__()
    # Bounded (a blocking read of /dev/kmsg would wait for the next message forever), with
    # room for a busy machine to start dmesg.
    assert time.monotonic() - started < health.KMSG_SECONDS + health.DMESG_SECONDS + 20
    if log.readable:
        assert log.note.startswith(("/dev/kmsg", "dmesg"))
        assert all(health.XID_MARK in line for line in log.lines)
    else:
        assert "/dev/kmsg" in log.note and "dmesg" in log.note
        assert log.lines == []


def test_a_replayed_recording_does_not_read_this_machines_log() -> None:
    from agent.collect import collect

    gpu = collect(str(ROOT / "tests/fixtures/gpus/a100-sxm4-remap-pending/nvml-recording.json"),
                  probe_torch=False)["gpus"][0]
    assert gpu["health"]["xid"] == {
        "readable": False, "events": [],
        "note": "not read: the GPU answers are replayed from a recording of another machine"}


# --- the host's Python ----------------------------------------------------------------------

def test_python38_judges_the_same(python38: str) -> None:
    cases = [counters(), counters(remapped_rows=rows(pending=True)),
             counters(ecc=None, remapped_rows=None), counters(remapped_rows=None,
                                                              retired_pages=pages(60, 4, False)),
             counters(sram_threshold_exceeded=True),
             counters(xid_during_run=[{"code": 95, "cause": "hardware", "action": "reset",
                                       "name": "uncontained ECC error"}])]
    program = ("import json, sys\nfrom agent.health import card as health\n"
               "print(json.dumps([health.judge(c) for c in json.load(sys.stdin)]))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run([python38, "-c", program], input=json.dumps(cases), cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [list(health.judge(c)) for c in cases]


# --- issue 36: the action, the driver's other signals, rates, Xid in the run ----------------

def decided(**changes: Any) -> tuple[str, str | None, list[str]]:
    return health.decide(counters(**changes))


@pytest.mark.parametrize(("changes", "expected"), [
    ({}, ("healthy", "none", [])),
    # NVIDIA: unaffected work goes on until the reset; not a replacement.
    ({"remapped_rows": rows(pending=True)}, ("degraded", "reset", [
        "a row remap is pending: it takes effect only when the GPU is reset"])),
    ({"remapped_rows": rows(failure=True)}, ("failing", "replace", [
        "a row remapping failed: no spare row was left"])),
    ({"unrepairable_memory": True}, ("failing", "replace", [
        "the driver flags unrepairable memory"])),
    ({"unrepairable_memory": False, "sram_threshold_exceeded": False,
      "channel_repair_pending": False, "tpc_repair_pending": False, "recovery_action": 0,
      "remap_histogram": {"max": 2560, "high": 0, "partial": 0, "low": 0, "none": 0}},
     ("healthy", "none", [])),
    # 100 remaps would pass the 128-of-512 total, but one bank has no spare row left.
    ({"remapped_rows": rows(correctable=100),
      "remap_histogram": {"max": 2555, "high": 3, "partial": 1, "low": 0, "none": 1}},
     ("degraded", "none", ["1 memory bank with no spare row left: the next row failing "
                           "there fails its remap"])),
    ({"recovery_action": 4}, ("degraded", "drain_and_reset", [
        "the driver asks for its peer-to-peer traffic drained and a GPU reset (NVML "
        "recovery action 4)"])),
    ({"recovery_action": 1}, ("failing", "reset", [
        "the driver asks for a GPU reset (NVML recovery action 1)"])),
    ({"recovery_action": 2}, ("failing", "drain_and_reset", [
        "the driver asks for a node reboot (NVML recovery action 2)"])),
    ({"tpc_repair_pending": True}, ("degraded", "reset", [
        "a TPC repair is pending until the GPU is reset"])),
    # NVIDIA's GPU Memory Error Management, "RMA Policy": the flag meets the RMA criteria,
    # as a failed row remap does.
    ({"sram_threshold_exceeded": True}, ("failing", "replace", [
        "the driver's SRAM error threshold is exceeded: too many uncorrectable errors in one "
        "SRAM bank"])),
    # The worst action wins: a failed remap beside a pending one asks for a replacement.
    ({"remapped_rows": rows(failure=True, pending=True)}, ("failing", "replace", [
        "a row remapping failed: no spare row was left",
        "a row remap is pending: it takes effect only when the GPU is reset"])),
    ({"ecc": ecc(uncorrected_volatile=1, uncorrected_aggregate=1)}, ("failing", "reset", [
        "1 uncorrectable ECC error since the driver loaded"])),
    ({"ecc": None, "remapped_rows": None}, ("unknown", None, [NO_ECC, NO_REPAIRS])),
], ids=["clean", "remap-pending", "remap-failure", "unrepairable", "lent-h100-flags",
        "bank-exhausted", "drain-and-reset", "gpu-reset", "node-reboot", "tpc-repair",
        "sram-threshold", "worst-action", "uncorrectable", "unknown"])
def test_the_verdict_carries_the_action(changes: dict[str, Any],
                                        expected: tuple[str, str | None, list[str]]) -> None:
    assert decided(**changes) == expected


def link(n: int, replay: int = 0, recovery: int = 0, flit: int = 0,
         data: int = 0) -> dict[str, Any]:
    return {"link": n, "replay": replay, "recovery": recovery, "crc_flit": flit,
            "crc_data": data}


@pytest.mark.parametrize(("during", "seconds", "expected"), [
    ([link(0), link(1)], 60.0, ("healthy", "none", [])),
    # 600 CRC errors in 60 s: 10 a second, below DCGM's 100: not judged.
    ([link(0), link(3, flit=400, data=200)], 60.0, ("healthy", "none", [])),
    # What a healthy lent H100 logged on its busiest link under load (2026-11-26,
    # bench/records/2026-11-26-h100x2-health): 94 data CRC errors in 108.7 s.
    ([link(3, data=94), link(8, data=8)], 108.673, ("healthy", "none", [])),
    ([link(3, flit=7000)], 60.0, ("failing", "reset", [
        "NVLink: link 3 logged 7000 CRC errors during the run, 117 a second (DCGM fails at "
        "100)"])),
    ([link(5, replay=2)], 60.0, ("failing", "reset", [
        "NVLink: link 5 logged 2 replay errors during the run (DCGM fails on any)"])),
    ([link(5, recovery=1)], 60.0, ("failing", "reset", [
        "NVLink: link 5 logged 1 recovery error during the run (DCGM fails on any)"])),
], ids=["clean", "crc-below-rate", "crc-lent-h100", "crc-above-rate", "replay",
        "recovery"])
def test_nvlink_errors_are_judged_as_dcgm_does(during: list[dict[str, Any]], seconds: float,
                                               expected: tuple[str, str, list[str]]) -> None:
    assert decided(nvlink_errors_during_run=during, run_seconds=seconds) == expected


H100_XID_79 = ("[  512.250001] NVRM: Xid (PCI:0000:52:00): 79, pid=2211, name=python3, "
               "GPU has fallen off the bus.")
H100_XID_13 = ("[  511.000000] NVRM: Xid (PCI:0000:52:00): 13, pid=2211, name=python3, "
               "Graphics Exception: ESR 0x405840=0x1000000")
H100_XID_63_BEFORE = ("[  100.000000] NVRM: Xid (PCI:0000:52:00): 63, pid=1, Row Remapper: "
                      "New row marked for remapping, reset gpu to activate.")


def test_a_hardware_xid_inside_the_run_is_judged_and_others_are_not() -> None:
    device = hopper_device()
    device["nvmlDeviceGetRemappedRows"] = [0, 0, 0, 0]
    device[TOTAL.format("UNCORRECTED", "AGGREGATE")] = 0
    nvml, handle = replay(device)
    before = health.read_and_judge(nvml, handle, architecture=9)
    log = health.KernelLog(True, "dmesg", [H100_XID_63_BEFORE, H100_XID_13, H100_XID_79])
    after = health.update_after_load(before, nvml, handle, 5, 16, 60.0, log, 500.0,
                                     "00000000:52:00.0")
    # The application's Xid 13 is kept, classified, and not judged; Xid 63 came before.
    assert [e["code"] for e in after["xid_during_run"]] == [13, 79]
    assert after["xid_during_run"][0]["cause"] == "application"
    assert (after["verdict"], after["action"]) == ("failing", "drain_and_reset")
    assert after["reasons"] == ["Xid 79 (GPU has fallen off the bus) during the agent's run"]
    Health.model_validate(after)


def test_the_new_counters_are_read_through_nvml_and_their_rise_over_the_run() -> None:
    device = hopper_device()
    device["nvmlDeviceGetRemappedRows"] = [0, 0, 0, 0]
    device[TOTAL.format("UNCORRECTED", "AGGREGATE")] = 0
    device["nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)"] = 0
    device["nvmlDeviceGetRowRemapperHistogram"] = {"max": 2560, "high": 0, "partial": 0,
                                                   "low": 0, "none": 0}
    device["nvmlDeviceGetSramEccErrorStatus"] = {"bThresholdExceeded": 0, "version": 1}
    device["nvmlDeviceGetRepairStatus"] = [0, 0]
    device["nvmlDeviceGetUnrepairableMemoryFlag_v1"] = 0
    for n in (0, 1):
        for kind in ("REPLAY", "RECOVERY", "CRC_FLIT", "CRC_DATA"):
            device[f"nvmlDeviceGetNvLinkErrorCounter({n},NVML_NVLINK_ERROR_DL_{kind})"] = 0
    nvml, handle = replay(device)
    before = health.read_and_judge(nvml, handle, architecture=9, nvlink_states=[1, 1, 0])
    assert before["nvlink_errors"] == [link(0), link(1)]
    assert (before["recovery_action"], before["unrepairable_memory"]) == (0, False)
    assert before["remap_histogram"]["max"] == 2560
    assert (before["verdict"], before["action"]) == ("healthy", "none")
    device["nvmlDeviceGetNvLinkErrorCounter(1,NVML_NVLINK_ERROR_DL_CRC_FLIT)"] = 90
    after = health.update_after_load(before, nvml, handle, 5, 16, 30.0)
    assert after["nvlink_errors_during_run"] == [link(0), link(1, flit=90)]
    # 3 a second: below DCGM's 100, not judged.
    assert (after["verdict"], after["action"]) == ("healthy", "none")
    device["nvmlDeviceGetNvLinkErrorCounter(1,NVML_NVLINK_ERROR_DL_CRC_FLIT)"] = 4000
    after = health.update_after_load(before, nvml, handle, 5, 16, 30.0)
    assert (after["verdict"], after["action"]) == ("failing", "reset")
    Health.model_validate(after)

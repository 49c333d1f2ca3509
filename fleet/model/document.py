"""The agent document (`fleet-agent/1`): the one shape that crosses from host to controller.

Everything an agent sends is validated by these models before anything reads or stores
it. A host is not trusted: unknown fields are refused, strings and lists are bounded,
numbers must be finite, and the version must be one this controller understands.

The shared shapes live in fleet/model/base.py, the job suite's results in
fleet/model/job.py and the run's settings in fleet/model/settings.py.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from fleet.errors import AgentError
from fleet.model.base import (
    Celsius,
    Count,
    GBps,
    LongText,
    MHz,
    Ms,
    Name,
    Seconds,
    SeenProcess,
    Share,
    SoakVerdict,
    Statistics,
    Strict,
    TelemetrySummary,
    Text,
    TFlops,
    Verdict,
    Watts,
)
from fleet.model.host_limits import HostLimits
from fleet.model.job import JobResult
from fleet.model.matmul import MatmulRerun
from fleet.model.network import NetworkFingerprint
from fleet.model.settings import Setting, SettingsRerun
from fleet.model.storage import Storage

DOCUMENT_FORMAT = "fleet-agent/1"


class ClockRange(Strict):
    """How many clocks NVML lists, and the lowest and highest of them."""

    count: Count
    min_mhz: MHz
    max_mhz: MHz


class Datasheet(Strict):
    """What NVIDIA publishes for a variant: default power, top SM clock, bandwidth, peaks."""

    default_power_w: Watts | None
    max_sm_clock_mhz: MHz | None
    memory_bandwidth_gbs: Annotated[float, Field(ge=0, le=1e6)] | None
    peak_tflops: dict[Name, Annotated[float, Field(ge=0, le=1e6)] | None] = Field(max_length=16)
    source: LongText


class VgpuProfile(Strict):
    """A vGPU profile: its name, the board it slices, and its share of the board."""

    profile: Name
    board: Name
    mig_slices: Count | None
    framebuffer_gb: Count
    series: Name
    series_meaning: Name | None
    physical_label: Name | None


class Variant(Strict):
    """Which product a GPU is: family, memory, form factor, and how it was told."""

    family: Name | None
    memory_gb: Count | None
    form_factor: Literal["SXM", "PCIe", "NVL", "vGPU", "unknown"]
    label: Name | None
    matched_by: Literal["pci_id", "name", "vgpu_profile", "unknown"]
    pci_device_id: Name | None
    vgpu_profile: VgpuProfile | None = None
    datasheet: Datasheet | None = None
    note: Text | None = None


class Probe(Strict):
    """A write the agent tried to find out a capability: the call and what NVML answered."""

    call: Text
    result: Name


class Capability(Strict):
    """Whether the tenant may change a setting, how that was found, and the evidence."""

    verdict: Verdict
    method: Literal["inferred", "probed"]
    evidence: list[Text] = Field(max_length=16)
    probe: Probe | None


class Capabilities(Strict):
    """Per tenant-changeable setting, whether this tenant may change it."""

    application_clocks: Capability
    locked_gpu_clocks: Capability
    locked_memory_clocks: Capability
    power_limit: Capability
    persistence_mode: Capability
    compute_mode: Capability
    ecc: Capability


class MigDevice(Strict):
    """One MIG device of a GPU, as NVML describes it."""

    index: Count
    name: Name | None
    profile: Name | None
    uuid: Name | None
    memory_total_mib: Count | None
    sm_count: Count | None
    gpu_instance_id: Count | None
    compute_instance_id: Count | None


class GpuProcess(Strict):
    """One process using a GPU: its pid, memory and kind; and, read live from /proc on the
    host (agent/timing/contention.py `seen_from_here`), whether the agent's run could see
    it and whose it is. None: not read (a recording, or an agent before 2026-11-29)."""

    pid: Annotated[int, Field(ge=-1, le=2**32)]
    used_memory_mib: Count | None
    kind: Literal["compute", "graphics"]
    visible: bool | None = None
    name: Name | None = None
    user: Name | None = None
    own: bool | None = None


HealthVerdict = Literal["healthy", "degraded", "failing", "unknown"]
HealthAction = Literal["none", "reset", "drain_and_reset", "replace"]


class EccCounts(Strict):
    """ECC error counts as the driver keeps them: volatile (since the driver loaded) and
    aggregate (over the card's life, kept in its InfoROM), corrected and uncorrected; per
    memory location where the driver gives them ({"DRAM": {"uncorrected_aggregate": 0}})."""

    corrected_volatile: Count | None
    uncorrected_volatile: Count | None
    corrected_aggregate: Count | None
    uncorrected_aggregate: Count | None
    by_location: dict[Name, dict[Name, Count | None]] = Field(default_factory=dict,
                                                             max_length=16)


class RemappedRows(Strict):
    """Ampere and later: HBM rows the card has remapped, and whether a remap is pending
    (applied at the next reset) or has failed (no spare row left)."""

    correctable: Count
    uncorrectable: Count
    pending: bool
    failure: bool


class RetiredPages(Strict):
    """Before Ampere: pages retired for repeated single-bit or any double-bit error, and
    whether a retirement waits for the next reset."""

    single_bit: Count | None
    double_bit: Count | None
    pending: bool | None


class Xid(Strict):
    """Xid errors the kernel logged for NVIDIA GPUs, where the tenant may read the log."""

    readable: bool
    # Where it was read ("/dev/kmsg", "dmesg") or why not ("dmesg: Operation not permitted").
    note: Text
    # The newest lines that carry an Xid, as the kernel printed them.
    events: list[Text] = Field(default_factory=list, max_length=64)
    # Each event's code by agent/health/xid.py's cited table, in the same order (older agents:
    # empty).
    classified: list[XidClass] = Field(default_factory=list, max_length=64)


class XidClass(Strict):
    """One Xid line's code, what it points at and what a buyer asks for (agent/health/xid.py)."""

    code: Annotated[int, Field(ge=0, le=100_000)] | None
    cause: Literal["hardware", "driver", "application", "unknown"]
    action: HealthAction
    name: Text
    # NVIDIA's Xid catalog, "Resolution Bucket (Immediate Action)", as NVIDIA spells it
    # ("RESET_GPU"); None for a code not in the table, or an older agent.
    bucket: Name | None = None


class XidInRun(XidClass):
    """An Xid line stamped inside the agent's run, classified."""

    line: Text


class NvLinkErrors(Strict):
    """One NVLink link's error counters (nvmlDeviceGetNvLinkErrorCounter; None where the
    driver did not answer), or how far each rose during the run."""

    link: Annotated[int, Field(ge=0, le=64)]
    replay: Count | None
    recovery: Count | None
    crc_flit: Count | None
    crc_data: Count | None


class RemapHistogram(Strict):
    """The row remapper's banks by spare rows left (nvmlDeviceGetRowRemapperHistogram)."""

    max: Count
    high: Count
    partial: Count
    low: Count
    none: Count


class Health(Strict):
    """Whether a card is failing, or has been: the counters the driver keeps, and the
    verdict drawn from them by the rule in agent/health/card.py (`rule` says it in words).
    `unknown` when the driver cannot tell: never healthy by default."""

    verdict: HealthVerdict
    # The counters that decided the verdict, in words ("2 uncorrectable ECC errors since
    # the driver loaded"); empty for a healthy card.
    reasons: list[Text] = Field(max_length=32)
    rule: LongText
    ecc: EccCounts | None
    remapped_rows: RemappedRows | None
    retired_pages: RetiredPages | None
    pcie_replays: Count | None
    # How far the replay counter rose between the agent's first and last read.
    pcie_replays_during_run: Count | None = None
    # The host link as it ran under load (links drop to a lower generation at idle).
    pcie_gen_load: Count | None = None
    pcie_width_load: Count | None = None
    # Time the clocks were held down since the driver loaded, by reason ("power",
    # "thermal", "reliability", ...), in nanoseconds.
    throttle_ns: dict[Name, Count] = Field(default_factory=dict, max_length=16)
    energy_mj: Count | None
    xid: Xid | None
    # What the buyer asks the provider for (agent/health/card.py RULE); None: unknown, or an
    # older agent that did not say.
    action: HealthAction | None = None
    # NVML's recovery action field (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P,
    # 4 drain and reset, ...); and the flags nvidia-smi -q prints beside the ECC counts.
    recovery_action: Count | None = None
    remap_histogram: RemapHistogram | None = None
    sram_threshold_exceeded: bool | None = None
    channel_repair_pending: bool | None = None
    tpc_repair_pending: bool | None = None
    unrepairable_memory: bool | None = None
    # Per active NVLink link: the error counters at the fingerprint, and their rise over
    # the run (`run_seconds`, the span the rises cover).
    nvlink_errors: list[NvLinkErrors] | None = Field(default=None, max_length=64)
    nvlink_errors_during_run: list[NvLinkErrors] | None = Field(default=None, max_length=64)
    run_seconds: Annotated[float, Field(ge=0, le=1e7)] | None = None
    # Xid lines stamped inside the agent's run (read again after the load).
    xid_during_run: list[XidInRun] | None = Field(default=None, max_length=64)


class NvLinkRemote(Strict):
    """One active NVLink link of a GPU and what NVML says sits at its other end: the PCI
    bus id and the kind of device (None where NVML did not answer)."""

    link: Annotated[int, Field(ge=0, le=64)]
    remote_bus_id: Name | None
    remote_type: Literal["gpu", "switch", "ibmnpu"] | None


class Gpu(Strict):
    """One GPU's fingerprint, as `agent.gpu.fingerprint.fingerprint_gpu` builds it."""

    index: Annotated[int, Field(ge=0, le=1024)]
    name: Name | None
    uuid: Name | None
    serial: Name | None
    board_part_number: Name | None
    vbios_version: Name | None
    inforom_image_version: Name | None
    gsp_firmware_version: Name | None
    pci_bus_id: Name | None
    pci_device_id: Name | None
    pci_subsystem_id: Name | None
    architecture: Name | None
    cuda_compute_capability: Name | None
    driver_version: Name | None
    cuda_driver_version: Name | None
    memory_total_mib: Count | None
    memory_used_mib: Count | None
    cuda_cores: Count | None
    sm_count: Count | None
    power_limit_w: Watts | None
    power_limit_default_w: Watts | None
    power_limit_enforced_w: Watts | None
    power_limit_min_w: Watts | None
    power_limit_max_w: Watts | None
    power_draw_w: Watts | None
    persistence_mode: bool | None
    compute_mode: Name | None
    ecc_enabled: bool | None
    ecc_pending: bool | None
    mig_enabled: bool | None
    mig_pending: bool | None
    mig_devices: list[MigDevice] = Field(max_length=64)
    virtualization_mode: Literal["none", "passthrough", "vgpu", "host"] | None
    pcie_gen_current: Count | None
    pcie_gen_max: Count | None
    pcie_width_current: Count | None
    pcie_width_max: Count | None
    nvlink_links_active: Annotated[int, Field(ge=0, le=64)]
    nvlink_links_total: Annotated[int, Field(ge=0, le=64)]
    # Where each active link goes (agent/gpu/nvlink.py); None where NVML did not say whether
    # the GPU has NVLink, and in documents of agents before the per-link facts.
    nvlink_remotes: list[NvLinkRemote] | None = Field(default=None, max_length=64)
    # The NVLink links the variant carries per GPU (agent/gpu/variants.py); None: not known.
    nvlink_links_variant: Annotated[int, Field(ge=0, le=64)] | None = None
    clocks_event_reasons: Count | None
    clocks_event_reason_names: list[Name] | None = Field(max_length=64)
    temperature_c: Annotated[int, Field(ge=-100, le=300)] | None
    performance_state: Name | None
    utilization_gpu_pct: Annotated[int, Field(ge=0, le=100)] | None
    processes: list[GpuProcess] = Field(max_length=4096)
    sm_clock_mhz: MHz | None
    mem_clock_mhz: MHz | None
    max_sm_clock_mhz: MHz | None
    max_mem_clock_mhz: MHz | None
    app_sm_clock_target_mhz: MHz | None
    app_sm_clock_default_mhz: MHz | None
    app_mem_clock_target_mhz: MHz | None
    app_mem_clock_default_mhz: MHz | None
    boost_sm_clock_max_mhz: MHz | None
    supported_memory_clocks: ClockRange | None
    supported_graphics_clocks: ClockRange | None
    supported_clock_table: dict[Name, list[MHz]] | None = Field(max_length=64)
    variant: Variant
    capabilities: Capabilities
    unavailable: dict[Text, Name] = Field(max_length=1024)
    # Absent from documents of agents before the health counters.
    health: Health | None = None


class Source(Strict):
    """Where the agent's facts came from: NVML, a recording, nvidia-smi, or nothing."""

    kind: Literal["nvml", "recording", "nvidia-smi-xml", "nvidia-smi-text", "none"]
    path: LongText | None
    note: LongText


class System(Strict):
    """The host-wide driver, CUDA and NVML versions, and how many GPUs NVML sees."""

    driver_version: Name | None
    cuda_driver_version: Name | None
    nvml_version: Name | None
    gpu_count: Annotated[int, Field(ge=0, le=1024)]
    unavailable: dict[Text, Name] = Field(max_length=64)


class AgentFailure(Strict):
    """A stage of the agent that failed, what it said, and the GPU when it was one GPU's."""

    stage: Name
    message: LongText
    gpu: Annotated[int, Field(ge=0, le=1024)] | None = None


class Host(Strict):
    """The machine the agent ran on: hostname, OS, kernel, CPU and memory."""

    hostname: Name | None
    os: Text | None
    os_id: Name | None
    kernel: Text | None
    arch: Name | None
    cpu_model: Text | None
    cpu_count: Count | None
    memory_total_mib: Count | None
    platform: Literal["bare-metal", "vm", "container", "vm+container", "unknown"]
    hypervisor: Name | None
    container: Name | None
    virtualization_evidence: list[Text] = Field(max_length=64)
    python_version: Name | None
    python_executable: Text | None
    torch_version: Name | None
    cuda_runtime_version: Name | None
    cudnn_version: Name | None
    cublas_version: Name | None
    torch_error: LongText | None
    is_root: bool
    user: Name | None


class Warmup(Strict):
    """How a benchmark reached steady state: whether it did, how long, and in how many windows."""

    steady: bool
    seconds: Seconds
    windows: Count
    # The relative band the windows had to agree within: 0.5%, or three standard errors
    # of a window's mean when its few runs cannot resolve 0.5% (burst mode).
    band: Annotated[float, Field(ge=0, le=1e6)]
    # Each warm-up window's 10%-trimmed mean run time: what steadiness was judged on.
    window_trimmed_means_ms: list[Ms] = Field(max_length=1000)
    # Harness 1.1 and later: "settled" (one level), "alternating" (back and forth between
    # two operating points: steady, measured across them) or "drifting" (never steady).
    state: Literal["settled", "alternating", "drifting"] | None = None


class OperatingPoint(Strict):
    """A level the measurement's ~1 s sub-windows fell on, and what the card did there."""

    tflops: Annotated[float, Field(ge=0, le=1e6)]
    share: Share
    sm_clock_mhz: Annotated[float, Field(ge=0, le=1e5)] | None
    power_w: Watts | None


Interval = Annotated[list[Annotated[float, Field(ge=0, le=1e6)]],
                     Field(min_length=2, max_length=2)]


class Measurement(Strict):
    """Harness 1.1 and later: how long the timed runs went on and what they saw."""

    seconds: Seconds
    sub_windows: Count
    # Whether sub-windows disagreed past `band` and the measurement went on past its minimum.
    extended: bool
    band: Annotated[float, Field(ge=0, le=1e6)]
    sub_window_trimmed_means_ms: list[Ms] = Field(max_length=1000)
    operating_points: list[OperatingPoint] = Field(max_length=16)
    # Harness 1.2-1.3: the 95% interval (low, high) of `tflops`, by the method of batch
    # means over the sub-windows; None with fewer than two of them. It says how well the
    # run knows its own level, not where a repeat lands: shown as "within run".
    tflops_ci95: Interval | None = None
    # Harness 1.4 and later: the same, under the name that says what it is.
    within_run_ci95: Interval | None = None
    # Harness 1.4 and later: the runs left out as interrupted, [index among the runs as
    # timed, ms], each named in the result's contention too.
    excluded_runs: list[Annotated[list[Annotated[float, Field(ge=0, le=1e7)]],
                                  Field(min_length=2, max_length=2)]] = Field(
        default_factory=list, max_length=1000)

    @model_validator(mode="after")
    def _interval_in_order(self) -> Measurement:
        for name in ("tflops_ci95", "within_run_ci95"):
            value = getattr(self, name)
            if value is not None and value[0] > value[1]:
                raise ValueError(f"{name} must be [low, high]")
        return self

    @property
    def within_run(self) -> list[float] | None:
        """The within-run interval, whichever harness named it."""
        return self.within_run_ci95 if self.within_run_ci95 is not None else self.tflops_ci95


class Correctness(Strict):
    """How far the benchmark's result was from the reference rows, and whether that passed."""

    max_rel_error: Annotated[float, Field(ge=0)] | None
    tolerance: Annotated[float, Field(ge=0, le=1)]
    rows_checked: Count
    passed: bool


class Flags(Strict):
    """What may have made a result unrepresentative: caps, throttling, contention, failures."""

    power_capped: bool
    thermal_throttled: bool
    hw_slowdown: bool
    contended: bool
    not_steady: bool
    correctness_failed: bool
    clocks_locked: bool
    # Harness 1.1 and later: the measurement spanned more than one operating point.
    operating_point_switch: bool = False
    # Harness 1.3 and later, soaked results: the load reached the soak cap before
    # throughput and temperature stopped moving; measured anyway, at the cap.
    not_soaked: bool = False


class Provenance(Strict):
    """The software and device a result was measured on: torch, CUDA runtime, cuBLAS, GPU."""

    torch_version: Name | None
    cuda_runtime_version: Name | None
    cublas_version: Name | None
    device_name: Name | None
    sm_count: Count | None
    l2_bytes: Count | None
    flush_bytes: Count
    # Harness 1.1 and later: when the L2 was flushed and why not, and A + B + C in bytes.
    l2_flush: Text | None = None
    working_set_bytes: Count | None = None
    inputs: Text
    env: dict[Name, Text] = Field(max_length=64)


class Soak(SoakVerdict):
    """Harness 1.3 and later, soaked results: the continuous load from the first launch,
    and when throughput and temperature stopped moving (agent/timing/soak.py)."""

    # The level of the first 20 s of load (the cool-start figure, from the same run) and
    # the drop to the soaked figure: 1 - tflops / first_20s_tflops, positive when it fell.
    first_20s_tflops: TFlops | None
    drop: Annotated[float, Field(ge=-10, le=1)] | None
    # Median GPU temperature over the measurement (under load, soaked), and at first launch.
    temperature_c: Celsius | None
    temperature_start_c: Celsius | None
    # Per window from the first launch: [end, seconds since the first launch; TFLOP/s;
    # deg C; SM MHz; watts], -1 where NVML did not answer.
    curve: list[Annotated[list[float], Field(min_length=5, max_length=5)]] = Field(
        max_length=1000)


class Integrity(Strict):
    """Soaked results from harness 1.4 on (agent/matmul/integrity.py): the product compared bit for
    bit with the GPU's first one under load, once a soak window, and a digest of that first
    product that the node's GPUs of one device and stack must share."""

    checks: Count
    # Checks that found the product changed; the first one's seconds of load, the card's
    # temperature then, and how many elements differed (None: no mismatch).
    mismatches: Count
    interval_s: Annotated[float, Field(gt=0, le=1e4)]
    reference_s: Seconds | None
    first_mismatch_s: Seconds | None
    first_mismatch_temperature_c: Celsius | None
    first_mismatch_elements: Count | None
    max_elements: Count
    elements: Count  # in the product
    # 62 bits of the first product, 16 hex digits: equal digests, equal bits.
    digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")] | None
    # The cuBLAS kernel where torch could tell (so far it cannot: the stack stands in).
    kernel: Name | None
    # A corruption constructed by the test hook (FLEET_INTEGRITY_FLIP_AFTER), not the card's.
    injected: bool = False

    @model_validator(mode="after")
    def _counts_agree(self) -> Integrity:
        if self.mismatches > self.checks:
            raise ValueError(f"integrity: {self.mismatches} mismatches in {self.checks} checks")
        if (self.mismatches > 0) != (self.first_mismatch_s is not None):
            raise ValueError("integrity: first_mismatch_s is given exactly when a check "
                             "mismatched")
        return self


class ClockLock(Strict):
    """A clock lock the benchmark asked for, whether it held, and why not."""

    requested_mhz: MHz
    applied: bool
    error: Name | None
    unlock_error: Name | None = None


class BenchmarkResult(Strict):
    """One GPU's measurement of one matmul configuration by the standard harness."""

    gpu_index: Annotated[int, Field(ge=0, le=1024)]
    gpu_uuid: Name | None
    harness_version: Name
    timing_method: Name
    mode: Literal["sustained", "burst"]
    pause_ms: Ms
    # Harness 1.3 and later: "soaked" (measured once throughput and temperature stopped
    # moving under continuous load, the default) or "cool-start" (--quick: the first
    # seconds of load after the agent started, as every result before 1.3 was, and as
    # burst always is). Compared apart, like mode and cache.
    thermal: Literal["soaked", "cool-start"] | None = None
    # "flushed" (harness 1.2 and later): flushed before every run though A, B and C evict
    # the L2 themselves (--flush-always), which moves the figure: never compared as "cold".
    cache: Literal["cold", "warm", "flushed"]
    concurrency: Literal["concurrent", "sequential"]
    gpus_in_run: Annotated[int, Field(ge=1, le=1024)]
    dtype: Literal["bf16", "fp16", "tf32", "fp32"]
    m: Annotated[int, Field(ge=1, le=1 << 20)]
    n: Annotated[int, Field(ge=1, le=1 << 20)]
    k: Annotated[int, Field(ge=1, le=1 << 20)]
    # A product that took no time is not a measurement; the reports divide by this.
    tflops: Annotated[float, Field(gt=0, le=1e6)]
    # What `tflops` is 2·M·N·K over: the mean run time from harness 1.4 on (the work over
    # the time, what a long job gets); the 10%-trimmed mean in 1.2-1.3 (the runs of a
    # power-capped card fall on levels a median jumps between); absent before 1.2, where
    # it was the median.
    statistic: Literal["median", "trimmed_mean", "mean"] | None = None
    stats: Statistics
    warmup: Warmup
    measurement: Measurement | None = None
    correctness: Correctness
    flags: Flags
    contention: list[Text] = Field(max_length=16)
    clock_lock: ClockLock | None
    # Harness 1.3 and later, soaked results only.
    soak: Soak | None = None
    # Soaked results only, from the agent that checks the product under load on.
    integrity: Integrity | None = None
    telemetry: TelemetrySummary
    # Downsampled: [seconds since start, SM MHz, memory MHz, watts, deg C, reasons bitmask].
    telemetry_series: list[Annotated[list[float], Field(min_length=6, max_length=6)]] = Field(
        max_length=2000)
    samples_ms: list[Ms] = Field(max_length=100_000)
    provenance: Provenance
    wall_s: Seconds
    # A short soaked figure measured again without the run's settings, then with them.
    rerun: MatmulRerun | None = None

    @model_validator(mode="after")
    def _says_its_statistic(self) -> BenchmarkResult:
        # From 1.2 on the statistic is the reader's only way to tell what `tflops` is; a
        # result without it would be shown with the median's interval.
        if self.statistic is None and _version(self.harness_version) >= (1, 2):
            raise ValueError(f"harness {self.harness_version} results must say which "
                             "statistic tflops is computed from (statistic)")
        if _version(self.harness_version) >= (1, 3) and self.thermal is None:
            raise ValueError(f"harness {self.harness_version} results must say whether they "
                             "were measured soaked or from a cool start (thermal)")
        if self.rerun is not None and self.thermal != "soaked":
            raise ValueError("only a soaked result is measured again (rerun)")
        if self.thermal == "soaked" and self.soak is None:
            raise ValueError("a soaked result must carry its soak (curve and verdict)")
        if self.soak is not None and self.soak.first_20s_tflops and self.soak.drop is not None:
            drop = 1.0 - self.tflops / self.soak.first_20s_tflops
            if not math.isclose(self.soak.drop, drop, abs_tol=1e-6):
                raise ValueError(f"soak.drop {self.soak.drop:.6g} is not 1 - tflops / "
                                 f"soak.first_20s_tflops ({drop:.6g})")
        # The headline must follow from the result's own times: a figure that does not
        # (an agent bug, an edited file) would be ranked and compared as if measured.
        name = f"{self.statistic}_ms" if self.statistic in ("trimmed_mean", "mean") \
            else "median_ms"
        time_ms = getattr(self.stats, name)
        expected = 2.0 * self.m * self.n * self.k / (time_ms * 1e-3) / 1e12 if time_ms else 0.0
        if not math.isclose(self.tflops, expected, rel_tol=1e-6):
            raise ValueError(f"tflops {self.tflops:.6g} is not 2·M·N·K over stats.{name} "
                             f"({expected:.6g}): the result contradicts its own times; "
                             "run the agent that ships with this controller")
        return self


class Bandwidth(Strict):
    """Repeated timings of one copy or collective, each as GB/s (10^9 bytes a second)."""

    runs: Annotated[int, Field(ge=1, le=1_000_000)]
    median_gbs: GBps
    min_gbs: GBps
    max_gbs: GBps
    cv: Annotated[float, Field(ge=0, le=100)]
    # The 95% interval of the median (agent/timing/stats.py's order-statistic interval).
    ci95_gbs: Annotated[list[GBps], Field(min_length=2, max_length=2)] | None
    samples_gbs: list[GBps] = Field(max_length=10_000)


class HostLinkState(Strict):
    """The PCIe link as NVML read it while the copy ran, and the most the card supports."""

    gen: Count | None
    width: Count | None
    gen_max: Count | None
    width_max: Count | None


NodeKind = Literal["memory_copy", "host_to_device", "device_to_host", "peer_copy",
                   "allreduce"]


class NcclTransport(Strict):
    """What NCCL's INFO lines said the all-reduce used (agent/node/collective.py): connections
    per transport ("P2P", "SHM", "NET", "COLLNET", "NVLS", "PXN"), the distinct forms
    ("P2P/CUMEM/read"), and the settings NCCL said came from the environment."""

    transports: dict[Annotated[str, StringConstraints(max_length=16)],
                     Annotated[int, Field(ge=0, le=1_000_000)]] = Field(max_length=8)
    paths: list[Annotated[str, StringConstraints(max_length=64)]] = Field(max_length=8)
    set_by_environment: list[Annotated[str, StringConstraints(max_length=160)]] = Field(
        max_length=16)


class NodeResult(Strict):
    """One figure of the node suite (agent/node/suite.py): a GPU's memory or host link, a pair's
    copy, or the node's all-reduce, with what it counts and its datasheet figure."""

    suite_version: Name
    kind: NodeKind
    # Per-GPU kinds: the GPU; peer_copy: the source; allreduce: None (the whole node).
    gpu_index: Annotated[int, Field(ge=0, le=1024)] | None
    gpu_uuid: Name | None
    # peer_copy: the destination.
    peer_index: Annotated[int, Field(ge=0, le=1024)] | None = None
    peer_uuid: Name | None = None
    # peer_copy: "one_way" (source to destination) or "both_ways" (each way at once).
    direction: Literal["one_way", "both_ways"] | None = None
    # host_to_device and device_to_host: the host buffer's kind.
    memory: Literal["pinned", "pageable"] | None = None
    size_bytes: Annotated[int, Field(ge=1, le=1 << 44)]
    # allreduce: the ranks (one process per GPU); otherwise 1.
    gpus_in_run: Annotated[int, Field(ge=1, le=1024)]
    # "cuda" for copies on a GPU, "nccl" or "gloo" for the all-reduce, "cpu" on the CPU
    # path. Bounded as node_result's columns are.
    backend: Annotated[str, StringConstraints(max_length=32)]
    dtype: Annotated[str, StringConstraints(max_length=16)] | None = None
    # The figure: the median of the repeats in GB/s; for allreduce, the bus bandwidth
    # (nccl-tests: algbw x 2(n-1)/n).
    gbs: GBps
    algbw_gbs: GBps | None = None
    # What the bytes are ("read + written", "copied", "each way, summed", ...).
    counted: Text
    stats: Bandwidth
    # peer_copy: whether CUDA peer access works between the two, and NVML's topology
    # path between them ("NVLINK", "PIX", "PXB", "PHB", "NODE", "SYS").
    peer_access: bool | None = None
    topology: Annotated[str, StringConstraints(max_length=32)] | None = None
    # peer_copy: the NVLink links joining the pair, from each GPU's per-link far ends
    # (agent/gpu/nvlink.py), and through what; 0 where NVML says none joins them, None where
    # it did not say where the links go.
    nvlink_links: Annotated[int, Field(ge=0, le=64)] | None = None
    nvlink_fabric: Literal["switch", "direct"] | None = None
    link: HostLinkState | None = None
    # What NVIDIA publishes for this figure, and where that comes from.
    datasheet_gbs: GBps | None
    datasheet_source: Text | None
    timing_method: Name
    torch_version: Name | None
    cuda_runtime_version: Name | None
    nccl_version: Name | None = None
    wall_s: Seconds
    # What was seen on the figure's GPUs before and after it (agent/timing/contention.py): the
    # lines a reader sees, and the other processes with their owners. Empty: nothing
    # seen, or an agent older than suite 1.1.0, which did not look.
    contention: list[Text] = Field(default_factory=list, max_length=16)
    processes: list[SeenProcess] = Field(default_factory=list, max_length=64)
    # Host copies: the GPU's NUMA node (None where the host does not say) and the CPUs
    # the copy ran from, as Linux writes a CPU set (agent/gpu/numa.py).
    numa_node: Annotated[int, Field(ge=0, le=4096)] | None = None
    cpus: Annotated[str, StringConstraints(max_length=512)] | None = None
    # allreduce through NCCL: the transports it used, and the NCCL_* and
    # CUDA_VISIBLE_DEVICES settings it ran under.
    transport: NcclTransport | None = None
    settings: dict[Annotated[str, StringConstraints(max_length=64)],
                   Annotated[str, StringConstraints(max_length=128)]] | None = Field(
        default=None, max_length=32)
    # The same figure measured again in the same run without the settings that could
    # move it, where the agent found it short: the all-reduce (agent/rerun/allreduce.py), a
    # memory copy (agent/rerun/memory.py), a pair's or a host copy
    # (agent/rerun/links.py).
    rerun: SettingsRerun | None = None

    @model_validator(mode="after")
    def _says_what_it_measured(self) -> NodeResult:
        # A figure whose fields do not fit its kind could not be compared with its own
        # configuration, and one that contradicts its samples would be ranked as measured.
        needs = {"memory_copy": ("gpu_index",), "host_to_device": ("gpu_index", "memory"),
                 "device_to_host": ("gpu_index", "memory"),
                 "peer_copy": ("gpu_index", "peer_index", "direction"),
                 "allreduce": ("algbw_gbs",)}[self.kind]
        missing = [name for name in needs if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.kind} figure must say its {', '.join(missing)}")
        if self.kind != "peer_copy" and (self.peer_index is not None
                                         or self.direction is not None):
            raise ValueError(f"a {self.kind} figure has no peer or direction")
        if self.kind == "allreduce" and (self.gpu_index is not None or self.gpus_in_run < 2):
            raise ValueError("an allreduce figure is the node's: no gpu_index, and at least "
                             "two ranks in gpus_in_run")
        if not math.isclose(self.gbs, self.stats.median_gbs, rel_tol=1e-6, abs_tol=1e-3):
            raise ValueError(f"gbs {self.gbs:.6g} is not the median of its repeats "
                             f"(stats.median_gbs {self.stats.median_gbs:.6g})")
        if not self.stats.min_gbs <= self.stats.median_gbs <= self.stats.max_gbs:
            raise ValueError("stats must hold min_gbs <= median_gbs <= max_gbs")
        return self


def _version(text: str) -> tuple[int, ...]:
    """"1.2.0" -> (1, 2, 0); what does not parse sorts first."""
    parts = []
    for part in text.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


class AgentDocument(Strict):
    """One fleet-agent/1 document: what the agent found on a host and, if asked, measured."""

    format: Literal["fleet-agent/1"]
    agent_version: Name
    collected_at: Name
    source: Source
    no_gpu_reason: LongText | None
    probe_writes: bool
    host: Host
    system: System | None
    gpus: list[Gpu] = Field(max_length=256)
    benchmarks: list[BenchmarkResult] = Field(max_length=4096)
    errors: list[AgentFailure] = Field(max_length=1024)
    # The node suite's figures (agent/node/suite.py); absent from agents before it.
    node: list[NodeResult] = Field(default_factory=list, max_length=16_384)
    # The job suite's figures (agent/job/suite.py), one per GPU, workload and attention
    # backend; absent from agents before it.
    jobs: list[JobResult] = Field(default_factory=list, max_length=4096)
    # The settings the run measured under, each with its source (fleet/model/settings.py);
    # absent from agents before it.
    settings: list[Setting] | None = Field(default=None, max_length=256)
    # The node's network (agent/network/, fleet/model/network.py); None where the agent
    # could not read it (an error with stage "network" says why) or predates it.
    network: NetworkFingerprint | None = None
    # The host's limits and the software versions beside the GPUs' (agent/host/,
    # fleet/model/host_limits.py), and the storage suite's figures (agent/storage/,
    # fleet/model/storage.py); None where not read or measured, or from older agents.
    host_limits: HostLimits | None = None
    storage: Storage | None = None


def parse_document(data: Any, origin: str) -> AgentDocument:
    """Validate an agent document, or raise AgentError naming the first bad fields."""
    if isinstance(data, dict) and data.get("format") not in (None, DOCUMENT_FORMAT):
        raise AgentError(
            f"{origin}: document format {str(data.get('format'))[:40]!r} is not "
            f"{DOCUMENT_FORMAT!r}; run the agent that ships with this controller"
        )
    try:
        return AgentDocument.model_validate(data)
    except ValidationError as exc:
        raise AgentError(f"{origin}: invalid agent document: {_problems(exc)}") from None


def _problems(exc: ValidationError) -> str:
    """The first five bad fields, by path, and how many more."""
    problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(document)'}: "
                         f"{err['msg']}" for err in exc.errors()[:5])
    more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
    return problems + more


def read_stored(document_id: int, body: str) -> AgentDocument | str:
    """A stored document, validated again; or, where it no longer passes (stored by an
    older fleet whose checks were looser), why and what to do, so that one old document
    costs its host a line in a report and not the whole report."""
    try:
        return AgentDocument.model_validate_json(body)
    except ValidationError as exc:
        return (f"stored document {document_id} does not pass this fleet's checks "
                f"({_problems(exc)}); an older fleet stored it: probe the host again to "
                "replace it")


def document_schema() -> dict[str, Any]:
    """The JSON schema of fleet-agent/1 documents."""
    return AgentDocument.model_json_schema()

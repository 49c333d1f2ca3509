"""Terminal views of fleet's data, with rich. Every string from a host is shown as text."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fleet import repeat as fleet_repeat
from fleet.model.document import AgentDocument, BenchmarkResult, Gpu, Health
from fleet.sanitize import safe
from fleet.words import power_limit

VERDICT_STYLE = {"yes": "green", "no": "red", "unknown": "yellow"}


def _t(text: str, style: str = "") -> Text:
    """Text from a host: never markup, control characters made visible."""
    return Text(safe(text), style=style)


def _v(value: object, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        value = f"{value:g}"
    return f"{value}{unit}"


def _power(gpu: Gpu) -> str:
    return power_limit(gpu.power_limit_w, gpu.power_limit_min_w, gpu.power_limit_max_w)


def _variant(gpu: Gpu) -> Text:
    variant = gpu.variant
    if variant.form_factor == "unknown":
        return _t(f"unknown ({variant.pci_device_id or 'no PCI id'})", style="yellow")
    return _t(variant.label or f"{variant.family} {variant.form_factor}")


def host_line(document: AgentDocument) -> Text:
    """One line about the host and its software (for a file: where the GPUs were read from)."""
    h = document.host
    if document.source.kind not in ("nvml", "none") and document.source.path:
        return _t(f"GPUs read from {document.source.path} (such a file holds no host facts)")
    where = h.platform + (f" ({h.hypervisor})" if h.hypervisor else "")
    where += f" container={h.container}" if h.container else ""
    return _t(
        f"{h.hostname or '?'}: {h.os or '?'}, kernel {h.kernel or '?'}, "
        f"{h.cpu_count or '?'} x {h.cpu_model or '?'}, {_v(h.memory_total_mib, ' MiB')} RAM, "
        f"{where}; Python {h.python_version or '?'}, torch {h.torch_version or '-'}, "
        f"CUDA runtime {h.cuda_runtime_version or '-'}"
    )


def gpu_table(document: AgentDocument) -> Table:
    """Each GPU's name, variant, virtualization, driver and CUDA, power limit and top SM clock."""
    table = Table(title=f"GPUs ({document.source.kind}"
                  + (f": {escape(document.source.path)})" if document.source.path else ")"))
    for column in ("#", "name", "variant", "virt", "driver / CUDA", "power limit", "max SM"):
        table.add_column(column, overflow="fold")
    for gpu in document.gpus:
        table.add_row(
            _t(str(gpu.index)),
            _t(gpu.name or "-"),
            _variant(gpu),
            _t(_v(gpu.virtualization_mode)),
            _t(f"{_v(gpu.driver_version)} / {_v(gpu.cuda_driver_version)}"),
            _t(_power(gpu)),
            _t(_v(gpu.max_sm_clock_mhz, " MHz")),
        )
    return table


def config_table(document: AgentDocument) -> Table:
    """Each GPU's memory, ECC, MIG, persistence, compute mode, PCIe, NVLink and clock events."""
    table = Table(title="Configuration")
    for column in ("#", "memory", "ECC", "MIG", "persist", "compute", "PCIe", "NVLink",
                   "clocks events"):
        table.add_column(column, overflow="fold")
    for gpu in document.gpus:
        mig = _v(gpu.mig_enabled)
        if gpu.mig_devices:
            mig += " " + ",".join(d.profile or "?" for d in gpu.mig_devices)
        table.add_row(
            _t(str(gpu.index)),
            _t(_v(gpu.memory_total_mib, " MiB")),
            _t(_v(gpu.ecc_enabled)),
            _t(mig),
            _t(_v(gpu.persistence_mode)),
            _t(_v(gpu.compute_mode)),
            _t(f"gen{_v(gpu.pcie_gen_current)} x{_v(gpu.pcie_width_current)}"),
            _t(f"{gpu.nvlink_links_active}/{gpu.nvlink_links_total}"),
            _t(", ".join(gpu.clocks_event_reason_names or []) or "-"),
        )
    return table


SETTING_HEADERS = {
    "application_clocks": "app clocks",
    "locked_gpu_clocks": "lock SM",
    "locked_memory_clocks": "lock mem",
    "power_limit": "power",
    "persistence_mode": "persist",
    "compute_mode": "compute",
    "ecc": "ECC",
}


def capability_table(document: AgentDocument) -> Table:
    """Per GPU and setting, whether the tenant may change it."""
    table = Table(title="May the tenant change it?")
    table.add_column("#")
    for header in SETTING_HEADERS.values():
        table.add_column(header)
    for gpu in document.gpus:
        cells: list[Text] = []
        for setting in SETTING_HEADERS:
            cap = getattr(gpu.capabilities, setting)
            label = cap.verdict + ("*" if cap.method == "probed" else "")
            cells.append(_t(label, style=VERDICT_STYLE[cap.verdict]))
        table.add_row(str(gpu.index), *cells)
    return table


def evidence_lines(document: AgentDocument) -> Text:
    """Per GPU and setting, the evidence behind each capability's verdict."""
    text = Text()
    for gpu in document.gpus:
        for setting in SETTING_HEADERS:
            cap = getattr(gpu.capabilities, setting)
            text.append(f"GPU {gpu.index} {setting}: ", style="bold")
            text.append(cap.verdict, style=VERDICT_STYLE[cap.verdict])
            text.append(f" ({cap.method}) " + safe("; ".join(cap.evidence)) + "\n")
    return text


HEALTH_STYLE = {"healthy": "green", "degraded": "yellow", "failing": "red", "unknown": "yellow"}


def _repairs(health: Health) -> str:
    rows, pages = health.remapped_rows, health.retired_pages
    if rows is not None:
        flags = (", pending" if rows.pending else "") + (", FAILED" if rows.failure else "")
        return f"rows {rows.correctable}+{rows.uncorrectable}{flags}"
    if pages is not None:
        return (f"pages {_v(pages.single_bit)}+{_v(pages.double_bit)}"
                + (", pending" if pages.pending else ""))
    return "-"


def health_table(document: AgentDocument) -> Table:
    """Per GPU, the health verdict and the counters it rests on; the reasons go below it."""
    table = Table(title="Health (agent/health/card.py: RULE)")
    for column in ("#", "verdict", "uncorr. ECC boot/life", "repairs corr+unc", "replays",
                   "Xid"):
        table.add_column(column, overflow="fold")
    for gpu in document.gpus:
        h = gpu.health
        if h is None:
            table.add_row(_t(str(gpu.index)), _t("-"), "", "", "", "")
            continue
        ecc = ("-" if h.ecc is None else
               f"{_v(h.ecc.uncorrected_volatile)}/{_v(h.ecc.uncorrected_aggregate)}")
        rise = "" if h.pcie_replays_during_run is None else f" (+{h.pcie_replays_during_run})"
        xid = "-" if h.xid is None or not h.xid.readable else str(len(h.xid.events))
        table.add_row(_t(str(gpu.index)), _t(h.verdict, style=HEALTH_STYLE[h.verdict]),
                      _t(ecc), _t(_repairs(h)), _t(f"{_v(h.pcie_replays)}{rise}"), _t(xid))
    return table


def health_lines(document: AgentDocument) -> Text:
    """The reasons behind each verdict that is not healthy, one line each."""
    text = Text()
    for gpu in document.gpus:
        h = gpu.health
        if h is None:
            continue
        for reason in h.reasons:
            text.append(f"GPU {gpu.index} {h.verdict}: ", style=HEALTH_STYLE[h.verdict])
            text.append(safe(reason) + "\n")
    text.rstrip()
    return text


def render_fingerprint(document: AgentDocument, verbose: bool = False) -> Group:
    """The fingerprint as the terminal shows it; `verbose` adds the evidence."""
    parts: list[Table | Text] = [host_line(document)]
    if not document.gpus:
        parts.append(_t(f"No NVIDIA GPU: {document.no_gpu_reason or 'none found'}",
                          style="yellow"))
    else:
        parts += [gpu_table(document), config_table(document), capability_table(document)]
        if any(gpu.health is not None for gpu in document.gpus):
            parts += [health_table(document), health_lines(document)]
        if verbose:
            parts.append(evidence_lines(document))
        else:
            parts.append(_t("* = probed with --probe-writes; --verbose shows the evidence",
                              style="dim"))
    for failure in document.errors:
        parts.append(_t(f"error ({failure.stage}): {failure.message}", style="red"))
    return Group(*parts)


def _flags(result: BenchmarkResult) -> Text:
    raised = [name for name, on in result.flags.model_dump().items() if on]
    style = "red" if {"correctness_failed", "contended", "not_steady"} & set(raised) else "yellow"
    capped = result.telemetry.reason_shares.get("sw_power_cap")
    text = ", ".join(f"power_capped ({100 * capped:.0f}%)" if name == "power_capped"
                     and capped is not None else name for name in raised)
    return _t(text or "-", style=style if raised else "")


def _benchmark(result: BenchmarkResult) -> str:
    shape = (f"{result.m}³" if result.m == result.n == result.k
             else f"{result.m}x{result.n}x{result.k}")
    thermal = result.thermal or "cool-start"
    return (f"{result.dtype} {shape} {result.mode}, {thermal}, {result.cache} L2, "
            f"{result.concurrency}, harness {result.harness_version}")


def bench_table(document: AgentDocument) -> Table:
    """One row per GPU, narrow enough for an 80-column terminal: what every row shares (the
    benchmark, the variant) goes in the title, numbers never wrap, and only names and
    flags fold."""
    by_index = {gpu.index: gpu for gpu in document.gpus}

    def name(r: BenchmarkResult) -> str:
        gpu = by_index.get(r.gpu_index)
        if gpu is None:
            return r.provenance.device_name or "-"
        return gpu.variant.label or gpu.name or "-"

    benchmarks = sorted({_benchmark(r) for r in document.benchmarks})
    names = sorted({name(r) for r in document.benchmarks})
    shared = ([f"{len(document.benchmarks)} x {names[0]}"] if len(names) == 1 else []) + \
        (benchmarks if len(benchmarks) == 1 else [])
    table = Table(title=_t("Standard harness" + (f": {', '.join(shared)}" if shared else "")),
                  box=box.SIMPLE_HEAD, padding=0, show_edge=False, title_justify="left")
    table.add_column("GPU", overflow="fold")
    if len(benchmarks) > 1:
        table.add_column("benchmark", overflow="fold")
    # The figure's interval is where a repeat run lands (fleet/repeat.py); the within-run
    # one says only how well these 20 s are known, ten to thirty times narrower.
    for column in ("TFLOP/s", "next run", "within run", "first 20 s", "% peak", "soak",
                   "°C MHz W"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("flags", overflow="fold")
    statistics = set()
    notes: list[str] = []
    for r in document.benchmarks:
        gpu = by_index.get(r.gpu_index)
        flops = 2.0 * r.m * r.n * r.k / 1e9  # GFLOP, so GFLOP / ms = TFLOP/s
        interval = r.measurement.within_run if r.measurement is not None else None
        if r.statistic in (None, "median"):  # before harness 1.2: the median's interval
            interval = ([flops / r.stats.ci95_high_ms, flops / r.stats.ci95_low_ms]
                        if r.stats.ci95_low_ms > 0 else None)
        repeat = fleet_repeat.of_result(r, gpu.variant.label if gpu is not None else None)
        if repeat is not None:
            notes.append(f"GPU {r.gpu_index}: next run {fleet_repeat.words(repeat)}")
        statistics.add(r.statistic or "median")
        peak = None
        if gpu is not None and gpu.variant.datasheet is not None:
            peak = gpu.variant.datasheet.peak_tflops.get(r.dtype)
        table.add_row(
            _t(str(r.gpu_index) if len(names) == 1 else f"{r.gpu_index} {name(r)}"),
            *([_t(_benchmark(r))] if len(benchmarks) > 1 else []),
            f"{r.tflops:.1f}",
            "-" if repeat is None else f"{repeat.low:.0f}-{repeat.high:.0f}",
            "-" if interval is None else f"{interval[0]:.1f}-{interval[1]:.1f}",
            _first_20s(r),
            f"{100 * r.tflops / peak:.1f}%" if peak else "-",
            Text(f"{r.warmup.seconds:.0f} s", style="" if r.warmup.steady else "red"),
            _under_load(r),
            _flags(r),
        )
    headline = {"mean": "the work over the time: 2·M·N·K times the runs over their summed "
                        "time (what a long job gets)",
                "trimmed_mean": "2·M·N·K over the 10%-trimmed mean run time (harness 1.2-1.3)"}
    if len(statistics) == 1 and next(iter(statistics)) in headline:
        table.caption = (f"TFLOP/s: {headline[next(iter(statistics))]}; next run: where a "
                         "repeat run of this card lands, 95% (soaked results); within run: "
                         "how well these ~20 s know their own level, 95%, from ~1 s windows; "
                         "first 20 s: the level of the first 20 s of load and the change "
                         "from it to the soaked level; soak: load before the measurement "
                         "(warm-up with --quick); °C MHz W: under load, as measured"
                         + "".join(f"\n{note}" for note in notes))
        table.caption_justify = "left"
    return table


def _first_20s(r: BenchmarkResult) -> str:
    soak = r.soak
    if soak is None or soak.first_20s_tflops is None or soak.drop is None:
        return "-"
    return f"{soak.first_20s_tflops:.1f} {-100 * soak.drop:+.1f}%"


def _under_load(r: BenchmarkResult) -> str:
    temperature = r.soak.temperature_c if r.soak is not None else None
    if temperature is None:
        temperature = r.telemetry.temperature_c_max
    mhz, watts = r.telemetry.sm_clock_mhz_median, r.telemetry.power_w_median
    return " ".join("-" if v is None else f"{v:.0f}" for v in (temperature, mhz, watts))


def print_bench(console: Console, document: AgentDocument) -> None:
    """Print the host line, the matmul's results, the node and job suites' figures, and
    each error."""
    console.print(host_line(document))
    if document.benchmarks:
        console.print(bench_table(document))
    if document.node:
        from fleet.cli.node_listing import document_records, node_tables

        console.print(node_tables(document_records(document), {0: [
            (setting.name, setting.value, setting.source)
            for setting in document.settings or () if setting.applies is not False]}))
    if document.jobs:
        from fleet.cli import job_listing

        console.print(job_listing.job_tables(job_listing.document_records(document)))
    for failure in document.errors:
        console.print(_t(f"error ({failure.stage}): {failure.message}", style="red"))


def print_fingerprint(console: Console, document: AgentDocument, verbose: bool) -> None:
    """Print the fingerprint; `verbose` adds the evidence."""
    console.print(render_fingerprint(document, verbose))

"""`fleet fingerprint`, `fleet bench` and `fleet schema`: this machine's GPUs, and the
document the agent writes about them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from fleet.cli.display import print_bench, print_fingerprint
from fleet.cli.options import HarnessArgs, err_console, harness_options, reports_errors
from fleet.model.document import document_schema
from fleet.probe.local import bench as run_bench
from fleet.probe.local import fingerprint as run_fingerprint


@click.command()
@click.argument("source", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list with one object per GPU.")
@click.option("--document", "as_document", is_flag=True,
              help="Print the whole fleet-agent/1 document (host facts included) as JSON.")
@click.option("--verbose", "-v", is_flag=True, help="Show the evidence behind each verdict.")
@click.option("--record", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write what NVML answered to this file (nvml-recording/1).")
@click.option("--probe-writes", is_flag=True,
              help="Write each setting's current value back (a no-op) and record whether the "
                   "driver refused. Needs root; changes no setting, but does call NVML setters.")
@click.option("--no-torch", is_flag=True, help="Skip looking for torch and the CUDA runtime.")
@reports_errors
def fingerprint(
    source: Path | None,
    as_json: bool,
    as_document: bool,
    verbose: bool,
    record: Path | None,
    probe_writes: bool,
    no_torch: bool,
) -> None:
    """Fingerprint the NVIDIA GPUs of this machine, or of SOURCE.

    SOURCE may be an NVML recording (nvml-recording/1 JSON), `nvidia-smi -q` text or
    `nvidia-smi -q -x` XML; multi-GPU files give one entry per GPU. Without SOURCE the
    agent reads this machine's driver (read-only), falls back to `nvidia-smi -q -x` when
    NVML cannot be loaded, and on a machine without an NVIDIA GPU says so and exits 0.

    \b
    Examples:
      fleet fingerprint
      fleet fingerprint --json nvidia-smi-q.xml
      nvidia-smi -q > gpu.txt && fleet fingerprint gpu.txt
      fleet fingerprint --record h100.json     # replay it later: fleet fingerprint h100.json
    """
    console = Console()
    progress = None if (as_json or as_document) else (
        lambda event: err_console.print(f"[dim]{event['message']}[/dim]", highlight=False))
    document = run_fingerprint(source, probe_writes, record, not no_torch, progress)
    if as_document:
        click.echo(document.model_dump_json(indent=2))
    elif as_json:
        click.echo(json.dumps([gpu.model_dump(mode="json") for gpu in document.gpus], indent=2))
        if not document.gpus:
            err_console.print(f"No NVIDIA GPU: {document.no_gpu_reason}", highlight=False)
    else:
        print_fingerprint(console, document, verbose)


@click.command()
@harness_options
@click.option("--json", "as_json", is_flag=True, help="Print the whole document as JSON.")
@reports_errors
def bench(as_json: bool, **harness: Any) -> None:
    """Run the standard matmul harness, then the node suite and the job suite, on this
    machine's GPUs.

    Checks the product against float64 on every GPU, then loads them all at once,
    continuously, until throughput and temperature have stopped moving over 30 s (the
    soak: the lent H100s, heating under their power cap, lost 0.4-1.8% from their
    first 20 s of load; flagged not_soaked at the cap, 180 s), then times 20 s of
    back-to-back runs with CUDA events, sampling clocks, power and temperature
    throughout. Prints the soaked
    TFLOP/s (the work over the time: every run's FLOP over their summed time), where a
    repeat run of the card would land (next run, 95%: from the variant's measured
    run-to-run spread and the run's own wander; nothing is stored here, so no history
    of the GPU narrows or widens it, as `fleet probe` does), how well the run knows its
    own level (within run), the level of the first 20 s of load beside it and the drop
    between them, the temperature under load, the conditions (power-capped, thermal,
    contended, not soaked) and the share of the datasheet peak. About 1-2 minutes a
    node (55-122 s on the lent cards).

    Then the job suite, straight after the matmul while the cards hold its heat (a
    matmul keeps them at load while it sets up): a training step (forward, backward,
    fused AdamW) of four decoder layers shaped as Llama 3 8B's and its decode over a KV
    cache at a bandwidth point and a latency point, every GPU at once, soaked by the
    matmul's rule, every attention backend checked against float32 and timed, the
    fastest the headline: tokens/s, TFLOP/s and MFU, decode's GB/s against the GPU's own
    memory copy and HBM (74-80 s after the matmul on lent H100s, 102-116 s alone from
    idle). docs/job-suite.md says what it is not.

    Then the node suite: each GPU's memory bandwidth (a 1 GiB device copy, bytes read
    plus written) and host link (256 MiB host to device and back, pinned and pageable,
    with the PCIe link as it ran), each pair's copy one way and both ways at once with
    peer access and NVML's path, and the node's all-reduce (NCCL, one process per GPU,
    16 MiB to 1 GiB, bus bandwidth as nccl-tests reports it), each beside its datasheet
    figure. Figures are medians of 10 repeats timed with CUDA events (20 for the
    all-reduce); the suite took 6 s on a lent H100 and 22 s on a lent 4x H200.

    \b
    Examples:
      fleet bench                        # every GPU at once, soaked; the node
      fleet bench --suite node           # memory, host links, pairs, all-reduce
      fleet bench --suite job            # the training step and decode alone
      fleet bench --gemm-only --quick    # the cool-start matmul figure alone
      fleet bench --sequential --gpus 0  # one GPU alone
      fleet bench --pause-ms 50          # burst figure, beside the sustained one
      fleet bench --dtype fp32 --size 4096
    """
    options = HarnessArgs(**harness).bench_options()
    progress = None if as_json else (
        lambda event: err_console.print(f"[dim]{event['message']}[/dim]", highlight=False))
    document = run_bench(options, progress)
    if as_json:
        click.echo(document.model_dump_json(indent=2))
    else:
        print_bench(Console(), document)


@click.command()
def schema() -> None:
    """Print the JSON Schema of the agent document (fleet-agent/1).

    \b
    Example:
      fleet schema > fleet-agent-1.schema.json
    """
    click.echo(json.dumps(document_schema(), indent=2, sort_keys=True))



COMMANDS = (fingerprint, bench, schema)

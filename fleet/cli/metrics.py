"""`fleet metrics`: parse, build the store's metrics, print or write them."""

from __future__ import annotations

import sys
from typing import cast

import click

from fleet.cli.options import db_option, err_console, existing_store, reports_errors
from fleet.metrics import FORMATS, Format, metrics_text, write_atomically


@click.command("metrics")
@db_option
@click.option("--sweep", metavar="NAME",
              help="Only the hosts and figures of this sweep, with the findings of its "
                   "newest night. Default: everything stored, and the findings of the "
                   "report over it.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="openmetrics",
              show_default=True,
              help="openmetrics (a scrape), or text: Prometheus' text format 0.0.4, which "
                   "the pushgateway and node_exporter's textfile collector read.")
@click.option("--output", "-o", default="-", show_default=True, metavar="PATH",
              help="Where to write them; - for standard output. A file is written beside "
                   "and renamed into place, so that a reader never sees half of it.")
@reports_errors
def metrics_command(db: str | None, sweep: str | None, fmt: str, output: str) -> None:
    """Print the newest figures and verdicts of every host and GPU as Prometheus metrics.

    Soaked matmul FLOP/s with its repeat interval, the node suite's copies and all-reduce,
    the job suite's headline tokens/s, each GPU's health verdict and action, and the open
    findings by kind, side and provider. GPU series carry dcgm-exporter's labels (gpu,
    UUID, modelName, Hostname) and provider, host, variant. docs/metrics.md lists every
    metric and shows how to wire a scrape, a pushgateway or node_exporter (`fleet sweep
    --textfile`).

    \b
    Examples:
      fleet metrics --db ./fleet.db | less
      fleet metrics --sweep nightly --format text -o /var/www/metrics/fleet.txt
      fleet metrics --format text | curl --data-binary @- \\
          http://pushgateway.internal:9091/metrics/job/fleet
    """
    # A mistyped --db would otherwise print a valid, empty fleet: "all well", to every
    # dashboard that reads it.
    with existing_store(db) as store:
        text = metrics_text(store, sweep, cast(Format, fmt))
    if output == "-":
        sys.stdout.write(text)
        return
    where = write_atomically(text, output)
    err_console.print(f"Metrics ({fmt}) written to {where}", markup=False, soft_wrap=True)


COMMANDS = (metrics_command,)

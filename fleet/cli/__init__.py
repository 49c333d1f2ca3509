"""The `fleet` command line, one module per stage: gpu (this machine), probe (inventory,
probe, agent), cluster (check), store (db, ingest, results), report, sweep (sweep,
schedule, worker), runtime; options holds what they share. Thin: each parses, calls the
core, prints."""

from fleet.cli.main import main

__all__ = ["main"]

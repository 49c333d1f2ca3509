"""What `fleet inventory check` shows of clusters: a narrow table, then each cluster's
hosts and its schedule in lines under it (a host list does not fit a column)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from fleet.cluster.rendezvous import DEFAULT_PORT
from fleet.cluster.schedule import plan
from fleet.inventory.clusters import Cluster, named
from fleet.sanitize import safe
from fleet.words import counted


def _rendezvous(cluster: Cluster) -> str:
    if cluster.rendezvous_host is None:
        return "first healthy"
    if cluster.rendezvous_address is None:
        return cluster.rendezvous_host
    return f"{cluster.rendezvous_host} ({cluster.rendezvous_address})"


def _line(where: str) -> str:
    """The line of "inv.yaml:12:5: providers.lambda.cluster"."""
    spot = where.split(": ", 1)[0].rsplit(":", 2)
    return spot[1] if len(spot) == 3 else "-"


def clusters_view(clusters: Sequence[Cluster]) -> Group:
    """The clusters table, each cluster's hosts and schedule, and its warnings."""
    table = Table(title="clusters", title_justify="left")
    for column in ("cluster", "provider", "nodes", "rendezvous", "port", "interface",
                   "line"):
        table.add_column(column, overflow="fold")
    lines: list[Text] = []
    for cluster in clusters:
        table.add_row(Text(cluster.name), Text(cluster.provider), str(len(cluster.hosts)),
                      Text(_rendezvous(cluster)),
                      str(cluster.rendezvous_port or DEFAULT_PORT),
                      Text(cluster.interface or "-"),
                      _line(cluster.where))
        # The rounds and the estimate do not depend on the seed; the run draws its own.
        schedule = plan(cluster.hosts, seed=0)
        how = ("every pair" if schedule.mode == "every-pair" else "halves against halves")
        lines.append(Text(safe(
            f"{cluster.name}: {named(cluster.hosts)}; the whole cluster, then {how} in "
            f"{counted(schedule.rounds, 'round')}, about {schedule.estimate_s:.0f} s at the "
            "assumed step times (docs/cluster.md)")))
        if cluster.slurm is not None:
            slurm = cluster.slurm
            names = ", ".join(f"{h} as {slurm.nodes[h]}" for h in cluster.hosts
                              if h in slurm.nodes)
            lines.append(Text(safe(
                f"{cluster.name}: steps through Slurm: srun from each step's first node"
                + (f", partition {slurm.partition}" if slurm.partition else "")
                + (f", {' '.join(slurm.srun_options)}" if slurm.srun_options else "")
                + (f"; Slurm nodes {names}" if names else ""))))
        lines += [Text(safe(w), style="yellow") for w in cluster.warnings]
    return Group(table, *lines)

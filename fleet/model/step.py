"""What one step between nodes measured, as the controller holds it once the agents'
`fleet-cluster/1` events (docs/cluster.md, "Between the nodes") were validated and stored.

Plain frozen data, built by the store and the orchestration and read by the judgement
(fleet/analysis/cluster/judgement.py). A step's nodes all report the same figures (each iteration's
time is max-reduced over every rank of every node), so a step is one `StepResult` with
its figures once and each node's own transport beside them. Bandwidths are in GB/s
(10^9 bytes a second), as nccl-tests prints them; link rates elsewhere are in Gb/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
OPS: tuple[Op, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
StepKind = Literal["cluster", "pair", "suspect"]
Launcher = Literal["ssh", "slurm"]


@dataclass(frozen=True)
class StepFigure:
    """One collective at one size, in nccl-tests' definitions.

    op: "all_reduce", "all_gather", "reduce_scatter" or "all_to_all" (the last two run
        by the whole cluster's step alone).
    size_bytes: all_reduce: the buffer reduced; all_gather: the whole gathered buffer;
        reduce_scatter: the whole buffer scattered from; all_to_all: each rank's send
        buffer.
    busbw_gbs: the median over the timed iterations of algbw x 2(n-1)/n (all_reduce) or
        x (n-1)/n (the other three), n the world: what each rank's busiest link carried.
    algbw_gbs: size over the iteration's time.
    time_us: the median iteration's time, the slowest rank's.
    busbw_min_gbs, busbw_max_gbs: the timed iterations' range; None where not kept.
    """

    op: Op
    size_bytes: int
    busbw_gbs: float
    algbw_gbs: float
    time_us: float
    busbw_min_gbs: float | None = None
    busbw_max_gbs: float | None = None


@dataclass(frozen=True)
class NodeTransport:
    """What NCCL's own INFO lines on one node said it used for the step.

    host: the node (the inventory's host name).
    network: NCCL's network transport: "IB" (verbs: InfiniBand and RoCE), "Socket" (TCP),
        a plugin's name ("AWS Libfabric"); None where NCCL did not say (gloo, or no log).
    plugin: the external net plugin NCCL loaded, None where none was (or none said).
    gdrdma: whether the NET connections read and wrote GPU memory directly (GPUDirect
        RDMA, "NET/IB/0/GDRDMA"); None where NCCL did not say.
    paths: the distinct connection paths, "NET/IB/0/GDRDMA", "P2P/CUMEM/read".
    interfaces: the devices NCCL named for the network, as it printed them:
        "mlx5_0:1/IB", "eth0:10.0.0.5<0>".
    version: the NCCL the ranks loaded, as its log says ("2.28.9+cuda13.0"); None where
        it did not say.
    set_by_environment: NCCL's "NAME set by environment to VALUE" lines as "NAME=VALUE":
        what NCCL read from its environment, which NCCL fills from its configuration
        files too (~/.nccl.conf, /etc/nccl.conf), so not only what the run set.
    """

    host: str
    network: str | None
    plugin: str | None
    gdrdma: bool | None
    paths: tuple[str, ...] = ()
    interfaces: tuple[str, ...] = ()
    set_by_environment: tuple[str, ...] = ()
    version: str | None = None


@dataclass(frozen=True)
class PortCounters:
    """One node's RDMA ports' error counters around a step (agent/network/counters.py).

    host: the node.
    ports: how many ports were read before and after the step.
    rose: (port, counter, rise) for each error counter that rose during the step,
        "mlx5_0/1", "link_downed", 1.
    reset: "PORT COUNTER" for each counter that went down between the reads (reset).
    """

    host: str
    ports: int
    rose: tuple[tuple[str, str, int], ...] = ()
    reset: tuple[str, ...] = ()


@dataclass(frozen=True)
class NicFigure:
    """One RDMA port's ib_write_bw in a pair step (agent/network/perftest.py): its place
    in the node's report (`index`), the other node's port it met (`peer`, "mlx5_0/1";
    None where it met none), the port's rate and the average, Gb/s; `error` where there
    is no figure."""

    index: int
    device: str
    port: int
    rate_gbps: float | None
    gbps: float | None
    gdr: bool = False
    error: str | None = None
    peer: str | None = None

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass(frozen=True)
class NodeNics:
    """One node's side of a pair step's per-NIC RDMA test: "server" (node 0) or
    "client"; `skipped` why none ran (no ib_write_bw, no active RDMA port)."""

    host: str
    role: str
    skipped: str | None = None
    tests: tuple[NicFigure, ...] = ()


@dataclass(frozen=True)
class StepResult:
    """One step of a cluster's schedule (fleet/cluster/schedule.py) as it ran.

    cluster: the cluster's name (the inventory's `cluster:`).
    step_id: the step's id, as the controller gave it to the agents (`--step`).
    kind: "cluster" (every node at once), "pair" (one pair of a pair round) or "suspect"
        (one pair of the suspects' round: a suspect against a known-good node).
    round: the round, 1-based within its kind; None for the cluster step.
    hosts: the step's nodes in node-rank order (a pair: the rendezvous node first).
    ranks_per_node: G, the ranks (GPUs) each node ran.
    backend: "nccl" or "gloo" (gloo runs over TCP whatever the node has).
    algo: NCCL_ALGO the ranks were given ("Ring"), None where NCCL chose.
    figures: every op at every size; () for a step that failed.
    transports: each node's, in `hosts` order; a node that sent no event has none.
    error: why the step failed (the nodes' `errors`, or the controller's own: a node
        that sent no event, a timeout), None where it ran.
    counters: each node's RDMA error counters around the step, in `hosts` order; a node
        that sent none (no event, or an agent before them) has none.
    launcher: "ssh" (fleet's own connections, the agent started on each node) or
        "slurm" (srun on the cluster's Slurm, the node's own job environment).
    nics: each node's side of the per-NIC RDMA test, in `hosts` order; () where it did
        not run (not asked, the whole cluster's step, an agent before it).
    """

    cluster: str
    step_id: str
    kind: StepKind
    round: int | None
    hosts: tuple[str, ...]
    ranks_per_node: int
    backend: str
    algo: str | None
    figures: tuple[StepFigure, ...] = ()
    transports: tuple[NodeTransport, ...] = ()
    error: str | None = None
    counters: tuple[PortCounters, ...] = ()
    launcher: Launcher = "ssh"
    nics: tuple[NodeNics, ...] = ()

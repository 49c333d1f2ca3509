"""One node's report of a step between nodes (`fleet-cluster/1`, docs/cluster.md): what
`python -m agent cluster` prints last. Validated as the agent document is (fleet/model/
base.py): a host is not trusted, so strings and lists are bounded, numbers finite and
unknown fields refused, before anything of it is compared or stored.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from fleet.model.base import Name, Seconds, Strict, Text

SCHEMA = "fleet-cluster/1"
Op = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
Short = Annotated[str, StringConstraints(max_length=128)]
Gbs = Annotated[float, Field(ge=0, le=1e6)]
Bytes = Annotated[int, Field(ge=1, le=1 << 40)]
Ranks = Annotated[int, Field(ge=1, le=1 << 20)]


class StepPlace(Strict):
    """Where the node stood in the step: its rank among the nodes, and the rendezvous."""

    id: Short | None
    nodes: Annotated[int, Field(ge=2, le=1 << 16)]
    node_rank: Annotated[int, Field(ge=0, le=1 << 16)]
    ranks_per_node: Annotated[int, Field(ge=1, le=64)]
    world: Ranks
    address: Short
    port: Annotated[int, Field(ge=1, le=65535)]

    @model_validator(mode="after")
    def _consistent(self) -> StepPlace:
        if self.node_rank >= self.nodes:
            raise ValueError(f"node_rank {self.node_rank} is not below nodes {self.nodes}")
        if self.world != self.nodes * self.ranks_per_node:
            raise ValueError(f"world {self.world} is not nodes x ranks_per_node "
                             f"({self.nodes} x {self.ranks_per_node})")
        return self


class StepGpu(Strict):
    """A GPU this node's ranks ran on."""

    index: Annotated[int, Field(ge=0, le=255)]
    uuid: Short | None = None
    name: Short | None = None


class StepFigureReport(Strict):
    """One collective at one size, by nccl-tests' definitions, the slowest rank's times."""

    op: Op
    size_bytes: Bytes
    dtype: Literal["float32", "bfloat16", "float16"]
    ranks: Ranks
    warmup: Annotated[int, Field(ge=0, le=10_000)]
    iterations: Annotated[int, Field(ge=1, le=100_000)]
    checked: bool
    time_us: Annotated[float, Field(gt=0, le=1e12)]
    algbw_gbs: Gbs
    busbw_gbs: Gbs
    busbw_min_gbs: Gbs
    busbw_max_gbs: Gbs
    samples_busbw_gbs: list[Gbs] = Field(max_length=100_000)

    @model_validator(mode="after")
    def _ordered(self) -> StepFigureReport:
        if not self.busbw_min_gbs <= self.busbw_gbs <= self.busbw_max_gbs:
            raise ValueError(f"{self.op} at {self.size_bytes} bytes: busbw {self.busbw_gbs} "
                             f"is not within its min {self.busbw_min_gbs} and max "
                             f"{self.busbw_max_gbs}")
        return self


class StepTransportReport(Strict):
    """What NCCL's log on this node said it used between the nodes."""

    network: Short | None = None
    plugin: Short | None = None
    gdrdma: bool | None = None
    transports: dict[Name, Annotated[int, Field(ge=0, le=1 << 20)]] = Field(
        default_factory=dict, max_length=16)
    paths: list[Short] = Field(default_factory=list, max_length=32)
    interfaces: list[Short] = Field(default_factory=list, max_length=64)
    set_by_environment: list[Text] = Field(default_factory=list, max_length=64)
    # The NCCL the ranks loaded, as its log says ("2.28.9+cuda13.0"); None: not said.
    version: Annotated[str, StringConstraints(max_length=64, pattern=r"^[\w.+-]+$")] | None = None


class StepError(Strict):
    """Why the step failed on this node."""

    stage: Name
    message: Annotated[str, StringConstraints(max_length=2048)]


# An RDMA device's port, "mlx5_0/1", and the error counters agent/network/counters.py reads.
Port = Annotated[str, StringConstraints(max_length=80, pattern=r"^[\w.-]{1,64}/\d{1,3}$")]
Counter = Literal["link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
                  "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
                  "local_link_integrity_errors", "excessive_buffer_overrun_errors",
                  "port_xmit_discards", "port_xmit_constraint_errors",
                  "port_rcv_constraint_errors", "VL15_dropped"]


class StepCounters(Strict):
    """The node's RDMA ports' error counters around the step (agent/network/counters.py):
    how many ports were read both times, what rose on which, and which were reset."""

    ports: Annotated[int, Field(ge=0, le=64)]
    rose: dict[Port, dict[Counter, Annotated[int, Field(ge=1, le=1 << 62)]]] = Field(
        default_factory=dict, max_length=64)
    reset: list[Annotated[str, StringConstraints(
        max_length=160, pattern=r"^[\w.-]{1,64}/\d{1,3} [\w]{1,64}$")]] = Field(
            default_factory=list, max_length=64)


NicText = Annotated[str, StringConstraints(max_length=300)]
# Strict: a JSON true is no bandwidth.
Gbps = Annotated[float, Field(ge=0, le=100_000, strict=True)]


class NicTest(Strict):
    """One RDMA port's ib_write_bw against the other node's `peer` port
    (agent/network/perftest.py): the average in Gb/s, or why there is none (no peer:
    the other node has no such port, or it is not Active)."""

    device: Annotated[str, StringConstraints(pattern=r"^[\w.-]{1,64}$")]
    port: Annotated[int, Field(ge=0, le=255, strict=True)]
    peer: Port | None = None
    rate_gbps: Gbps | None = None
    gbps: Gbps | None = None
    peak_gbps: Gbps | None = None
    gdr: bool = False
    seconds: Annotated[float, Field(ge=0, le=86_400, strict=True)]
    error: NicText | None = None


class StepNics(Strict):
    """The node's side of a pair's per-NIC RDMA test: node 0 serves, node 1 connects;
    the ports paired by name, or by order where the nodes' names differ."""

    tool: Literal["ib_write_bw"]
    role: Literal["server", "client"]
    skipped: NicText | None = None
    paired_by: Literal["name", "order"] | None = None
    tests: list[NicTest] = Field(default_factory=list, max_length=32)

    @model_validator(mode="after")
    def _skipped_tests_nothing(self) -> StepNics:
        if self.skipped is not None and self.tests:
            raise ValueError("a side that skipped the test has no tests")
        if self.skipped is None and self.tests and self.paired_by is None:
            raise ValueError("tests need paired_by: name or order")
        return self


class ClusterReport(Strict):
    """One node's report of one step."""

    model_config = Strict.model_config | {"populate_by_name": True}

    schema_: Literal["fleet-cluster/1"] = Field(alias="schema")
    agent_version: Short
    hostname: Annotated[str, StringConstraints(max_length=255)]
    step: StepPlace
    backend: Literal["nccl", "gloo"]
    algo: Short | None = None
    settings: dict[Name, Text] = Field(default_factory=dict, max_length=64)
    gpus: list[StepGpu] = Field(default_factory=list, max_length=64)
    figures: list[StepFigureReport] = Field(default_factory=list, max_length=64)
    transport: StepTransportReport = Field(default_factory=StepTransportReport)
    started_at: Short
    wall_s: Seconds
    errors: list[StepError] = Field(default_factory=list, max_length=64)
    # None from an agent before issue 57's counters.
    counters: StepCounters | None = None
    # The per-NIC RDMA test of a pair step (`--nic-test`); None where it did not run.
    nics: StepNics | None = None

    @property
    def failed(self) -> bool:
        """Whether the node says the step failed (no figures, or an error)."""
        return bool(self.errors) or not self.figures

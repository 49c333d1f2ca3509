"""The judgement on a cluster's steps between nodes (issue 46): each pair against what its
fabric should give, the slow node found by its pairs, the cause named where the node's
network fingerprint shows it.

**What a pair should give.** A node's fabric is its Active fabric ports (InfiniBand,
RoCE, EFA: fleet/model/network.py) each at the rate it should run at, the fastest Active
port of its kind on the node (network.py's below-rate reference: IB rates are discrete,
and a port below its siblings is a cable, transceiver or switch port). At most one port
a rank is counted: on HGX boards each GPU drives the NIC under its own PCIe switch, and a
node running fewer ranks than it has ports is not promised the rest (nccl-tests #232: one
H100 a node over four NICs measured about 50 GB/s, with NCCL_ALGO=Tree). A pair's
expectation is the lesser node's total, in GB/s (Gb/s / 8).

**The figure judged.** The all_reduce's bus bandwidth at its largest size, NCCL_ALGO=Ring
(the agent's `--algo Ring`). In a ring of 2 x G ranks every link, the network's included,
carries the same bytes, and busbw is what each link carried (nccl-tests' PERFORMANCE.md);
NCCL spreads its rings over the NICs, one set of channels a NIC, so the pair's busbw is
bounded by the ports' total: 8 x 400 Gb/s is 400 GB/s. The all_gather is judged the same
way, since its ring moves (n-1)/n of its buffer over every link and nccl-tests' busbw
for it is again what each link carried; the pair is as short as its shorter collective,
and the verdict row names which one that was. Healthy NDR nodes are reported at 46-48 GB/s
a port through nccl-tests (issue 46's brief; not checked against a primary source here),
92-96% of the port: above the line, with a margin.

- **pair-short** (fault): a figure under 90% of the expectation, the pass criterion of
  NVIDIA's multinode certification test between two nodes (Mellanox/ngc_multinode_perf:
  RDMA write/read/send between the nodes pass at "90% of the port link speed", README.md;
  the speed read from /sys/class/infiniband/DEV/ports/1/rate, common.sh `get_port_rate`).
  That test measures verbs, not NCCL; fleet holds NCCL's ring to the same line.
  The cause, where the step or the fingerprint shows it:
  - **socket fallback**: both nodes have Active fabric ports and NCCL's network was
    "Socket" on one. Whose: the renter's where the run's own environment set
    NCCL_NET=Socket or NCCL_IB_DISABLE (NCCL's user guide, "Environment Variables");
    unsettled where NCCL read such a setting the run did not set (its configuration
    files: ~/.nccl.conf is the renter's, /etc/nccl.conf the image's), where a setting
    that can take the fabric away was set (NCCL_IB_HCA, NCCL_NET_PLUGIN, another
    NCCL_NET), or where the run's settings were not recorded; the provider's where the
    run asked for none of it (no RDMA library or net plugin in the image, the fabric not
    passed through). The same three parties as issue 44's fleet/analysis/node/whose.py.
  - **GPUDirect off**: the fingerprint says GPUDirect RDMA is off (no peer-memory module,
    no DMA-BUF) and NCCL's connections were not GDRDMA: every transfer staged through
    host memory. The provider's (network.py's gdr-off).
  - **port down**: a fabric port not Active (network.py's port-down). The expectation
    counts Active ports only, but the GPUs the port served send over the others, which
    then carry more than their share and set the pace of every channel.
  - **below rate**: a port of either node Active below its rate (network.py's below-rate).
    NCCL splits the traffic evenly over its channels, so the slowest port sets the pace
    of all: the evidence gives the pace of the node's ports at the slow port's rate.
  - **far NIC**: a fabric NIC whose nearest GPU is PHB, NODE or SYS (network.py's
    far-nic): NCCL drops GPUDirect RDMA beyond NCCL_NET_GDR_LEVEL.
  - **GPUDirect unused**: NCCL said its connections were not GDRDMA though the node allows
    it and no NIC is far: the renter's where the run set NCCL_NET_GDR_LEVEL to LOC or 0,
    else as socket fallback's parties go (the platform's PCIe path where nothing asked).
  - none shown: "short, cause not shown by the fingerprint"; the provider's unless the
    run held settings that can move an all-reduce (agent/source/settings.py), then
    unsettled, as whose.py's `whose_apart`.
- **pair-above-fabric** (info): a figure above 105% of the ports' total is not the
  network's: NCCL's tree algorithms on two nodes report a bus bandwidth above the
  network's (nccl-tests #196, #160; NCCL #946), or the ranks shared a host. Not judged.
- **pair-no-fabric** (info): a node of the pair has no fabric NIC (a VM with virtio eth0
  only): NCCL ran over sockets, and there is no RDMA fabric to judge the figure by.
- **pair-unjudged** (info): no expectation for another reason: gloo (TCP whatever the
  node has), a port whose rate nothing reliable says (EFA), no fingerprint.
- **socket-fallback** (fault): socket fallback on a step whose figure is not otherwise
  judged (the whole-cluster step, or a pair of unknown rate).

**The slow node, found by its pairs** (fleet/analysis/cluster/standings.py's rule,
imported): each
node's pass ratio over its judged pair steps (a step that failed, or a pair not judged,
says nothing of the fabric); a node under `DEFAULT_THRESHOLD` beside a partner that is
known good is the **slow-node** (fault); any other suspect of standings.py's `sort_out` (a
failure no bad partner explains) is a **suspect** (info: test it again against a
known-good node). No node known good while judged pairs were short, among three nodes or
more, and no one node in every short pair: **shared-fault**, the fabric, a switch, the
rendezvous or NCCL's settings (one node in every short pair is the suspect instead; two
nodes' one pair cannot say whose node failed; its own finding says all there is). Pair
steps failing whichever nodes met are a **shared-fault** of the steps, not the fabric's.
A short pair beside the slow node says so in its evidence.

**step-failed** (fault): a step with an error, naming its nodes and the error;
**node-steps-failed** (fault): a node most of whose pair steps failed while its partners
ran with others (a step that ran clears its nodes of a failure, judged or not: fleet/
analysis/pair_evidence.py); **every-step-failed** (fault) instead where no step ran.
**node-lost** (fault): a node that took part in no step (unreachable over SSH, no
runtime, its meeting point not reached), stored as a failed one-node cluster step; the
others were measured without it. A pair not judged says why in its cause.
**The whole cluster** (its own step, every node at once, NCCL's own choice of algorithm
as a renter's job gets it): all-reduce, all-gather and reduce-scatter at their largest
size (the agent's sweep runs on to 16 GiB where memory and a 30-s budget a size allow)
against the least node's fabric, since a ring moves the same bytes over every node's ports
whatever the world. The lines are set by published healthy clusters, not by the pairs'
(tests/fixtures/nccl-tests/multinode/, tests/analysis/test_cluster_published.py): one
cluster of 8 x 400G H100 nodes read 80-81% of its ports' rate at 4 and 8 nodes under
NCCL's defaults and 98% at 8 nodes with more CTAs and queue pairs (nccl-tests #309); 128
nodes with the ring forced 92% at 16 GiB (nccl-tests #322). So an all-reduce under
`WHOLE_FAULT_SHARE` (75%) is **cluster-short** (fault): beside pairs that all passed it is
the fabric between them (switches' oversubscription, routing; the provider's, as
providers' own acceptance fails a cluster on its whole all-reduce: Azure's node health
checks, NVIDIA's DGX Cloud validation), beside short pairs it points at them; whose as a
short pair's. An all-reduce from 75% to the pairs' 90%, and an all-gather or
reduce-scatter under 90%, is **cluster-below-rate** (info): what healthy clusters give
under NCCL's defaults, with the tuning that lifted one to 98%; the gathers are said, not
disputed, since no published table of a healthy cluster's all-gather or reduce-scatter
was found to set a fault line by. Not judged, and said why: a largest size under
`WHOLE_MIN_BYTES` (4 GiB: healthy runs read 28% at 1 GiB and 53% at 2 GiB over 128 nodes,
72% at 1 GiB over 8; a fabric so slow that the agent's budget stops its sweep earlier is
the socket fallback's or a short pair's finding), all-gather and reduce-scatter over more
than `GATHER_JUDGED_NODES` nodes (published reduce-scatter busbw falls with the node
count, 360 to 260 GB/s from 4 to 128 H100 nodes: NCCL #1229; an all-gather of 32 nodes
read 200 GB/s beside its all-reduce's 340: NCCL #1218), and the all-to-all (the share of
its bytes that leaves a node depends on the nodes and GPUs; no published pass line for it
was checked). On two nodes NCCL's default tree reads above the ports' total: the pair
step, ring forced, judges those two. **cluster-figure** (info): every whole-cluster
figure with its share, against the slowest pair.

**The ports' counters** (fleet/analysis/cluster/counters.py): each node's RDMA error
counters read before and after every step; **link-flap** (fault, the provider's) for a
port whose link went down meanwhile, **port-errors** for a node whose ports counted other
errors: a fault naming the ports where the node was in a step judged short, information
where every step it was in passed.

**The ports one by one** (fleet/analysis/cluster/nics.py, with `--nic-test`): each pair's
RDMA ports tested against each other with ib_write_bw; **nic-short** (fault: the
provider's through GPUDirect, unsettled from host memory) for a port pair under 90% of its
rate, **nic-untested** (info) where the test could not run.

Pure: data in, findings out; nothing prints. Every text is plain, with its units. What
a node's fabric carries is fleet/analysis/cluster/fabric.py; the slow node, found by its pairs,
fleet/analysis/cluster/slow_node.py; the verdicts' types fleet/analysis/cluster/verdicts.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from agent.source import settings as families
from fleet.analysis.cluster.counters import counter_findings
from fleet.analysis.cluster.fabric import NodeFabric, gbs, node_fabric
from fleet.analysis.cluster.nics import nic_findings
from fleet.analysis.cluster.slow_node import SOURCE_PAIRS, beside, judge_nodes, one_party
from fleet.analysis.cluster.verdicts import (
    ClusterFinding,
    ClusterJudgement,
    NodeVerdict,
    PairVerdict,
    Rule,
    Severity,
)
from fleet.analysis.node.network import (
    SOURCE_DISTANCE,
    SOURCE_GDR,
    SOURCE_PORT,
    SOURCE_RATE,
    judge_network,
)
from fleet.analysis.node.whose import Party
from fleet.errors import ClusterError
from fleet.model.network import NetworkFingerprint
from fleet.model.step import NodeTransport, StepFigure, StepResult
from fleet.words import counted

# The judgement's data and the fabric's arithmetic live beside it; named here too, as the
# report, the store and the orchestration import them.
__all__ = ["SOURCE_PAIRS", "ClusterFinding", "ClusterJudgement", "NodeFabric", "NodeVerdict",
           "PairVerdict", "Rule", "Severity", "judge_cluster", "node_fabric",
           "transport_words"]

PASS_SHARE = 0.90  # ngc_multinode_perf's pass criterion: 90% of the port link speed
ABOVE_SHARE = 1.05  # above this share of the ports' total the figure is not the network's
# The whole cluster under NCCL's defaults (the module's docstring: published healthy
# clusters read 80-98% of their ports' rate from 4 GiB): a fault under this share, said
# between it and PASS_SHARE, judged only from this size and, for all-gather and
# reduce-scatter, up to this many nodes.
WHOLE_FAULT_SHARE = 0.75
WHOLE_MIN_BYTES = 4 << 30
GATHER_JUDGED_NODES = 16

SOURCE_PASS = ("NVIDIA's multinode certification test (Mellanox/ngc_multinode_perf, "
               "README.md and common.sh get_port_rate): RDMA between two nodes passes at "
               "90% of the port link speed read from sysfs; nccl-tests' busbw is what each "
               "link carried (PERFORMANCE.md)")
SOURCE_TREE = ("nccl-tests #196 (NCCL's maintainer: on two nodes NCCL uses tree algorithms, "
               "which can go beyond the network; force NCCL_ALGO=Ring to measure it) and "
               "#160; NCCL #946: tree on two nodes up to about twice the network speed")
SOURCE_SOCKET = ("NCCL user guide, Environment Variables: NCCL_NET=Socket selects TCP "
                 "sockets, NCCL_IB_DISABLE=1 keeps NCCL off InfiniBand and RoCE, "
                 "NCCL_IB_HCA and NCCL_NET_PLUGIN choose the devices and the plugin; "
                 "NCCL reads ~/.nccl.conf and /etc/nccl.conf where the environment is silent")
SOURCE_GDR_LEVEL = ("NCCL user guide, Environment Variables: NCCL_NET_GDR_LEVEL (LOC: never "
                    "GPUDirect RDMA)")
SOURCE_SETTINGS = ("agent/source/settings.py: the settings that can move an all-reduce "
                   "(NCCL's, CUDA's, torch.distributed's), as fleet/analysis/node/whose.py")
SOURCE_NONE = ("the node's network fingerprint: no InfiniBand, RoCE or EFA port, so NCCL "
               "can only use TCP sockets between the nodes")
SOURCE_STEP = "the step's own errors (fleet-cluster/1 `errors`, or the controller's)"
SOURCE_WHOLE = "the whole-cluster step and the pair steps of the same run"
SOURCE_WHOLE_LINE = ("published healthy clusters of 8 x 400G H100 nodes: 80-81% of the "
                     "ports' rate at 4 and 8 nodes under NCCL's defaults, 98% at 8 nodes "
                     "with NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2 (NVIDIA/nccl-tests "
                     "#309), 92% at 128 nodes with the ring forced (#322)")

# Settings that tell NCCL to use sockets, and those that can take the fabric away.
_SOCKET_MAY = ("NCCL_IB_HCA", "NCCL_NET_PLUGIN", "NCCL_IBEXT_DISABLE", "NCCL_NET")
_GDR_MAY = ("NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_DMABUF_ENABLE")
# What fleet sets for its own ranks (docs/cluster.md): not the run's settings.
_FLEETS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


# --- words -----------------------------------------------------------------------------

def size_words(size: int) -> str:
    """A size in bytes as "1 GiB", "256 MiB"."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit:
            return f"{size // unit} {name}" if size % unit == 0 else f"{size / unit:.1f} {name}"
    return f"{size} B"


def pair_words(hosts: Sequence[str]) -> str:
    """"a and b" for a pair, "a, b, c" for more."""
    return " and ".join(hosts) if len(hosts) <= 2 else ", ".join(hosts)


def _names(interfaces: Iterable[str]) -> list[str]:
    """NCCL's "eth0:10.0.0.5<0>" and "mlx5_0:1/IB" as device names, without addresses."""
    return list(dict.fromkeys(i.split(":", 1)[0] for i in interfaces if i))


def _transport_words(transport: NodeTransport | None, net: str = "") -> str:
    if transport is None or not transport.network:
        return "not said"
    gdr = {True: " GDRDMA", False: " no GDRDMA", None: ""}[transport.gdrdma]
    return net + transport.network + ("" if transport.network.lower() == "socket" else gdr)


def transport_words(step: StepResult, net: str = "") -> str:
    """NCCL's network on the step's nodes, as its log said: "IB GDRDMA" where every node
    says the same, else "a: IB GDRDMA; b: Socket"; `net` before each ("NET/")."""
    if step.backend != "nccl":
        return f"{step.backend} (TCP)"
    by_host = {t.host: t for t in step.transports}
    said = [(h, _transport_words(by_host.get(h), net)) for h in step.hosts]
    if len({w for _, w in said}) == 1:
        return said[0][1]
    return "; ".join(f"{h}: {w}" for h, w in said)


def largest(figures: Iterable[StepFigure], op: str) -> StepFigure | None:
    """The figure of `op` at its largest size, the one a verdict rests on."""
    mine = [f for f in figures if f.op == op]
    return max(mine, key=lambda f: f.size_bytes) if mine else None


# --- settings and whose ----------------------------------------------------------------

@dataclass(frozen=True)
class _RanUnder:
    """What a node's ranks ran under: `env` the run's own environment (None: not
    recorded), `read` what NCCL said it read from its environment, files included."""

    env: Mapping[str, str] | None
    read: Mapping[str, str]


def _ran_under(host: str, step: StepResult,
               settings: Mapping[str, Mapping[str, str]] | None) -> _RanUnder:
    env = None if settings is None else settings.get(host)
    read: dict[str, str] = {}
    for transport in step.transports:
        if transport.host == host:
            for text in transport.set_by_environment:
                name, sep, value = text.partition("=")
                if sep:
                    read[name.strip()] = value.strip()
    return _RanUnder(env, read)


def fleets_own(name: str) -> bool:
    """Whether fleet sets the setting itself on some step (NCCL_ALGO=Ring on the pairs,
    not on the whole cluster; the log and interface settings on every step): a run's
    settings merged over its steps differ in it from run to run by which step came
    last."""
    return name in _FLEETS or name == "NCCL_ALGO"


def _fleets(name: str, value: str, step: StepResult) -> bool:
    """Whether fleet set it for its own ranks (docs/cluster.md: --algo, --interface,
    NCCL's log)."""
    return name in _FLEETS or (name == "NCCL_ALGO" and step.algo is not None
                               and value.strip().lower() == step.algo.lower())


def _says_socket(name: str, value: str) -> bool:
    if name == "NCCL_NET":
        return value.strip().lower() == "socket"
    return name == "NCCL_IB_DISABLE" and value.strip() not in ("", "0")


def _says_no_gdr(name: str, value: str) -> bool:
    return name == "NCCL_NET_GDR_LEVEL" and value.strip().upper() in ("LOC", "0")


def _listed(pairs: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{n}={v}" for n, v in pairs)


def _settings_whose(ran: _RanUnder, decisive: Callable[[str, str], bool],
                    may: tuple[str, ...], what: str, nothing: str) -> tuple[Party, str]:
    """Whose `what` is, from the settings that ask for it (`decisive`) or can (`may`);
    `nothing`: the provider's words where the run asked for none of it."""
    env = dict(ran.env) if ran.env is not None else None
    set_by_run = [(n, v) for n, v in (env or {}).items() if decisive(n, v)]
    if set_by_run:
        return ("renter", f"{what}: the run set {_listed(set_by_run)} in its environment: "
                "the renter's to unset, not the provider's")
    from_files = [(n, v) for n, v in ran.read.items()
                  if decisive(n, v) and (env is None or n not in env)]
    if from_files:
        return ("unsettled", f"{what}: NCCL read {_listed(from_files)}, which the run's "
                "environment did not set: from NCCL's configuration files (~/.nccl.conf is "
                "the renter's, /etc/nccl.conf the image's); remove it and run the pair "
                "again before disputing it")
    if env is None:
        return ("unsettled", f"{what}: the run's settings were not recorded, so whether it "
                "asked for this cannot be told; run the pair again with fleet's agent "
                "recording them before disputing it")
    maybe = [(n, v) for n, v in {**ran.read, **env}.items() if n in may]
    if maybe:
        return ("unsettled", f"{what}: the run held {_listed(maybe)}, which can do this, "
                "and was not measured again without it: unset it and run the pair again "
                "before disputing it")
    return ("provider", nothing)


def _suspects(ran: Iterable[_RanUnder], step: StepResult) -> list[tuple[str, str]] | None:
    """The settings of the step's nodes that can move an all-reduce, less fleet's own;
    None where a node's were not recorded."""
    found: dict[str, str] = {}
    for node in ran:
        if node.env is None:
            return None
        for name, value in {**node.read, **node.env}.items():
            if (families.moves(name, "allreduce") and not families.kept(name)
                    and not _fleets(name, value, step)):
                found.setdefault(name, value)
    return sorted(found.items())


# --- one step's causes -----------------------------------------------------------------

@dataclass(frozen=True)
class _Cause:
    name: str  # "socket fallback", "GPUDirect off", "below rate", "far NIC", "GPUDirect unused"
    host: str
    words: str
    whose: Party
    action: str
    source: str


def _socket_causes(step: StepResult, fabrics: Mapping[str, NodeFabric],
                   settings: Mapping[str, Mapping[str, str]] | None) -> list[_Cause]:
    """Nodes that ran over sockets though every node of the step has Active fabric ports
    (`fabrics`: the nodes that have a fabric NIC)."""
    ready = {h: fabrics[h] for h in step.hosts if h in fabrics and fabrics[h].active}
    if step.backend != "nccl" or len(ready) < len(step.hosts):
        return []
    causes = []
    for transport in step.transports:
        fabric = ready.get(transport.host)
        if fabric is None or (transport.network or "").lower() != "socket":
            continue
        over = _names(transport.interfaces)
        what = (f"NCCL ran over TCP sockets on {transport.host}"
                f"{' (' + ', '.join(over) + ')' if over else ''} though it has "
                f"{counted(len(fabric.active), 'Active fabric port')}")
        whose, why = _settings_whose(
            _ran_under(transport.host, step, settings), _says_socket, _SOCKET_MAY,
            what, f"{what}, and nothing the run set asked for sockets: NCCL found no "
            "usable fabric transport (libibverbs or the net plugin missing from the "
            "image, the plugin not loaded, or the fabric not passed through to it)")
        causes.append(_Cause(
            "socket fallback", transport.host, why, whose,
            "Unset what told NCCL to use sockets and run the pair again"
            if whose == "renter" else
            "Run the pair again with NCCL_DEBUG=INFO and read why NCCL left the fabric "
            "(NET/IB : No device found, a plugin not loaded); ask the provider for the "
            "RDMA libraries and plugin in the image where nothing the run set asked "
            "for sockets", SOURCE_SOCKET))
    return causes


def _node_causes(step: StepResult, host: str, network: NetworkFingerprint,
                 fabric: NodeFabric, settings: Mapping[str, Mapping[str, str]] | None
                 ) -> list[_Cause]:
    """What the node's fingerprint (and NCCL's GDRDMA word) shows of a short figure."""
    transport = next((t for t in step.transports if t.host == host), None)
    if transport is not None and transport.network and transport.network.lower() == "socket":
        return []  # the fabric was not used: its ports' state is not what held it
    said = {f.rule: f for f in judge_network(host, network)}
    causes = []
    down = said.get("port-down")
    if down is not None and fabric.active:
        causes.append(_Cause(
            "port down", host, f"{down.evidence}: not counted in the expectation, but the "
            "GPUs it served send over the remaining ports, which then carry more than their "
            "share and set the pace of every channel", "provider", down.action, SOURCE_PORT))
    slow = said.get("below-rate")
    if slow is not None:
        rates = [d.rate_gbps for d in fabric.active if d.name in fabric.counted
                 and d.rate_gbps is not None]
        pace = (f"; the {len(rates)} ports at the slowest one's pace carry "
                f"{gbs(len(rates) * min(rates) / 8)} (NCCL splits the traffic evenly over "
                "its channels, so the slowest port sets the pace of all)" if rates else "")
        causes.append(_Cause("below rate", host, f"{slow.evidence}{pace}", "provider",
                             slow.action, SOURCE_RATE))
    far = said.get("far-nic")
    if far is not None:
        causes.append(_Cause("far NIC", host, far.evidence, "provider", far.action,
                             SOURCE_DISTANCE))
    gdr_used = None if transport is None else transport.gdrdma
    if network.gdr.state == "off" and gdr_used is not True:
        causes.append(_Cause(
            "GPUDirect off", host,
            f"GPUDirect RDMA off on {host} ({network.gdr.basis})"
            + ("; NCCL's connections were not GDRDMA" if gdr_used is False else ""),
            "provider", said["gdr-off"].action if "gdr-off" in said else
            "Load nvidia-peermem or run the open kernel modules on Linux 5.12 or newer",
            SOURCE_GDR))
    elif gdr_used is False and far is None:
        what = f"NCCL's connections on {host} were not GDRDMA though the node allows it"
        whose, why = _settings_whose(
            _ran_under(host, step, settings), _says_no_gdr, _GDR_MAY, what,
            f"{what} and nothing the run set asked for that: the platform's PCIe path "
            "(ACS or the IOMMU between NIC and GPU) kept NCCL from it")
        causes.append(_Cause(
            "GPUDirect unused", host, why, whose,
            "Unset NCCL_NET_GDR_LEVEL and run the pair again" if whose == "renter" else
            "Ask the provider whether PCIe ACS or the IOMMU is on between the NICs and "
            "the GPUs", SOURCE_GDR_LEVEL))
    return causes


# --- pairs -----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Judged:
    verdict: PairVerdict
    findings: tuple[ClusterFinding, ...]


def _expectation(step: StepResult, networks: Mapping[str, NetworkFingerprint]
                 ) -> tuple[dict[str, NodeFabric], float | None, str | None]:
    """The fabric of each node that has one, the pair's expectation in GB/s, and why
    there is none ("no-fabric" where a node has no fabric port Active)."""
    fabrics: dict[str, NodeFabric] = {}
    for host in step.hosts:
        fabric = node_fabric(host, networks[host], step.ranks_per_node) \
            if host in networks else None
        if fabric is not None:
            fabrics[host] = fabric
    missing = [h for h in step.hosts if h not in networks]
    if missing:
        return fabrics, None, (f"no network fingerprint for {', '.join(missing)}: nothing "
                               "says what its fabric can carry")
    if step.backend != "nccl":
        return fabrics, None, (f"the step ran {step.backend}, which goes over TCP sockets "
                               "whatever fabric the nodes have")
    if any(h not in fabrics or not fabrics[h].counted for h in step.hosts):
        return fabrics, None, "no-fabric"
    totals = {h: fabrics[h].total_gbps for h in step.hosts}
    known = [t for t in totals.values() if t is not None]
    if len(known) < len(totals):
        unknown = [h for h, t in totals.items() if t is None]
        return fabrics, None, (f"the rate of {', '.join(unknown)}'s fabric ports is not "
                               "known (the efa driver reports a constant), so there is no "
                               "ports x rate to judge by")
    return fabrics, min(known) / 8, None


def _judge_pair(step: StepResult, networks: Mapping[str, NetworkFingerprint],
                settings: Mapping[str, Mapping[str, str]] | None) -> _Judged:
    cluster, hosts, steps = step.cluster, step.hosts, (step.step_id,)
    reduce = largest(step.figures, "all_reduce")
    gather = largest(step.figures, "all_gather")
    fabrics, expected, why_not = _expectation(step, networks)
    base = PairVerdict(step.step_id, step.kind, step.round, hosts, op=None, busbw_gbs=None,
                       expected_gbs=expected, share=None, passed=None, cause=None,
                       transport=transport_words(step),
                       all_reduce_gbs=None if reduce is None else reduce.busbw_gbs,
                       all_gather_gbs=None if gather is None else gather.busbw_gbs)
    if step.error is not None:
        return _Judged(replace(base, passed=False, cause=f"the step failed: {step.error}",
                               whose="unsettled"), ())
    shown = reduce or gather
    if shown is None:
        return _Judged(replace(base, cause="not judged: the step gave no figure"), ())
    base = replace(base, op=shown.op, busbw_gbs=shown.busbw_gbs)
    figure_words = "; ".join(f"{f.op} busbw {gbs(f.busbw_gbs)} at {size_words(f.size_bytes)}"
                             for f in (reduce, gather) if f is not None)
    if expected is None:
        # Not judged, and said why: the node standings leave it out of the fabric's
        # question (fleet/analysis/cluster/pair_evidence.py).
        base = replace(base, cause="not judged: " + (
            "no RDMA fabric between them" if why_not == "no-fabric" else str(why_not)))
        sockets = _socket_causes(step, fabrics, settings)
        unjudged = [_socket_finding(step, sockets)] if sockets else []
        if why_not == "no-fabric":
            unjudged.append(_no_fabric(step, fabrics, figure_words))
        else:
            fix = ("Probe the nodes (`fleet probe`), so that their network fingerprints "
                   "say what the pair should give, then run the cluster again."
                   if why_not and why_not.startswith("no network fingerprint") else
                   "Nothing to do: the figure is shown, not judged.")
            unjudged.append(ClusterFinding(
                cluster, "pair-unjudged", "info", None, hosts,
                f"{pair_words(hosts)}: {gbs(shown.busbw_gbs)}, not judged", f"{figure_words}; "
                f"{why_not}", fix, SOURCE_PASS, steps))
        return _Judged(base, tuple(unjudged))
    shares = [(f, f.busbw_gbs / expected) for f in (reduce, gather) if f is not None]
    above = [(f, s) for f, s in shares if s > ABOVE_SHARE]
    judged = [(f, s) for f, s in shares if s <= ABOVE_SHARE]
    fabric_words = "; ".join(fabrics[h].words for h in hosts)
    findings: list[ClusterFinding] = []
    if above:
        findings.append(_above(step, above, expected, fabric_words))
    if not judged:
        return _Judged(replace(base, share=above[0][1]), tuple(findings))
    worst, share = min(judged, key=lambda fs: fs[1])
    base = replace(base, op=worst.op, busbw_gbs=worst.busbw_gbs, share=share)
    if share >= PASS_SHARE:
        return _Judged(replace(base, passed=True), tuple(findings))
    causes = _socket_causes(step, fabrics, settings) or [
        c for h in hosts for c in _node_causes(step, h, networks[h], fabrics[h], settings)]
    whose, why = _short_whose(step, causes, settings)
    verdict = replace(base, passed=False, whose=whose, cause=(
        "; ".join(f"{c.name} on {c.host}" for c in causes) if causes
        else "cause not shown by the fingerprint"))
    findings.insert(0, _short(step, verdict, fabric_words, figure_words, causes, why))
    return _Judged(verdict, tuple(findings))


def _short_whose(step: StepResult, causes: Sequence[_Cause],
                 settings: Mapping[str, Mapping[str, str]] | None) -> tuple[Party, str | None]:
    if causes:
        return one_party(c.whose for c in causes), None
    found = _suspects((_ran_under(h, step, settings) for h in step.hosts), step)
    if found is None:
        return "unsettled", ("the run's settings were not recorded for every node, so "
                             "whether they moved it cannot be told")
    if found:
        return "unsettled", (f"the run held settings that can move an all-reduce and was "
                             f"not measured again without them: {_listed(found)}; unset "
                             "them and run the pair again before disputing it")
    return "provider", None


def _short(step: StepResult, verdict: PairVerdict, fabric_words: str, figure_words: str,
           causes: Sequence[_Cause], why: str | None) -> ClusterFinding:
    expected = verdict.expected_gbs or 0.0
    share = verdict.share or 0.0
    title = (f"{pair_words(step.hosts)}: {verdict.op} {gbs(verdict.busbw_gbs or 0.0)}, "
             f"{share:.0%} of the {gbs(expected)} their fabric should give"
             f" ({verdict.cause})")
    evidence = (f"{figure_words}; expected {gbs(expected)}, the lesser node's fabric "
                f"({fabric_words}); a pair passes at {PASS_SHARE:.0%}, "
                f"{gbs(expected * PASS_SHARE)}; NCCL: {verdict.transport}")
    if causes:
        evidence += "; " + "; ".join(f"{c.name} on {c.host}: {c.words}" for c in causes)
        action = " ".join(dict.fromkeys(c.action.rstrip(".") + "." for c in causes))
        source = "; ".join(dict.fromkeys([SOURCE_PASS, *(c.source for c in causes)]))
    else:
        evidence += ("; the fingerprints show no fabric port down or below its rate, no "
                     "far NIC, GPUDirect RDMA not off")
        if why:
            evidence += f"; {why}"
        action = ("Run the pair again, and each node against a known-good node (the "
                  "suspects' round): a node short beside every partner is the node's; ask "
                  "the provider for the switch ports' counters (ibdiagnet, perfquery).")
        source = SOURCE_PASS if why is None else f"{SOURCE_PASS}; {SOURCE_SETTINGS}"
    return ClusterFinding(step.cluster, "pair-short", "fault", verdict.whose, step.hosts,
                          title, evidence, action, source, (step.step_id,))


def _above(step: StepResult, above: Sequence[tuple[StepFigure, float]], expected: float,
           fabric_words: str) -> ClusterFinding:
    said = "; ".join(f"{f.op} busbw {gbs(f.busbw_gbs)} at {size_words(f.size_bytes)}, "
                     f"{s:.0%} of {gbs(expected)}" for f, s in above)
    why = ("NCCL chose its algorithm (no NCCL_ALGO=Ring): on two nodes its tree algorithms "
           "report a bus bandwidth above the network's" if step.algo is None
           or step.algo.lower() != "ring" else
           "with NCCL_ALGO=Ring a figure above the ports' total says the ranks did not all "
           "cross the network (two names for one host?) or the fingerprint counted fewer "
           "ports than NCCL used")
    return ClusterFinding(
        step.cluster, "pair-above-fabric", "info", None, step.hosts,
        f"{pair_words(step.hosts)}: above what their fabric can carry, not the network's figure",
        f"{said} ({fabric_words}); {why}; not judged",
        "Run the pair with NCCL_ALGO=Ring (the agent's --algo Ring) on distinct hosts to "
        "measure the network.", SOURCE_TREE, (step.step_id,))


def _no_fabric(step: StepResult, fabrics: Mapping[str, NodeFabric],
               figure_words: str) -> ClusterFinding:
    bare = [h for h in step.hosts if h not in fabrics]
    down = [h for h in step.hosts if h in fabrics and not fabrics[h].counted]
    over = sorted({n for t in step.transports for n in _names(t.interfaces)})
    network = sorted({t.network for t in step.transports if t.network})
    said = ("NCCL ran over sockets" if network == ["Socket"]
            else f"NCCL's network: {', '.join(network) or 'not said'}")
    if over:
        said += f" on {', '.join(over)}"
    who = (f"{', '.join(bare)} {'has' if len(bare) == 1 else 'have'} no fabric NIC"
           if bare else "")
    if down:
        who += ("; " if who else "") + f"{', '.join(down)}: no fabric port Active"
    return ClusterFinding(
        step.cluster, "pair-no-fabric", "info", None, step.hosts,
        f"{pair_words(step.hosts)}: no RDMA fabric between them",
        f"between these nodes {said}: {figure_words}; {who}; no RDMA fabric to judge it by",
        "None unless the nodes were sold with a fabric (the network section says so per "
        "node).", SOURCE_NONE, (step.step_id,))


def _socket_finding(step: StepResult, causes: Sequence[_Cause]) -> ClusterFinding:
    whose = one_party(c.whose for c in causes)
    return ClusterFinding(
        step.cluster, "socket-fallback", "fault", whose, tuple(c.host for c in causes),
        f"{', '.join(c.host for c in causes)}: NCCL left the fabric for TCP sockets "
        f"(step {step.step_id})", "; ".join(c.words for c in causes),
        " ".join(dict.fromkeys(c.action.rstrip(".") + "." for c in causes)), SOURCE_SOCKET,
        (step.step_id,))


# --- failed steps and the whole cluster -------------------------------------------------

def lost_node(step: StepResult) -> bool:
    """Whether the step stands for a node lost before its steps: the orchestration
    stores it as a failed one-node cluster step (fleet/cluster/between.py), which no
    schedule makes (a cluster step has every node, and a cluster two or more)."""
    return step.kind == "cluster" and len(step.hosts) == 1 and step.error is not None


def _lost(step: StepResult, measured: int) -> ClusterFinding:
    host = step.hosts[0]
    return ClusterFinding(
        step.cluster, "node-lost", "fault", "unsettled", (host,),
        f"{host}: lost before its steps, not measured",
        f"{step.error}; the other {counted(measured, 'node')} were measured without it",
        f"Reach {host} (fleet cluster check names why it cannot be: SSH, its runtime, "
        "the meeting ports), then run the cluster again to measure it.", SOURCE_STEP,
        (step.step_id,))


def _failed_steps(results: Sequence[StepResult], order: Sequence[str], cluster: str
                  ) -> list[ClusterFinding]:
    failed = [r for r in results if r.error is not None]
    if not failed:
        return []
    if len(failed) == len(results):
        errors = sorted({r.error or "" for r in failed})
        return [ClusterFinding(
            cluster, "every-step-failed", "fault", "unsettled", tuple(order),
            f"{cluster}: every step failed ({counted(len(failed), 'step')})",
            "; ".join(errors),
            "Look at what every step shares: the rendezvous (fleet cluster check), the "
            "firewall between the nodes, NCCL's settings, the agent on the nodes.",
            SOURCE_STEP, tuple(r.step_id for r in failed))]
    # Which node the failures point at is the pairs' evidence (slow_node.judge_nodes).
    return [ClusterFinding(
        cluster, "step-failed", "fault", "unsettled", r.hosts,
        f"step {r.step_id} ({r.kind} {pair_words(r.hosts)}) failed", f"{r.error}",
        "Read the step's error: a rendezvous not joined is a firewall or the port "
        "(fleet cluster check), a rank that died is the node's or NCCL's.", SOURCE_STEP,
        (r.step_id,)) for r in failed]


def by_lost(lost: Sequence[StepResult]) -> set[str]:
    """The nodes lost before their steps."""
    return {r.hosts[0] for r in lost}


# The whole cluster's collectives judged against the fabric (a ring moves the same bytes
# over every node's ports whatever the world: nccl-tests' PERFORMANCE.md), and the one
# shown only: an all-to-all's share of its bytes that leaves each node depends on the
# nodes and GPUs, and no published pass line for it was checked here.
JUDGED_OPS = ("all_reduce", "all_gather", "reduce_scatter")
SHOWN_OPS = ("all_to_all",)


def _unjudged(f: StepFigure, nodes: int) -> str | None:
    """Why the whole cluster's `f` is shown and not judged (the module's docstring says
    what the published runs show), or None."""
    if f.op in SHOWN_OPS:
        return "shown, not judged"
    if f.size_bytes < WHOLE_MIN_BYTES:
        return (f"not judged: its largest size was {size_words(f.size_bytes)}, and healthy "
                f"clusters reach their rate from {size_words(WHOLE_MIN_BYTES)}")
    if f.op in ("all_gather", "reduce_scatter") and nodes > GATHER_JUDGED_NODES:
        return (f"not judged over more than {GATHER_JUDGED_NODES} nodes, where published "
                "runs fall with the node count")
    return None


def _whole(step: StepResult, pairs: Sequence[PairVerdict],
           networks: Mapping[str, NetworkFingerprint],
           settings: Mapping[str, Mapping[str, str]] | None) -> list[ClusterFinding]:
    """The whole cluster's step: each collective at its largest size against what every
    node's fabric should give (the least node's Active ports x rate, as a pair's), a
    share under `WHOLE_FAULT_SHARE` a cluster-short fault, one under `PASS_SHARE`
    cluster-below-rate; and the cluster-figure line, every figure beside the slowest
    pair's."""
    figures = [f for op in (*JUDGED_OPS, *SHOWN_OPS) if (f := largest(step.figures, op))]
    if not figures:
        return []
    fabrics, expected, why_not = _expectation(step, networks)
    shape = (f"{counted(len(step.hosts), 'node')} x {counted(step.ranks_per_node, 'rank')}; "
             f"NCCL: {transport_words(step)}{_versions(step)}")
    parts = []
    short: list[tuple[StepFigure, float]] = []
    below: list[tuple[StepFigure, float]] = []
    above: list[tuple[StepFigure, float]] = []
    for f in figures:
        part = f"{f.op} busbw {gbs(f.busbw_gbs)} at {size_words(f.size_bytes)}"
        unjudged = _unjudged(f, len(step.hosts))
        if expected is not None and f.op in JUDGED_OPS:
            share = f.busbw_gbs / expected
            part += f" ({share:.0%}" + (f", {unjudged})" if unjudged else ")")
            if unjudged is None and share < WHOLE_FAULT_SHARE and f.op == "all_reduce":
                short.append((f, share))
            elif unjudged is None and share < PASS_SHARE:
                below.append((f, share))
            elif unjudged is None and share > ABOVE_SHARE:
                above.append((f, share))
        elif f.op in SHOWN_OPS:
            part += f" ({unjudged})"
        parts.append(part)
    said = "; ".join(parts) + f" over {shape}"
    if expected is not None:
        said += (f"; expected {gbs(expected)} (the least node's fabric: "
                 + "; ".join(fabrics[h].words for h in step.hosts if h in fabrics)
                 + f"), a fault under {WHOLE_FAULT_SHARE:.0%}, its rate from "
                   f"{PASS_SHARE:.0%}")
    elif why_not is not None:
        said += "; not judged: " + ("no RDMA fabric between the nodes"
                                    if why_not == "no-fabric" else why_not)
    if above:
        said += ("; above the ports' total: NCCL's tree, NVLS or in-network (SHARP) "
                 "algorithms, not the network's rate")
    reduce = largest(step.figures, "all_reduce")
    measured = [(v, v.all_reduce_gbs) for v in pairs if v.all_reduce_gbs is not None]
    if reduce is not None and measured:
        slowest, least = min(measured, key=lambda vg: float(vg[1]))
        said += (f"; the slowest pair, {pair_words(slowest.hosts)}: all_reduce "
                 f"{gbs(least)}; the whole cluster gives {reduce.busbw_gbs / least:.0%} "
                 "of it")
    elif reduce is not None:
        said += "; no pair figure to compare it with"
    shown = reduce or figures[0]
    found = [ClusterFinding(
        step.cluster, "cluster-figure", "info", None, step.hosts,
        f"{step.cluster}: the whole cluster's {shown.op} {gbs(shown.busbw_gbs)}", said,
        "Nothing to do: the figures a renter's job across every node sees.",
        SOURCE_WHOLE if expected is None
        else f"{SOURCE_WHOLE}; {SOURCE_PASS}; {SOURCE_WHOLE_LINE}", (step.step_id,))]
    if below and expected is not None:
        found.insert(0, _below_rate(step, below, expected))
    if short and expected is not None:
        found.insert(0, _cluster_short(step, short, expected, pairs, fabrics, settings))
    return found


def _below_rate(step: StepResult, below: Sequence[tuple[StepFigure, float]],
                expected: float) -> ClusterFinding:
    worst, share = min(below, key=lambda fs: fs[1])
    return ClusterFinding(
        step.cluster, "cluster-below-rate", "info", None, step.hosts,
        f"{step.cluster}: the whole cluster's {worst.op} {gbs(worst.busbw_gbs)}, "
        f"{share:.0%} of its fabric's {gbs(expected)}",
        "; ".join(f"{f.op} busbw {gbs(f.busbw_gbs)} at {size_words(f.size_bytes)}, "
                  f"{s:.0%}" for f, s in below)
        + f"; under the {PASS_SHARE:.0%} a pair passes at, over the "
          f"{WHOLE_FAULT_SHARE:.0%} healthy clusters stay above under NCCL's defaults "
          "(80-81% at 4 and 8 nodes of one 8 x 400G cluster); not disputed",
        "Run the renter's job, or nccl-tests, with NCCL_MIN_CTAS=24 and "
        "NCCL_IB_QPS_PER_CONNECTION=2 (they lifted that cluster from 80% to 98%); if the "
        "whole cluster stays under 90% with them, take both figures to the provider.",
        SOURCE_WHOLE_LINE, (step.step_id,))


def _versions(step: StepResult) -> str:
    """The NCCL the nodes' ranks loaded, as their logs said: one for all, or each node's
    where they differ (ranks of different NCCL versions are not one job's)."""
    said = {t.host: t.version for t in step.transports if t.version}
    if not said:
        return ""
    if len(set(said.values())) == 1:
        return f"; NCCL {next(iter(said.values()))} on {counted(len(said), 'node')}"
    return "; NCCL versions differ: " + ", ".join(f"{h} {v}" for h, v in said.items())


def _cluster_short(step: StepResult, short: Sequence[tuple[StepFigure, float]],
                   expected: float, pairs: Sequence[PairVerdict],
                   fabrics: Mapping[str, NodeFabric],
                   settings: Mapping[str, Mapping[str, str]] | None) -> ClusterFinding:
    worst, share = min(short, key=lambda fs: fs[1])
    judged = [v for v in pairs if v.passed is not None]
    causes = _socket_causes(step, fabrics, settings)
    whose, why = _short_whose(step, causes, settings)
    evidence = ("; ".join(f"{f.op} busbw {gbs(f.busbw_gbs)} at {size_words(f.size_bytes)}, "
                          f"{s:.0%} of {gbs(expected)}" for f, s in short)
                + f"; a fault under {WHOLE_FAULT_SHARE:.0%}, "
                  f"{gbs(expected * WHOLE_FAULT_SHARE)}, where healthy clusters stay "
                  f"above it; NCCL: {transport_words(step)}")
    if causes:
        evidence += "; " + "; ".join(f"{c.name} on {c.host}: {c.words}" for c in causes)
        action = " ".join(dict.fromkeys(c.action.rstrip(".") + "." for c in causes))
    elif judged and all(v.passed for v in judged):
        evidence += (f"; every judged pair passed ({counted(len(judged), 'pair')}): each "
                     "node reaches its fabric's rate, the cluster together does not")
        action = ("Ask the provider for the fabric between the pairs: the switches' "
                  "oversubscription and routing (ibdiagnet, the switch ports' counters), "
                  "as providers' own acceptance fails a cluster on its whole all-reduce "
                  "(Azure's node health checks, NVIDIA's DGX Cloud validation).")
    else:
        evidence += ("; " + (f"{counted(sum(1 for v in judged if not v.passed), 'pair')} of "
                             f"{len(judged)} short too: see their findings" if judged
                             else "no pair was judged"))
        action = ("Mend what the pairs name first, then run the cluster again; a whole "
                  "cluster short beside passing pairs is the fabric between them.")
    if why:
        evidence += f"; {why}"
    return ClusterFinding(
        step.cluster, "cluster-short", "fault", whose, step.hosts,
        f"{step.cluster}: the whole cluster's {worst.op} {gbs(worst.busbw_gbs)}, "
        f"{share:.0%} of the {gbs(expected)} its fabric should give",
        evidence, action, f"{SOURCE_PASS}; {SOURCE_WHOLE_LINE}", (step.step_id,))


# --- the judgement ---------------------------------------------------------------------

def judge_cluster(results: Sequence[StepResult], networks: Mapping[str, NetworkFingerprint],
                  settings: Mapping[str, Mapping[str, str]] | None = None
                  ) -> ClusterJudgement:
    """The pairs, nodes and findings of one cluster's run.

    results: every step of the run, as stored (fleet/model/step.py), one cluster.
    networks: each host's network fingerprint; a host without one is not judged.
    settings: each host's settings as its ranks ran under them (the step event's
    `settings`: the ranks' NCCL_* and GLOO_*, fleet's own among them); None where none
    were recorded, and a host missing from the mapping is not recorded either (pass {}
    for a host that ran under none): unrecorded settings leave a fault unsettled.
    """
    if not results:
        raise ClusterError("no step results to judge: run the cluster's steps first")
    names = sorted({r.cluster for r in results})
    if len(names) > 1:
        raise ClusterError(f"the results are of {len(names)} clusters ({', '.join(names)}); "
                           "judge one cluster's run at a time")
    cluster = names[0]
    order = list(dict.fromkeys(h for r in results for h in r.hosts))
    lost = [r for r in results if lost_node(r)]
    ran = [r for r in results if not lost_node(r)]
    judged = [_judge_pair(r, networks, settings) for r in ran
              if r.kind in ("pair", "suspect") and len(r.hosts) == 2]
    pairs = [j.verdict for j in judged]
    nodes, node_findings = judge_nodes(order, pairs, cluster,
                                       {r.hosts[0]: r.error or "" for r in lost})
    by_host = {n.host: n for n in nodes}
    measured = len({h for r in ran for h in r.hosts})
    findings = [*(_lost(r, measured) for r in lost), *node_findings,
                *(beside(f, by_host) for j in judged for f in j.findings),
                *(_failed_steps(ran, [h for h in order if h not in by_lost(lost)], cluster)
                  if ran else [])]
    for step in ran:
        if step.kind != "cluster" or step.error is not None:
            continue
        fabrics, _, _ = _expectation(step, networks)
        sockets = _socket_causes(step, fabrics, settings)
        if sockets:
            findings.append(_socket_finding(step, sockets))
        findings += _whole(step, pairs, networks, settings)
    short_wholes = [s for s in ran if s.kind == "cluster" and any(
        f.rule == "cluster-short" and s.step_id in f.steps for f in findings)]
    findings += counter_findings(cluster, ran, pairs, short_wholes)
    findings += nic_findings(cluster, ran)
    findings.sort(key=lambda f: f.severity != "fault")
    return ClusterJudgement(cluster, tuple(pairs), tuple(nodes), tuple(findings))

"""`python -m agent cluster`'s command line: the options, their checks, and the help that
shows a real step (docs/cluster.md, "Between the nodes")."""

from __future__ import annotations

import argparse
import os
import re
from typing import Callable, Dict, List, Optional, Tuple

from agent.cluster.rank import (
    DEFAULT_SIZES,
    ITERATIONS,
    OPS,
    PAIR_OPS,
    WARMUP,
    WHOLE_SIZES,
    human_size,
)
from agent.cluster.step import DEFAULT_TIMEOUT_S, Config

# NCCL_ALGO's algorithms (NVIDIA/nccl src/enqueue.cc, ncclAlgoStr), matched as NCCL
# matches them, without regard to case.
ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
# NCCL_SOCKET_IFNAME's form: a list of prefixes, `^` to exclude, `=` for exact names.
_IFNAME = re.compile(r"^\^?=?[\w.:-]+(,[\w.:-]+)*$")
_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.IGNORECASE)
_SHIFT = {"": 0, "K": 10, "M": 20, "G": 30}

DESCRIPTION = """\
One step of the cluster probe on this node: start this node's ranks (one per GPU under
NCCL; G CPU processes under gloo where there is no CUDA), join every node of the step at
tcp://ADDR:PORT (node 0 hosts the store), run all_reduce then all_gather at each size
(5 warm-up, 20 timed; the first result checked; each iteration as long as its slowest
rank anywhere, so every node reports the same figures), and print one `cluster` event
(fleet-cluster/1) after its progress lines. --whole runs the whole cluster's sweep
instead: reduce_scatter and all_to_all too, on to 16 GiB under NCCL, each collective's
sizes stopped, said, where the GPUs' free memory or a 30-s budget a size runs out.

Run it on every node of the step at once, with the same options but --node-rank; or
through Slurm, one task a node, with --slurm-nodes instead of --node-rank:
  srun --nodes=2 --nodelist=n1,n2 --ntasks-per-node=1 --label python3 agent.pyz cluster \
      --address 10.0.4.21 --port 29550 --nodes 2 --slurm-nodes n1,n2 --ranks-per-node 8"""

EPILOG = """\
example, two nodes of 8 GPUs each, meeting at the first (run on both, I = 0 and 1):
  python -m agent cluster --address 10.0.4.21 --port 29550 --nodes 2 \\
      --node-rank I --ranks-per-node 8 --algo Ring --interface ^docker,lo --stop-on-eof

exit status: 0 measured; 3 the step failed (the event's `errors` say why: a node
that never joined, a rank that died, a peer gone mid-collective, --stop-on-eof's stdin
closed); 2 bad options. A stall past --timeout-s fails the step rather than hanging it,
and the ranks never outlive the command."""


def parse_size(text: str) -> int:
    """"16M" -> 16 MiB, as nccl-tests' -b/-e read sizes (K, M, G are powers of 1024)."""
    found = _SIZE.match(text.strip())
    if not found or int(found.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size: a positive number of bytes, with K, M or G "
            "(powers of 1024), e.g. 16M,256M,1G")
    return int(found.group(1)) << _SHIFT[found.group(2).upper()]


def _sizes(text: str) -> List[int]:
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError("no size given: e.g. 16M,256M,1G")
    return sizes


def _names(text: str) -> List[str]:
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: an empty name in the list")
    return names


def _slurm_rank(parser: argparse.ArgumentParser, names: List[str], nodes: int) -> int:
    """This node's place in --slurm-nodes, by the node name srun's task was started
    under."""
    if len(names) != nodes:
        parser.error(f"argument --slurm-nodes: {len(names)} names for --nodes {nodes}")
    mine = os.environ.get("SLURMD_NODENAME")
    if not mine:
        parser.error("argument --slurm-nodes: SLURMD_NODENAME is not set: start it with "
                     "srun, one task a node, or give --node-rank")
    if mine not in names:
        parser.error(f"argument --slurm-nodes: this task runs on Slurm node {mine}, which "
                     f"is not among {', '.join(names)}: srun placed it on a node the step "
                     "did not name (check --nodelist)")
    return names.index(mine)


def _ops(text: str) -> Tuple[str, ...]:
    ops = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [op for op in ops if op not in OPS]
    if not ops or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {', '.join(unknown) or 'no collective'} is not one of "
            f"{', '.join(OPS)}")
    return ops


def _whole(low: int, high: Optional[int] = None, why: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high` (no bound where None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            span = f"{low}-{high}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"{value} is out of range: {span}{why}")
        return value
    return parse


# The inventory's bounds for a port: under 1024 the SSH user, who runs the ranks, may not
# listen.
_port = _whole(1024, 65535, " (the SSH user may not listen under 1024)")
_positive = _whole(1)
_node_rank = _whole(0)


def _algo(text: str) -> str:
    canonical: Dict[str, str] = {a.lower(): a for a in ALGOS}
    if text.lower() not in canonical:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one of NCCL's algorithms: {', '.join(ALGOS)}")
    return canonical[text.lower()]


def _interface(text: str) -> str:
    if not _IFNAME.match(text) or len(text) > 128:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not in NCCL_SOCKET_IFNAME's form: interface name prefixes, "
            "comma-separated, ^ to exclude, = for exact names (e.g. eth0 or ^docker,lo)")
    return text


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{value:g} is out of range: above 0, up to 3600")
    return value


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """The `cluster` subcommand, on `python -m agent`'s subparsers."""
    parser = sub.add_parser(
        "cluster", help="one step of the cluster probe: this node's ranks in an all-reduce "
                        "and an all-gather across nodes (fleet-cluster/1)",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    gloo, nccl = (",".join(human_size(s).replace(" ", "").replace("iB", "")
                           for s in DEFAULT_SIZES[b]) for b in ("gloo", "nccl"))
    parser.add_argument("--address", metavar="ADDR", required=True,
                        help="where node 0 hosts the rendezvous, as every node reaches it")
    parser.add_argument("--port", type=_port, metavar="PORT", required=True,
                        help="the rendezvous's TCP port on node 0 (1024-65535; fleet "
                             "uses 29550)")
    parser.add_argument("--nodes", type=_positive, metavar="N", required=True,
                        help="how many nodes take part in the step")
    place = parser.add_mutually_exclusive_group(required=True)
    place.add_argument("--node-rank", type=_node_rank, metavar="I",
                       help="this node's place among them, 0 to nodes-1 (0 hosts the "
                            "rendezvous)")
    place.add_argument("--slurm-nodes", type=_names, metavar="LIST",
                       help="under srun, one task a node: the step's Slurm node names in "
                            "node-rank order; this node's place is its SLURMD_NODENAME's")
    parser.add_argument("--ranks-per-node", type=_positive, metavar="G", required=True,
                        help="ranks on each node: the first G visible GPUs under NCCL "
                             "(fewer is an error), G CPU processes under gloo")
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                        help="auto: NCCL where CUDA is, else gloo (default %(default)s)")
    parser.add_argument("--algo", type=_algo, metavar="ALGO",
                        help="NCCL_ALGO for the ranks, e.g. Ring (one of "
                             f"{', '.join(ALGOS)}): a pair of nodes would otherwise take "
                             "tree algorithms whose bus bandwidth exceeds the network's")
    parser.add_argument("--interface", type=_interface, metavar="IFNAME",
                        help="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME for the ranks, "
                             "e.g. eth0 or ^docker,lo")
    parser.add_argument("--sizes", type=_sizes, metavar="LIST",
                        help="bytes per collective, K/M/G = powers of 1024 (default "
                             f"{nccl} under NCCL, {gloo} under gloo on the CPU); an "
                             "all_gather's size is the whole gathered buffer, as in "
                             "nccl-tests")
    parser.add_argument("--ops", type=_ops, metavar="LIST",
                        help=f"the collectives, in order, of {', '.join(OPS)} (default "
                             f"{','.join(PAIR_OPS)}; with --whole, all four)")
    parser.add_argument("--whole", action="store_true",
                        help="the whole cluster's step: every collective, and sizes on to "
                             + ",".join(human_size(s).replace(" ", "").replace("iB", "")
                                        for s in WHOLE_SIZES["nccl"])
                             + " under NCCL unless --sizes says")
    parser.add_argument("--timeout-s", type=_timeout, metavar="S", default=DEFAULT_TIMEOUT_S,
                        help="how long a rank waits for the others, at the rendezvous and "
                             "in any collective, before the step fails (default "
                             "%(default)g)")
    # A test's copy of a host's sysfs, whose RDMA counters the step reads (hidden: a
    # host's own is /).
    parser.add_argument("--sysfs-root", default="/", help=argparse.SUPPRESS)
    parser.add_argument("--nic-test", action="store_true",
                        help="after a pair's collectives (--nodes 2, not --whole), measure "
                             "each active RDMA port against the other node's, one at a "
                             "time, in natural order (mlx5_0 against its mlx5_0 where both "
                             "have the same), with perftest's ib_write_bw on --port (node 0 "
                             "serves, node 1 connects; GPUDirect where the binary has "
                             "--use_cuda): the event's `nics` names a slow or failing NIC "
                             "that the all-reduce only averages in (Debian/Ubuntu: apt-get "
                             "install perftest on both nodes)")
    parser.add_argument("--step", metavar="ID", default="",
                        help="the controller's name for the step, echoed in the event")
    parser.add_argument("--stop-on-eof", action="store_true",
                        help="kill the ranks and exit (status 3) when stdin closes: how "
                             "the controller stops every node of a failed step")
    parser.set_defaults(cluster_parser=parser)


def config(args: argparse.Namespace) -> Config:
    """The step's Config from parsed options; an option against another is argparse's
    error, naming it."""
    parser: argparse.ArgumentParser = args.cluster_parser
    if args.slurm_nodes is not None:
        args.node_rank = _slurm_rank(parser, args.slurm_nodes, args.nodes)
    if args.node_rank >= args.nodes:
        parser.error(f"argument --node-rank: {args.node_rank} is not below --nodes "
                     f"{args.nodes} (node ranks run 0 to {args.nodes - 1})")
    world = args.nodes * args.ranks_per_node
    for size in args.sizes or ():
        if size < 4 * world:
            parser.error(f"argument --sizes: {size} bytes do not hold one float32 for each "
                         f"of the {world} ranks")
    return Config(address=args.address, port=args.port, nodes=args.nodes,
                  node_rank=args.node_rank, ranks_per_node=args.ranks_per_node,
                  backend=args.backend, algo=args.algo, interface=args.interface,
                  sizes=args.sizes, timeout_s=args.timeout_s, step_id=args.step,
                  ops=args.ops or (OPS if args.whole else PAIR_OPS), whole=args.whole,
                  sysfs_root=args.sysfs_root, nic_test=args.nic_test,
                  stop_on_eof=args.stop_on_eof, warmup=WARMUP, iterations=ITERATIONS)

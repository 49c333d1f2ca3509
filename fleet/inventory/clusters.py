"""Which hosts form a cluster, as the inventory says, checked before anything connects.

A host joins a cluster with the setting `cluster: NAME`, which inherits like every other
setting (defaults, provider, host), so a provider whose hosts share one fabric says it
once; `cluster: none` takes one host out again. Membership is a setting rather than a
list of host names under `clusters:` so that the mistakes a list allows cannot be
written: a host in two clusters, a name listed that is no host. `clusters: {NAME: ...}`
holds only what is the cluster's own (its rendezvous and the interface NCCL uses).

Refused, with the fix: a cluster of one host (nothing to test between nodes), a cluster
spanning providers (a cluster is one provider's fabric; between providers NCCL would
measure the internet), a `clusters:` entry no host joins (a typo, most often), a
rendezvous host outside its cluster, and `interface` against a host's own
NCCL_SOCKET_IFNAME. Hosts listed as different variants are only warned about: the listing
is what the probe checks, so refusing would stop exactly the cluster whose listing is in
doubt; the collective runs over whatever each node has, the slowest setting its figure.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fleet.errors import InputError
from fleet.inventory.model import Expect, Inventory, SlurmSpec, Target

# srun's options fleet sets for each step (fleet/cluster/slurm.py), not the inventory's.
FLEETS_SRUN = ("--nodes", "--nodelist", "--ntasks-per-node", "--ntasks", "--label",
               "--kill-on-bad-exit", "--export", "--partition")
NO_CLUSTER = "none"  # `cluster: none`: in no cluster, whatever the level above says
NAMED = 6  # hosts named in a message before "and N more"

# "inv.yaml:12:5: providers.lambda.cluster" for the path (and its key, when key=True).
Locate = Callable[[tuple[str, ...], bool], str]


@dataclass(frozen=True)
class Cluster:
    """One cluster: its hosts (one provider's, in file order) and its own settings."""

    name: str
    provider: str
    hosts: tuple[str, ...]
    where: str  # "inv.yaml:12:5: providers.lambda.cluster": where its first host joined
    addresses: Mapping[str, str] = field(default_factory=dict)  # host name -> address
    rendezvous_host: str | None = None
    rendezvous_address: str | None = None
    rendezvous_port: int | None = None  # None: fleet.cluster.rendezvous.DEFAULT_PORT
    interface: str | None = None
    warnings: tuple[str, ...] = ()
    # Through Slurm's srun where set (fleet/cluster/slurm.py), else fleet's SSH path.
    slurm: SlurmSpec | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """The hosts' keys, provider/name, as the store knows them."""
        return tuple(f"{self.provider}/{host}" for host in self.hosts)


def named(hosts: Sequence[str]) -> str:
    """Host names for a message: the first few, then how many more."""
    shown = ", ".join(hosts[:NAMED])
    return shown if len(hosts) <= NAMED else f"{shown} and {len(hosts) - NAMED} more"


def _origin(inventory: Inventory, target: Target) -> tuple[str, ...]:
    """Where the host's `cluster:` was written: on the host, its provider or defaults."""
    provider = inventory.providers[target.provider]
    host = provider.hosts[target.name]
    if host is not None and host.cluster is not None:
        return ("providers", target.provider, "hosts", target.name, "cluster")
    if provider.cluster is not None:
        return ("providers", target.provider, "cluster")
    return ("defaults", "cluster")


def _slurm(spec: SlurmSpec | None, hosts: Sequence[str], name: str, at: Locate
           ) -> SlurmSpec | None:
    """The cluster's Slurm settings, its `nodes:` naming only its own hosts."""
    if spec is None:
        return None
    strangers = sorted(set(spec.nodes) - set(hosts))
    if strangers:
        raise InputError(
            f"{at(('clusters', name, 'slurm', 'nodes'), False)}: {named(strangers)} "
            f"{'is' if len(strangers) == 1 else 'are'} not a host of cluster {name} "
            f"({named(list(hosts))}): name its own hosts, each with its Slurm node name")
    taken = [o for o in spec.srun_options if o.split("=", 1)[0] in FLEETS_SRUN]
    if taken:
        raise InputError(
            f"{at(('clusters', name, 'slurm', 'srun_options'), False)}: {', '.join(taken)} "
            f"{'is' if len(taken) == 1 else 'are'} fleet's to set (one task on each of the "
            "step's nodes, its output labelled): remove it; give the partition as "
            "`partition:`")
    names = [spec.nodes.get(h, h) for h in hosts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(
            f"{at(('clusters', name, 'slurm', 'nodes'), False)}: Slurm node "
            f"{', '.join(twice)} stands for two hosts; give each host its own node")
    return spec


def _listed(expect: Expect | None) -> str:
    if expect is None:
        return "nothing"
    fields = expect.model_dump(exclude_none=True)
    return ", ".join(f"{k} {v}" for k, v in fields.items()) or "nothing"


def _expect_warning(name: str, members: Sequence[Target]) -> str | None:
    groups: dict[str, list[str]] = {}
    for target in members:
        groups.setdefault(_listed(target.expect), []).append(target.name)
    if len(groups) < 2:
        return None
    said = "; ".join(f"{named(hosts)}: {listed}" for listed, hosts in groups.items())
    return (f"cluster {name}: its hosts were listed differently ({said}). The collectives "
            "run over whatever each node has and the slowest sets the cluster's figure: "
            "check the listing, or give the odd hosts a cluster of their own")


def _check_one(name: str, members: Sequence[Target], at: Locate,
               origin: Callable[[Target], tuple[str, ...]]) -> None:
    providers: dict[str, list[Target]] = {}
    for target in members:
        providers.setdefault(target.provider, []).append(target)
    if len(providers) > 1:
        first, *others = providers
        other = others[0]
        raise InputError(
            f"{at(origin(providers[other][0]), False)}: cluster {name} spans providers "
            f"({', '.join(providers)}): {first} has {named([t.name for t in providers[first]])}"
            f", {other} has {named([t.name for t in providers[other]])}. A cluster is one "
            "provider's fabric; between providers NCCL would measure the internet. Give "
            f"each provider's hosts a cluster of their own (`cluster: {name}-{other}`), or "
            f"`cluster: {NO_CLUSTER}` where an inherited one should not apply")
    if len(members) == 1:
        raise InputError(
            f"{at(origin(members[0]), False)}: cluster {name} has one host "
            f"({members[0].key}), and a cluster needs two nodes to test between them (the "
            "node suite already tests one node alone). Add the cluster's other hosts, or "
            f"remove the setting (`cluster: {NO_CLUSTER}` where it is inherited)")


def resolve_clusters(inventory: Inventory, targets: Sequence[Target], at: Locate
                     ) -> tuple[Cluster, ...]:
    """The inventory's clusters in order of first appearance; raises InputError naming
    file:line:column, field and fix for a cluster that cannot be tested as written."""
    specs = dict(inventory.clusters or {})
    if NO_CLUSTER in specs:
        raise InputError(f"{at(('clusters', NO_CLUSTER), True)}: `{NO_CLUSTER}` means "
                         "\"in no cluster\" and cannot name one; pick another name")
    by_name: dict[str, list[Target]] = {}
    for target in targets:
        if target.cluster is not None:
            by_name.setdefault(target.cluster, []).append(target)
    for name in specs:
        if name not in by_name:
            close = difflib.get_close_matches(name, list(by_name), n=1)
            hint = (f"Did you mean {close[0]}? " if close else "")
            raise InputError(
                f"{at(('clusters', name), True)}: no host has `cluster: {name}`. {hint}"
                "Put `cluster: NAME` on the provider or the hosts, or remove this entry")

    def origin(target: Target) -> tuple[str, ...]:
        return _origin(inventory, target)

    clusters: list[Cluster] = []
    for name, members in by_name.items():
        _check_one(name, members, at, origin)
        spec = specs.get(name)
        hosts = tuple(t.name for t in members)
        if spec is not None and spec.rendezvous_host is not None and \
                spec.rendezvous_host not in hosts:
            close = difflib.get_close_matches(spec.rendezvous_host, hosts, n=1)
            hint = f"Did you mean {close[0]}? " if close else ""
            raise InputError(
                f"{at(('clusters', name, 'rendezvous_host'), False)}: "
                f"{spec.rendezvous_host} is not a host of cluster {name}. {hint}Name one of "
                f"its hosts ({named(hosts)}), or leave it out to take the first healthy one")
        if spec is not None and spec.rendezvous_address and spec.rendezvous_host is None:
            # Without a host the address would belong to whichever host is chosen.
            raise InputError(
                f"{at(('clusters', name, 'rendezvous_address'), False)}: an address needs "
                "the host it belongs to: add `rendezvous_host:` naming it, or remove the "
                "address to use the chosen host's own")
        interface = spec.interface if spec is not None else None
        for target in members:
            own = target.env.get("NCCL_SOCKET_IFNAME")
            if interface is not None and own is not None and own != interface:
                raise InputError(
                    f"{at(('clusters', name, 'interface'), False)}: {interface}, but "
                    f"{target.key} sets NCCL_SOCKET_IFNAME={own} in its env "
                    f"({target.where}). Keep one of the two")
        warning = _expect_warning(name, members)
        clusters.append(Cluster(
            name=name, provider=members[0].provider, hosts=hosts,
            where=at(origin(members[0]), False),
            addresses={t.name: t.address for t in members},
            rendezvous_host=spec.rendezvous_host if spec else None,
            rendezvous_address=spec.rendezvous_address if spec else None,
            rendezvous_port=spec.rendezvous_port if spec else None,
            interface=interface,
            warnings=(warning,) if warning else (),
            slurm=_slurm(spec.slurm if spec else None, hosts, name, at)))
    return tuple(clusters)

"""Which hosts form a cluster: the inventory's `cluster:` setting, inherited like the rest,
and `clusters:` entries; each mistake named by file:line:column, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fleet.cli import main
from fleet.errors import InputError
from fleet.inventory import inventory_from_text, load_inventory
from tests.conftest import ROOT

EXAMPLE = ROOT / "inventory" / "example.yaml"


def test_the_example_has_one_cluster_with_its_settings() -> None:
    [cluster] = load_inventory(EXAMPLE).clusters
    assert (cluster.name, cluster.provider, cluster.hosts) == (
        "a100-pod", "coreweave", ("a100-1", "a100-2"))
    assert (cluster.rendezvous_host, cluster.rendezvous_address, cluster.rendezvous_port,
            cluster.interface) == ("a100-1", "10.0.4.21", 29550, "^docker,lo")
    assert cluster.keys == ("coreweave/a100-1", "coreweave/a100-2")
    assert cluster.warnings == ()


def test_cluster_inherits_and_none_opts_out() -> None:
    loaded = inventory_from_text("""\
defaults: {cluster: everywhere}
providers:
  a:
    cluster: pod-a
    hosts:
      h1: {address: 10.0.0.1}
      h2: {}
      h3: {cluster: none}
      h4: {cluster: pod-b}
      h5: {cluster: pod-b}
""", "inv.yaml")
    by_name = {t.name: t.cluster for t in loaded.targets}
    assert by_name == {"h1": "pod-a", "h2": "pod-a", "h3": None, "h4": "pod-b",
                       "h5": "pod-b"}
    pod_a, pod_b = loaded.clusters
    assert pod_a.hosts == ("h1", "h2") and pod_b.hosts == ("h4", "h5")
    assert pod_a.addresses == {"h1": "10.0.0.1", "h2": "h2"}
    assert pod_a.where == "inv.yaml:4:14: providers.a.cluster"
    assert pod_b.where == "inv.yaml:9:21: providers.a.hosts.h4.cluster"
    assert pod_a.rendezvous_port is None  # the default is the rendezvous module's


def test_no_cluster_is_no_clusters() -> None:
    loaded = inventory_from_text("providers:\n  a:\n    hosts: {h1: , h2: }\n", "inv.yaml")
    assert loaded.clusters == () and all(t.cluster is None for t in loaded.targets)


HOSTS = "providers:\n  a:\n    cluster: pod\n    hosts: {h1: , h2: }\n"

BAD = [
    # (inventory text, the start of the message's location, what it must say)
    ("providers:\n  a:\n    hosts:\n      h1: {cluster: c}\n      h2: {}\n",
     "inv.yaml:4:21: providers.a.hosts.h1.cluster:", "cluster c has one host (a/h1)"),
    ("defaults: {cluster: pod}\nproviders:\n  a:\n    hosts: {h1: , h2: }\n"
     "  b:\n    hosts: {h3: }\n",
     "inv.yaml:1:21: defaults.cluster:", "spans providers (a, b): a has h1, h2, b has h3. "
                                         "A cluster is one provider's fabric"),
    ("providers:\n  a:\n    cluster: pod\n    hosts: {h1: }\n  b:\n    hosts:\n"
     "      h2: {cluster: pod}\n",
     "inv.yaml:7:21: providers.b.hosts.h2.cluster:", "`cluster: pod-b`"),
    ("providers:\n  a:\n    cluster: pod-a\n    hosts: {h1: , h2: }\n"
     "clusters:\n  pod-b: {interface: eth0}\n",
     "inv.yaml:6:3: clusters.pod-b:", "no host has `cluster: pod-b`. Did you mean pod-a?"),
    ("providers:\n  a:\n    cluster: pod\n    hosts: {gpu-01: , gpu-02: }\n"
     "clusters:\n  pod: {rendezvous_host: gpu-1}\n",
     "inv.yaml:6:26: clusters.pod.rendezvous_host:",
     "gpu-1 is not a host of cluster pod. Did you mean gpu-01?"),
    (HOSTS + "clusters:\n  pod: {rendezvous_address: 10.0.0.1}\n",
     "inv.yaml:6:29: clusters.pod.rendezvous_address:", "add `rendezvous_host:`"),
    (HOSTS + "clusters:\n  pod: {interface: 'eth 0'}\n",
     "inv.yaml:6:20: clusters.pod.interface:", "as NCCL_SOCKET_IFNAME takes them"),
    (HOSTS + "clusters:\n  pod:\n    interface: eth0,\n",
     "inv.yaml:7:16: clusters.pod.interface:", "as NCCL_SOCKET_IFNAME takes them"),
    ("providers:\n  a:\n    cluster: pod\n    hosts:\n"
     "      h1: {env: {NCCL_SOCKET_IFNAME: ib0}}\n      h2: {}\n"
     "clusters:\n  pod: {interface: eth0}\n",
     "inv.yaml:8:20: clusters.pod.interface:",
     "eth0, but a/h1 sets NCCL_SOCKET_IFNAME=ib0 in its env (inv.yaml:5). Keep one"),
    ("providers:\n  a:\n    hosts: {h1: , h2: }\nclusters:\n  none: {}\n",
     "inv.yaml:5:3: clusters.none:", "cannot name one"),
    (HOSTS + "clusters:\n  pod: {rendezvous_port: 80}\n",
     "inv.yaml:6:26: clusters.pod.rendezvous_port:", "from 1024 to 65535 (got 80)"),
    (HOSTS + "clusters:\n  pod: {rendezvous_prot: 2000}\n",
     "inv.yaml:6:9: clusters.pod.rendezvous_prot:", "Did you mean `rendezvous_port`?"),
    ("providers:\n  a:\n    cluster: bad name\n    hosts: {h1: , h2: }\n",
     "inv.yaml:3:14: providers.a.cluster:", "not a usable name"),
    (HOSTS + "clusters:\n  pod: eth0\n",
     "inv.yaml:6:8: clusters.pod:", "expected a mapping"),
]


@pytest.mark.parametrize(("text", "where", "says"), BAD)
def test_errors_name_file_line_field_and_fix(text: str, where: str, says: str) -> None:
    with pytest.raises(InputError) as caught:
        inventory_from_text(text, "inv.yaml")
    message = str(caught.value)
    assert message.startswith(where)
    assert says in message


def test_hosts_listed_as_different_variants_are_a_warning() -> None:
    loaded = inventory_from_text("""\
providers:
  a:
    cluster: pod
    expect: {variant: H100 SXM5 80GB, gpu_count: 8}
    hosts:
      h1: {}
      h2: {expect: {gpu_count: 4}}
      h3: {}
""", "inv.yaml")
    [cluster] = loaded.clusters
    [warning] = cluster.warnings
    assert warning.startswith("cluster pod: its hosts were listed differently (h1, h3: "
                              "variant H100 SXM5 80GB, gpu_count 8; h2: variant H100 SXM5 "
                              "80GB, gpu_count 4)")
    assert "give the odd hosts a cluster of their own" in warning


def test_inventory_check_shows_clusters_within_80_columns() -> None:
    result = CliRunner().invoke(main, ["inventory", "check", str(EXAMPLE)],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("clusters")))
    cluster_lines = lines[start:-1]
    assert any("a100-pod" in line and "coreweave" in line and "29550" in line
               for line in cluster_lines)
    assert any(line.startswith("a100-pod: a100-1, a100-2; the whole cluster, then every "
                               "pair in 1 round") for line in cluster_lines)
    assert all(len(line) <= 80 for line in lines[:-1]), max(lines[:-1], key=len)
    assert lines[-1].endswith("valid, 6 hosts from 4 providers; 2 in 1 cluster (nothing "
                              "was contacted)")


def test_inventory_check_says_a_cluster_goes_through_slurm(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("""\
providers:
  a:
    cluster: pod
    hosts:
      h1: {address: 10.0.0.1}
      h2: {address: 10.0.0.2}
clusters:
  pod:
    slurm: {partition: gpu, nodes: {h2: gpu-017}, srun_options: [--account=ml]}
""")
    result = CliRunner().invoke(main, ["inventory", "check", str(path)],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert ("pod: steps through Slurm: srun from each step's first node, partition gpu, "
            "--account=ml; Slurm nodes h2 as gpu-017") in said
    # The verdict's last line names the file, as the test above allows it.
    assert all(len(line) <= 80 for line in result.output.splitlines()[:-1])

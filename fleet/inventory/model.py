"""The inventory's model: what inventory.yaml may say (pydantic, its JSON Schema made from
it) and each host as resolved down the tree (`Target`). The loader (fleet/inventory/
__init__.py) reads the file into it; fleet/inventory/clusters.py checks the clusters it
names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)]
# Names end up as store keys, in file names and on terminals: keep them plain.
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@+-]*$",
                                        max_length=128)]
Word = Annotated[str, StringConstraints(pattern=r"^[^\s'\"`$\\;&|<>]+$", max_length=1024)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[^\s,]+$")]
# A folder on the host: absolute, no shell metacharacters (it reaches the agent's argv).
AbsolutePath = Annotated[str, StringConstraints(pattern=r"^/[^\s'\"`$\\;&|<>]*$",
                                                max_length=1024)]
# NCCL_SOCKET_IFNAME's own form: names or prefixes, comma-separated, after an optional `^`
# (all but these) and `=` (exact names); Linux caps an interface name at 15 characters.
IFNAME = r"^\^?=?[A-Za-z0-9_.:-]{1,15}(,[A-Za-z0-9_.:-]{1,15})*$"



def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


class Expect(BaseModel):
    """What the listing promised; compared with what the agent found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variant: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = Field(
        None, description='Catalog label, e.g. "H100 SXM5 80GB" (case, spaces and hyphens '
                          "are ignored when comparing).")
    family: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = Field(
        None, description='GPU family, e.g. "A100", when the listing does not say more.')
    form_factor: Literal["SXM", "PCIe", "NVL", "vGPU"] | None = Field(
        None, description="Board form factor the listing promised.")
    gpu_count: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None, description="GPUs per host.")
    memory_gb: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        None, description="Memory per GPU, in GB as listed (80 for an 80GB card).")
    min_power_limit_w: Annotated[float, Field(ge=1, le=100_000)] | None = Field(
        None, description="Lowest acceptable enforced power limit per GPU, in watts: a "
                          "provider's power cap is a first-class explanation of a slow GPU.")
    fabric_nics: Annotated[int, Field(ge=1, le=64)] | None = Field(
        None, description="Fabric NICs per host the listing promised (InfiniBand, RoCE or "
                          "EFA ports, e.g. 8 on an 8-GPU training node); fewer found is "
                          "disputed (fleet/analysis/node/network.py).")
    fabric_rate_gbps: Annotated[float, Field(ge=1, le=3200)] | None = Field(
        None, description="Each fabric port's rate in Gb/s the listing promised (400 for "
                          "NDR, 200 for HDR); an Active port below it is disputed.")
    # Storage and the host's limits (issue 58): fleet/analysis/host/storage.py and
    # limits.py judge what the agent found against these.
    scratch: AbsolutePath | None = Field(
        None, description="The node's local scratch folder (NVMe) the listing promised, "
                          "e.g. /scratch; measured by the storage suite instead of the "
                          "temporary folder.")
    shared_fs: Annotated[list[AbsolutePath], BeforeValidator(_as_list),
                         Field(max_length=4)] | None = Field(
        None, description="Shared filesystem folder(s) the listing promised (NFS, Lustre, "
                          "Weka, GPFS, a bucket's FUSE mount), e.g. /mnt/data; each is "
                          "measured, and one not mounted is disputed.")
    scratch_read_gbps: Annotated[float, Field(gt=0, le=1000)] | None = Field(
        None, description="Sequential read of the local scratch the listing promised, "
                          "in GB/s; more than 10% below is disputed.")
    scratch_write_gbps: Annotated[float, Field(gt=0, le=1000)] | None = Field(
        None, description="Sequential write of the local scratch promised, in GB/s.")
    shared_read_gbps: Annotated[float, Field(gt=0, le=1000)] | None = Field(
        None, description="Sequential read of each shared filesystem promised, in GB/s.")
    cpu_cores_per_gpu: Annotated[float, Field(gt=0, le=1024)] | None = Field(
        None, description="CPUs the job may use per GPU, as listed (e.g. 16 for 128 "
                          "vCPUs on 8 GPUs); fewer found is disputed.")
    memory_gb_per_gpu: Annotated[float, Field(gt=0, le=100_000)] | None = Field(
        None, description="Host memory per GPU, in GB as listed; less found is disputed.")
    container: Literal["renter", "provider"] | None = Field(
        None, description="Who starts the container the agent runs in: renter (your own "
                          "image and `docker run` options: its /dev/shm, ulimits and "
                          "cgroup limits are yours to fix) or provider (theirs).")


class RuntimeSettings(BaseModel):
    """Which Python and torch run the harness, and where fleet's pinned runtime comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    use: Literal["pinned", "host"] | None = Field(
        None, description="pinned (default): fleet installs its pinned torch into a cached "
                          "environment on the host, so every provider is measured on one "
                          "software stack; host: run the agent with `python:` and whatever "
                          "torch it has.")
    index_url: Annotated[str, StringConstraints(pattern=r"^(https?|file)://[^\s'\"`]+$",
                                                max_length=2048)] | None = Field(
        None, description="Package index (or proxy) the host installs from, instead of "
                          "PyTorch's index for the chosen CUDA build. No password here: use "
                          "index_url_env.")
    index_url_env: EnvName | None = Field(
        None, description="Name of the environment variable (on the controller) holding the "
                          "index URL, when it carries a password.")
    wheelhouse: Annotated[str, StringConstraints(min_length=1, max_length=4096)] | None = Field(
        None, description="Directory of wheels on the controller (relative to the inventory "
                          "file): uploaded once to hosts without internet, installed with no "
                          "index at all.")


class Settings(BaseModel):
    """Settings that `defaults`, a provider and a host may each give."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    transport: Literal["ssh", "local"] | None = Field(
        None, description="ssh (default), or local for this machine (no SSH at all).")
    port: Annotated[int, Field(ge=1, le=65535)] | None = Field(None, description="SSH port.")
    user: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._][A-Za-z0-9._@-]*$",
                                           max_length=64)] | None = Field(
        None, description="SSH user.")
    identity_file: Annotated[list[Annotated[str, StringConstraints(min_length=1)]],
                             BeforeValidator(_as_list)] | None = Field(
        None, description="Private key file(s), tried in order (~ is expanded).")
    identity_passphrase_env: EnvName | None = Field(
        None, description="Name of the environment variable holding the key's passphrase.")
    password_env: EnvName | None = Field(
        None, description="Name of the environment variable holding the SSH password "
                          "(prefer keys or an SSH agent).")
    jump: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = Field(
        None, description="Jump host(s) as ProxyJump writes them: [user@]host[:port], "
                          "comma-separated for a chain; each looked up in ssh_config.")
    ssh_config: Annotated[str, StringConstraints(min_length=1)] | None = Field(
        None, description='ssh_config file to honour (default ~/.ssh/config); "none" to '
                          "read none.")
    python: Word | None = Field(
        None, description="Python 3.8+ on the host that runs the agent (default python3).")
    cache_dir: Word | None = Field(
        None, description="Directory on the host that keeps the agent (default "
                          "~/.cache/fleet).")
    env: dict[EnvName, Annotated[str, StringConstraints(max_length=4096)]] | None = Field(
        None, description="Environment variables for the agent, e.g. CUDA_VISIBLE_DEVICES.")
    tags: list[Tag] | None = Field(None, description="Free labels; they add up down the tree.")
    expect: Expect | None = None
    price_per_gpu_hour: Annotated[float, Field(ge=0, le=1e6)] | None = Field(
        None, description="What one GPU-hour costs, in `currency`.")
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")] | None = Field(
        None, description="ISO 4217 code, e.g. USD or EUR.")
    queue: Name | None = Field(
        None, description="Celery queue for `fleet sweep --via celery` (default: the "
                          "provider's name); `fleet worker --queue NAME` probes its hosts.")
    runtime: RuntimeSettings | None = Field(
        None, description="The harness's Python and torch: fleet's pinned runtime (default) "
                          "or the host's own; merged key by key.")
    cluster: Name | None = Field(
        None, description="The cluster the host belongs to: hosts of one provider sharing "
                          "a fabric, tested together and in pairs after each node's own "
                          "suite; `none` takes a host out of an inherited cluster.")


# A Slurm node name, a partition, an srun option: what sinfo and srun print and take.
SlurmName = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                             pattern=r"^[A-Za-z0-9][\w.-]*$")]
SrunOption = Annotated[str, StringConstraints(min_length=2, max_length=200,
                                              pattern=r"^--[a-z][a-z-]*(=[^\s]+)?$")]


class SlurmSpec(BaseModel):
    """How the cluster's steps go through Slurm (`clusters: {NAME: {slurm: ...}}`): srun
    started on the step's first node, one task a node, with the node's own environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: SlurmName | None = Field(
        None, description="srun's --partition (default: Slurm's default partition).")
    nodes: dict[Name, SlurmName] = Field(
        default_factory=dict, description="Each host's Slurm node name, where it is not "
                                          "the host's name in this inventory.")
    srun_options: list[SrunOption] = Field(
        default_factory=list, max_length=16,
        description="More srun options, each `--name` or `--name=value` (--account=ml, "
                    "--qos=high, --exclusive; --gpus-per-node=8 where Slurm hands out the "
                    "GPUs as gres): not the ones fleet sets (--nodes, --nodelist, "
                    "--ntasks-per-node, --label, --kill-on-bad-exit).")


class ClusterSpec(BaseModel):
    """Settings of one cluster (`clusters: {NAME: ...}`); its hosts say `cluster: NAME`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slurm: SlurmSpec | None = Field(
        None, description="Launch the steps through Slurm's srun, with each node's own "
                          "NCCL, plugin and environment, instead of fleet's SSH path.")

    rendezvous_host: Name | None = Field(
        None, description="The host (by name) whose rendezvous the nodes join (default: "
                          "the first host in file order whose node suite passed).")
    rendezvous_address: Annotated[str, StringConstraints(min_length=1, max_length=255,
                                                         pattern=r"^[^\s@/]+$")] | None = Field(
        None, description="Where the nodes reach the rendezvous host, when not at its "
                          "`address` (a private IP on the cluster's own network, say).")
    # Unprivileged: the ranks run as the SSH user, who may not bind below 1024.
    rendezvous_port: Annotated[int, Field(ge=1024, le=65535)] | None = Field(
        None, description="TCP port of the rendezvous (default 29550).")
    interface: Annotated[str, StringConstraints(pattern=IFNAME)] | None = Field(
        None, description="Network interface(s) for NCCL's sockets (bootstrap, and "
                          "traffic where there is no RDMA), as NCCL_SOCKET_IFNAME takes "
                          "them: eth0, or prefixes ens,ib, or ^docker,lo for all but those.")


class HostSpec(Settings):
    """One host of a provider: how to reach it, what it is listed as, and how to probe it."""

    address: Annotated[str, StringConstraints(min_length=1, max_length=255,
                                              pattern=r"^[^\s@/]+$")] | None = Field(
        None, description="Host name, IP address or ssh_config Host alias; the host's name "
                          "when left out, as `ssh NAME` would.")


class ProviderSpec(Settings):
    """One provider: its hosts by name, and the settings they share."""

    hosts: dict[Name, HostSpec | None] = Field(
        min_length=1, description="The provider's hosts by name (the name is how the "
                                  "store knows the host).")


class Inventory(BaseModel):
    """inventory.yaml: every rented host, grouped by provider."""

    model_config = ConfigDict(extra="forbid", frozen=True,
                              json_schema_extra={"title": "fleet inventory"})

    defaults: Settings | None = None
    providers: dict[Name, ProviderSpec] = Field(min_length=1)
    clusters: dict[Name, ClusterSpec] | None = Field(
        None, description="Settings of the clusters that hosts name with `cluster:`.")


@dataclass(frozen=True)
class RuntimeChoice:
    """A host's runtime settings, resolved: `wheelhouse` is absolute, on the controller."""

    use: Literal["pinned", "host"] = "pinned"
    index_url: str | None = None
    index_url_env: str | None = None
    wheelhouse: Path | None = None


@dataclass(frozen=True)
class Target:
    """One host to probe: every setting resolved down the tree."""

    provider: str
    name: str
    where: str  # "inventory.yaml:14", for messages about this host
    transport: Literal["ssh", "local"]
    address: str
    port: int | None
    user: str | None
    identity_files: tuple[str, ...]
    identity_passphrase_env: str | None
    password_env: str | None
    jump: str | None
    ssh_config: str | None
    python: str
    cache_dir: str
    env: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    expect: Expect | None = None
    price_per_gpu_hour: float | None = None
    currency: str | None = None
    queue: str | None = None  # Celery queue; None: the provider's name
    runtime: RuntimeChoice = field(default_factory=RuntimeChoice)
    cluster: str | None = None  # None: in no cluster

    @property
    def key(self) -> str:
        """The host's key: provider/name."""
        return f"{self.provider}/{self.name}"

    @property
    def queue_name(self) -> str:
        """The Celery queue the host's probes go to: `queue`, else the provider's name."""
        return self.queue or self.provider

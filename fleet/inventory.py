"""The inventory (`inventory.yaml`): which hosts were rented, how to reach them, what was listed.

    defaults:                 # inherited by every provider and host
      user: ubuntu
      currency: USD
    providers:
      lambda:
        price_per_gpu_hour: 2.49
        expect: {variant: H100 SXM5 80GB, gpu_count: 8}
        cluster: pod-a          # these hosts share one fabric (fleet/cluster/members.py)
        hosts:
          gpu-01: {address: 203.0.113.10}
          gpu-02: {address: gpu-02-alias}     # a Host alias from ~/.ssh/config
    clusters:                 # optional: a cluster's rendezvous and NCCL interface
      pod-a: {rendezvous_port: 29550, interface: ens}

A setting given on a host wins over its provider's, which wins over `defaults`; `env` and
`expect` merge key by key and `tags` add up. Settings the inventory gives win over
ssh_config, as options on ssh's command line do; ssh_config fills in the rest.

Errors name the file, line and column, the field, and the fix. Passwords and passphrases
never appear in the file: a key, an SSH agent, or an environment variable named by
`password_env` / `identity_passphrase_env`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from fleet.cluster.members import NO_CLUSTER, Cluster, resolve_clusters
from fleet.errors import InputError

EXAMPLE = "inventory/example.yaml"
DEFAULT_PYTHON = "python3"
DEFAULT_CACHE_DIR = "~/.cache/fleet"
MAX_ERRORS = 12

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

# A key like these holding a value is a secret written into the file; `*_env` keys name an
# environment variable instead and are fine.
SECRET_KEY = re.compile(r"pass(word|wd|phrase)|secret", re.IGNORECASE)
PASSWORD_IN_URL = re.compile(r"://[^/@\s]*:[^/@\s]*@")


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
    # host_limits.py judge what the agent found against these.
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


class ClusterSpec(BaseModel):
    """Settings of one cluster (`clusters: {NAME: ...}`); its hosts say `cluster: NAME`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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


@dataclass(frozen=True)
class LoadedInventory:
    """An inventory file read and validated: its path, its model and its hosts."""

    path: Path
    model: Inventory
    targets: tuple[Target, ...]
    clusters: tuple[Cluster, ...] = ()


# --- YAML with positions ------------------------------------------------------------

Path_ = tuple[str | int, ...]


@dataclass
class _Marks:
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def at(self, path: Path_, key: bool = False) -> tuple[int, int]:
        """The position of `path`, or of its nearest ancestor that the file has."""
        table = self.keys if key else self.values
        for cut in range(len(path), -1, -1):
            spot = table.get(path[:cut]) or self.values.get(path[:cut])
            if spot is not None:
                return spot
        return (1, 1)


def _position(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _compose(text: str, source: str) -> tuple[Any, _Marks]:
    """Parse YAML into plain data, keeping where every key and value was written."""
    loader = yaml.SafeLoader(text)
    marks = _Marks()
    try:
        root = loader.get_single_node()
        if root is None:
            raise InputError(f"{source}: the file is empty. Start from {EXAMPLE}")

        def build(node: yaml.Node, path: Path_) -> Any:
            marks.values[path] = _position(node)
            if isinstance(node, yaml.MappingNode):
                written = {id(k) for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"}
                loader.flatten_mapping(node)  # `<<: *anchor`: merged pairs come first
                result: dict[str, Any] = {}
                explicit: dict[str, bool] = {}
                for key_node, value_node in node.value:
                    key = loader.construct_object(key_node, deep=True)
                    line, column = _position(key_node)
                    if isinstance(key, bool) or not isinstance(key, str | int | float):
                        raise InputError(
                            f"{source}:{line}:{column}: {_dotted(path) or '(top level)'}: "
                            f"the key {key_node.value!r} is not a name. Quote it, e.g. "
                            f"\"{key_node.value}\":")
                    name = str(key)
                    # A key written here overrides one merged in; written twice is a mistake.
                    if explicit.get(name) and id(key_node) in written:
                        first = marks.keys[(*path, name)][0]
                        raise InputError(
                            f"{source}:{line}:{column}: {_dotted((*path, name))}: given twice "
                            f"(first on line {first}). Keep one of them")
                    explicit[name] = id(key_node) in written
                    marks.keys[(*path, name)] = (line, column)
                    result[name] = build(value_node, (*path, name))
                return result
            if isinstance(node, yaml.SequenceNode):
                return [build(item, (*path, i)) for i, item in enumerate(node.value)]
            return loader.construct_object(node, deep=True)

        return build(root, ()), marks
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise InputError(f"{where}: not valid YAML: {exc.problem or exc.context}. Fix the "
                         "syntax there (indent with spaces, `key: value`)") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def _dotted(path: Path_) -> str:
    return ".".join(str(p) for p in path)


# --- Validation messages ------------------------------------------------------------------

def _secrets(data: Any, path: Path_) -> Iterator[Path_]:
    if isinstance(data, dict):
        for key, value in data.items():
            here = (*path, key)
            if (SECRET_KEY.search(key) and not key.lower().endswith("_env")
                    and value not in (None, "")):
                yield here
            else:
                yield from _secrets(value, here)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            yield from _secrets(item, (*path, i))


def _secret_message(path: Path_) -> str:
    key = str(path[-1])
    if len(path) >= 2 and path[-2] == "env":
        return (f"{key}: the agent's environment is written on the host's command line, "
                "where any user can read it; the agent needs no secrets, so remove it")
    name = "identity_passphrase_env" if "phrase" in key.lower() else "password_env"
    return (f"a secret is never written in the inventory. Put it in an environment "
            f"variable and name that instead, e.g. `{name}: FLEET_SSH_SECRET`, or use a "
            "key without a passphrase in an SSH agent")


def _fields_of(model: type[BaseModel]) -> list[str]:
    return sorted(model.model_fields)


def _model_at(path: Path_) -> type[BaseModel] | None:
    """The model whose fields are allowed at `path` of the raw data."""
    if not path:
        return Inventory
    if path == ("defaults",):
        return Settings
    if len(path) == 2 and path[0] == "providers":
        return ProviderSpec
    if len(path) == 4 and path[0] == "providers" and path[2] == "hosts":
        return HostSpec
    if path[-1] == "expect":
        return Expect
    if path[-1] == "runtime":
        return RuntimeSettings
    if len(path) == 2 and path[0] == "clusters":
        return ClusterSpec
    return None


def _walk_loc(data: Any, loc: tuple[str | int, ...]) -> Path_:
    """pydantic's error location as a path into the raw data, without union tags."""
    path: list[str | int] = []
    here = data
    for i, part in enumerate(loc):
        if part == "[key]":  # the key itself is bad, not its value
            continue
        if isinstance(here, dict) and str(part) in here:
            path.append(str(part))
            here = here[str(part)]
        elif isinstance(here, list) and isinstance(part, int) and part < len(here):
            path.append(part)
            here = here[part]
        elif i == len(loc) - 1 or isinstance(here, dict):
            path.append(part)  # a field that is missing, or unknown
            here = None
    return tuple(path)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _error_message(err: Mapping[str, Any], path: Path_) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        parent = _model_at(path[:-1])
        allowed = _fields_of(parent) if parent is not None else []
        close = difflib.get_close_matches(str(path[-1]), allowed, n=1)
        hint = f"Did you mean `{close[0]}`? " if close else ""
        if path[-1] == "address" and path[:1] == ("providers",) and len(path) == 3:
            return "an address belongs to a host: move it under `hosts:`"
        return f"unknown field. {hint}Allowed here: {', '.join(allowed)}"
    if kind == "missing":
        if path[-1] == "providers":
            return ("missing: list at least one provider with its hosts under `providers:` "
                    f"(see {EXAMPLE})")
        if path[-1] == "hosts":
            return "missing: give the provider's hosts under `hosts:`, by name"
        return "missing: add it"
    if path and path[-1] == "rendezvous_port" and kind in ("greater_than_equal",
                                                         "less_than_equal"):
        return (f"use a port from 1024 to 65535 (got {_short(err.get('input'))}): the ranks "
                "run as the SSH user, who may not listen below 1024")
    if kind == "string_pattern_mismatch":
        what = str(path[-1]) if path else ""
        if what.endswith("_env") or (len(path) >= 2 and path[-2] == "env"):
            return ("not an environment variable name: use letters, digits and _, not "
                    "starting with a digit")
        if what == "currency":
            return "give an ISO 4217 code in capitals, e.g. USD or EUR"
        if what in ("python", "cache_dir"):
            return "give one path or command name, without spaces or shell characters"
        if what in ("scratch", "shared_fs") or (len(path) >= 2 and path[-2] == "shared_fs"):
            return ("give the folder on the host as an absolute path, without spaces or "
                    f"shell characters, e.g. /mnt/data (got {_short(err.get('input'))})")
        if what == "interface":
            return ("give interface names or prefixes as NCCL_SOCKET_IFNAME takes them, "
                    "comma-separated, e.g. eth0, ens,ib or ^docker,lo (got "
                    f"{_short(err.get('input'))})")
        if (len(path) >= 2 and path[-2] in ("providers", "hosts", "clusters")) or what in (
                "cluster", "rendezvous_host"):
            return ("not a usable name: start with a letter or digit and use letters, "
                    "digits and . _ - : @ + only (quote it if YAML read it as a number)")
        return f"{msg} (got {_short(err.get('input'))})"
    if kind in ("literal_error", "enum"):
        return f"{msg.replace('Input should be', 'use')} (got {_short(err.get('input'))})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return ("expected a mapping of `key: value` lines here (got "
                f"{_short(err.get('input'))})")
    got = err.get("input")
    suffix = f" (got {_short(got)})" if isinstance(got, str | int | float) else ""
    return f"{msg}{suffix}"


def _validation_failure(exc: ValidationError, data: Any, marks: _Marks, source: str
                        ) -> InputError:
    lines: list[str] = []
    for err in exc.errors()[:MAX_ERRORS]:
        path = _walk_loc(data, err["loc"])
        key_position = err["type"] == "extra_forbidden" or "[key]" in err["loc"]
        line, column = marks.at(path, key=key_position)
        lines.append(f"{source}:{line}:{column}: {_dotted(path) or '(top level)'}: "
                     f"{_error_message(err, path)}")
    more = exc.error_count() - MAX_ERRORS
    if more > 0:
        lines.append(f"... and {more} more")
    head = "the inventory is not valid:" if len(lines) > 1 else ""
    return InputError("\n".join([head, *lines]) if head else lines[0])


# --- Loading and resolving ---------------------------------------------------------------

def _merge(*levels: Settings | None) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for level in levels:
        if level is None:
            continue
        for name in level.model_fields_set:
            value = getattr(level, name)
            if value is None:
                continue
            if name == "env":
                merged["env"] = {**merged.get("env", {}), **value}
            elif name == "tags":
                merged["tags"] = list(dict.fromkeys([*merged.get("tags", []), *value]))
            elif name in ("expect", "runtime"):
                before = merged.get(name, {})
                merged[name] = {**before, **value.model_dump(exclude_unset=True)}
            else:
                merged[name] = value
    return merged


LOCAL_ONLY_CONFLICTS = ("address", "port", "user", "jump", "identity_file", "password_env")


def _runtime_choice(given: dict[str, Any], base: Path, where: str) -> RuntimeChoice:
    index_url = given.get("index_url")
    if index_url is not None and PASSWORD_IN_URL.search(index_url):
        raise InputError(f"{where}: runtime.index_url: holds a password, and the inventory "
                         "never holds secrets. Put the URL in an environment variable and "
                         "name it instead, e.g. `index_url_env: FLEET_INDEX_URL`")
    if index_url is not None and given.get("index_url_env"):
        raise InputError(f"{where}: runtime: index_url and index_url_env both name the index; "
                         "keep one")
    wheelhouse = given.get("wheelhouse")
    return RuntimeChoice(
        use=given.get("use") or "pinned", index_url=index_url,
        index_url_env=given.get("index_url_env"),
        wheelhouse=None if wheelhouse is None else (base / Path(wheelhouse).expanduser()))


def _resolve(inventory: Inventory, marks: _Marks, source: str) -> tuple[Target, ...]:
    targets: list[Target] = []
    for provider_name, provider in inventory.providers.items():
        for host_name, host in provider.hosts.items():
            path = ("providers", provider_name, "hosts", host_name)
            line, column = marks.at(path, key=True)
            merged = _merge(inventory.defaults, provider, host)
            transport = merged.get("transport", "ssh")
            if transport == "local" and host is not None:
                clash = [f for f in LOCAL_ONLY_CONFLICTS if f in host.model_fields_set]
                if clash:
                    raise InputError(
                        f"{source}:{line}:{column}: {_dotted(path)}: {clash[0]} is an SSH "
                        "setting, but this host has `transport: local` (this machine). "
                        "Remove it, or set `transport: ssh`")
            if transport == "ssh" and not merged.get("identity_file") and merged.get(
                    "identity_passphrase_env"):
                raise InputError(
                    f"{source}:{line}:{column}: {_dotted(path)}: identity_passphrase_env is "
                    "set but no identity_file: name the key it unlocks")
            expect = merged.get("expect")
            targets.append(Target(
                provider=provider_name,
                name=host_name,
                where=f"{source}:{line}",
                transport=transport,
                address=(host.address if host is not None and host.address else host_name),
                port=merged.get("port"),
                user=merged.get("user"),
                identity_files=tuple(merged.get("identity_file") or ()),
                identity_passphrase_env=merged.get("identity_passphrase_env"),
                password_env=merged.get("password_env"),
                jump=merged.get("jump"),
                ssh_config=merged.get("ssh_config"),
                python=merged.get("python", DEFAULT_PYTHON),
                cache_dir=merged.get("cache_dir", DEFAULT_CACHE_DIR),
                env=dict(merged.get("env", {})),
                tags=tuple(merged.get("tags", ())),
                expect=Expect(**expect) if expect else None,
                price_per_gpu_hour=merged.get("price_per_gpu_hour"),
                currency=merged.get("currency"),
                queue=merged.get("queue"),
                cluster=None if merged.get("cluster") in (None, NO_CLUSTER) else
                merged["cluster"],
                runtime=_runtime_choice(merged.get("runtime", {}), Path(source).parent,
                                        f"{source}:{line}:{column}: {_dotted(path)}"),
            ))
    return tuple(targets)


def parse_inventory(text: str, source: str) -> tuple[Inventory, tuple[Target, ...]]:
    """Validate inventory text; `source` names it in messages (a path, usually)."""
    loaded = inventory_from_text(text, source)
    return loaded.model, loaded.targets


def inventory_from_text(text: str, source: str) -> LoadedInventory:
    """Validate inventory text, its clusters too; `source` names it in messages and is
    the result's path."""
    data, marks = _compose(text, source)
    if not isinstance(data, dict):
        raise InputError(f"{source}:1:1: the inventory must be a mapping with `providers:` "
                         f"(and optionally `defaults:`); see {EXAMPLE}")
    found = list(_secrets(data, ()))
    if found:
        line, column = marks.at(found[0], key=True)
        raise InputError(f"{source}:{line}:{column}: {_dotted(found[0])}: "
                         f"{_secret_message(found[0])}")
    try:
        inventory = Inventory.model_validate(data)
    except ValidationError as exc:
        raise _validation_failure(exc, data, marks, source) from None
    targets = _resolve(inventory, marks, source)

    def at(path: Path_, key: bool = False) -> str:
        line, column = marks.at(path, key=key)
        return f"{source}:{line}:{column}: {_dotted(path)}"

    return LoadedInventory(Path(source), inventory, targets,
                           resolve_clusters(inventory, targets, at))


def load_inventory(path: Path) -> LoadedInventory:
    """Read and validate an inventory file; raises InputError naming file:line:field."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file. Give an inventory YAML file; "
                         f"{EXAMPLE} shows every field") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory; give an inventory YAML file") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8"
                         ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None
    return inventory_from_text(text, str(path))


def inventory_schema() -> dict[str, Any]:
    """JSON Schema of inventory.yaml, for editors and CI linters."""
    schema = Inventory.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema

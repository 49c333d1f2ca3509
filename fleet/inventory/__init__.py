"""The inventory (`inventory.yaml`): which hosts were rented, how to reach them, what was listed.

    defaults:                 # inherited by every provider and host
      user: ubuntu
      currency: USD
    providers:
      lambda:
        price_per_gpu_hour: 2.49
        expect: {variant: H100 SXM5 80GB, gpu_count: 8}
        cluster: pod-a          # these hosts share one fabric (fleet/inventory/clusters.py)
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
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from fleet.errors import InputError
from fleet.inventory.clusters import NO_CLUSTER, Cluster, resolve_clusters
from fleet.inventory.model import (
    ClusterSpec,
    Expect,
    HostSpec,
    Inventory,
    ProviderSpec,
    RuntimeChoice,
    RuntimeSettings,
    Settings,
    Target,
)

__all__ = ["EXAMPLE", "Cluster", "ClusterSpec", "Expect", "HostSpec", "Inventory",
           "LoadedInventory", "ProviderSpec", "RuntimeChoice", "RuntimeSettings", "Settings",
           "Target", "inventory_from_text", "inventory_schema", "load_inventory",
           "parse_inventory"]

EXAMPLE = "inventory/example.yaml"
DEFAULT_PYTHON = "python3"
DEFAULT_CACHE_DIR = "~/.cache/fleet"
MAX_ERRORS = 12

# A key like these holding a value is a secret written into the file; `*_env` keys name an
# environment variable instead and are fine.
SECRET_KEY = re.compile(r"pass(word|wd|phrase)|secret", re.IGNORECASE)
PASSWORD_IN_URL = re.compile(r"://[^/@\s]*:[^/@\s]*@")

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

"""What fleet keeps on each host (agent payloads, runtime environments, uploaded wheels),
listed and removed: nothing of fleet's stays on a rented host that its user cannot see
and clean (`fleet runtime show|remove`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fleet.errors import FleetError, InputError
from fleet.inventory import LoadedInventory, Target
from fleet.runtime.provision import call_remote
from fleet.transport import open_transport
from fleet.transport.hostkeys import KnownHosts
from fleet.transport.ssh import SshOptions, plan_ssh

STEP_TIMEOUT_S = 300.0
PARALLEL = 16


@dataclass(frozen=True)
class HostContents:
    """What fleet keeps on one host, whether an install is running, and what went wrong."""

    target: Target
    items: tuple[dict[str, Any], ...] = ()  # kind, path, bytes[, state]
    installing: bool = False
    error: str | None = None
    removed: bool = False

    @property
    def total_bytes(self) -> int:
        """The size of everything listed, in bytes."""
        return sum(int(item.get("bytes", 0)) for item in self.items)

    def as_dict(self) -> dict[str, Any]:
        """The host's contents as plain JSON-able data."""
        return {"host": self.target.key, "cache_dir": self.target.cache_dir,
                "items": list(self.items), "bytes": self.total_bytes,
                "installing": self.installing, "removed": self.removed, "error": self.error}


def select_targets(inventory: LoadedInventory, names: Collection[str]) -> tuple[Target, ...]:
    """The hosts named (by name or provider/name), or every host when none is."""
    if not names:
        return inventory.targets
    chosen = tuple(t for t in inventory.targets if t.name in names or t.key in names)
    unknown = set(names) - {t.name for t in chosen} - {t.key for t in chosen}
    if unknown:
        raise InputError(f"{inventory.path}: no host named {', '.join(sorted(unknown))}; "
                         "`fleet inventory check` lists them")
    return chosen


def _visit(target: Target, command: str, lock_wait_s: float) -> HostContents:
    plan = plan_ssh(target) if target.transport == "ssh" else None
    cancel = threading.Event()
    transport = open_transport(target, plan, SshOptions(KnownHosts(accept_new=False),
                                                        cancel=cancel))
    try:
        transport.connect()
        answer = call_remote(transport, target, target.python, command,
                             {"cache_dir": target.cache_dir, "lock_wait_s": lock_wait_s},
                             time.monotonic() + STEP_TIMEOUT_S, cancel)
    except FleetError as exc:
        return HostContents(target, error=str(exc))
    finally:
        transport.close()
    if answer.get("event") == "failed":
        return HostContents(target, error=f"{target.key}: {answer.get('detail')}: run again "
                                          "once it has finished")
    return HostContents(target, tuple(answer.get("items", ())), bool(answer.get("installing")),
                        removed=command == "remove")


def _each(targets: tuple[Target, ...], command: str, lock_wait_s: float = 0.0
          ) -> list[HostContents]:
    if not targets:
        return []
    with ThreadPoolExecutor(min(PARALLEL, len(targets)), "fleet-runtime") as pool:
        return list(pool.map(lambda t: _visit(t, command, lock_wait_s), targets))


def show_hosts(inventory: LoadedInventory, names: Collection[str] = ()) -> list[HostContents]:
    """What fleet keeps on each host (read-only)."""
    return _each(select_targets(inventory, names), "show")


def remove_from_hosts(inventory: LoadedInventory, names: Collection[str] = (),
                      lock_wait_s: float = 0.0) -> list[HostContents]:
    """Remove everything fleet keeps on each host; a host where an install is running is
    left alone (its error says so)."""
    return _each(select_targets(inventory, names), "remove", lock_wait_s)

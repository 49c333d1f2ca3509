"""Why an all-reduce went slow, where the agent saw it: the transport NCCL chose and the
settings it ran under (agent/node/collective.py records both, from NCCL's own INFO lines and
the agent's environment).

A node whose GPUs reach each other over NVLink gives NCCL a peer-to-peer path (NCCL
names it "P2P": "via P2P/CUMEM/read"); an all-reduce through host memory ("SHM") or the
network stack ("NET") on one node is a fraction of it (issue 38: 23.9 GB/s against 354).
Two causes look alike in the figure and differ in who fixes them:

- a setting asked for it (`NCCL_P2P_DISABLE=1`, `NCCL_P2P_LEVEL=LOC`, a site-wide
  environment or the renter's own shell): the renter's to change, said apart from what
  to dispute;
- nothing asked for it and CUDA has no peer access between the GPUs: the platform gives
  no peer-to-peer path (a VM without the fabric), the provider's to answer for.

NCCL's environment variables are documented in NCCL's user guide, "Environment
Variables": NCCL_P2P_DISABLE (1 disables peer-to-peer), NCCL_P2P_LEVEL (LOC: never),
NCCL_SHM_DISABLE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Where each transport moves the data, in words.
THROUGH = {"SHM": "host memory", "NET": "the network stack", "COLLNET": "the network",
           "PXN": "another GPU's network path"}
# Settings that keep NCCL off peer-to-peer paths, with the values that do.
def _set(value: str) -> bool:
    return value.strip() not in ("", "0")


def _never(value: str) -> bool:
    return value.strip().upper() in ("LOC", "0")


PEER_OFF: dict[str, Callable[[str], bool]] = {"NCCL_P2P_DISABLE": _set,
                                              "NCCL_P2P_LEVEL": _never}
# And what keeps it off host memory too, sending it through the network stack.
SHM_OFF: dict[str, Callable[[str], bool]] = {"NCCL_SHM_DISABLE": _set}


# Sources a cause does not name: the process's own environment, and the all-reduce's
# record of it (fleet/analysis/node/whose.py, documents before the run's settings were kept).
UNNAMED_SOURCES = ("environment", "the all-reduce's record")


@dataclass(frozen=True)
class TransportCause:
    """What NCCL's transport says of a slow all-reduce, and whose it is to fix."""

    words: str
    renters: bool  # a setting of the run's environment asked for it


def parse_settings(text: str | None) -> dict[str, str]:
    """"NCCL_P2P_DISABLE=1 NCCL_NVLS_ENABLE=0" (the stored form) as a mapping."""
    found: dict[str, str] = {}
    for token in (text or "").split():
        name, sep, value = token.partition("=")
        if sep:
            found[name] = value
    return found


def transport_cause(transport: str | None, settings: str | None,
                    peer_access: bool | None,
                    sourced: Iterable[tuple[str, str | None, str]] = ()
                    ) -> TransportCause | None:
    """The cause NCCL's transport names for a slow all-reduce; None where NCCL took its
    peer-to-peer path or the agent did not record the transport (suite before 1.1.0).

    `settings`: the all-reduce's own environment as stored ("NCCL_P2P_DISABLE=1 ...");
    `sourced`: the run's settings from every source, each (name, value, source): a line
    of ~/.nccl.conf asks NCCL as surely as the environment does, and is named with its
    file."""
    if not transport:
        return None
    used = [t.strip() for t in transport.split(",") if t.strip()]
    if "P2P" in used or "NVLS" in used:
        return None
    through = THROUGH.get(used[0], used[0]) if used else "another transport"
    off = {**PEER_OFF, **(SHM_OFF if "SHM" not in used else {})}
    found: dict[str, str] = {}
    for name, value, source in sorted(sourced):
        if name in off and value is not None and off[name](value):
            # The environment is where a reader looks first; any other source is named.
            where = "" if source in UNNAMED_SOURCES else f" ({source})"
            found.setdefault(name, f"{name}={value}{where}")
    for name, value in sorted(parse_settings(settings).items()):
        if name in off and off[name](value):
            found.setdefault(name, f"{name}={value}")
    asked = [found[name] for name in sorted(found)]
    if asked:
        return TransportCause(f"NCCL went through {through}: {' and '.join(asked)} "
                              f"{'was' if len(asked) == 1 else 'were'} set", renters=True)
    if peer_access is False:
        return TransportCause(f"NCCL went through {through}: the platform gives no "
                              "peer-to-peer path (CUDA has no peer access between the "
                              "GPUs)", renters=False)
    return TransportCause(f"NCCL went through {through}, not peer-to-peer, with no NCCL "
                          "setting asking for it", renters=False)

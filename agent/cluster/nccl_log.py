"""What NCCL's INFO log of a node's ranks says about the network between the nodes: which
network it chose, through which plugin, over which NICs, and whether GPUDirect RDMA was
used.

The forms, as NCCL 2.x prints them (NVIDIA/nccl src/transport/net_ib.cc,
src/transport/net_socket.cc, src/init.cc and src/plugin/net.cc):

    NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.5<0>
    NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>
    NCCL INFO Using network IB                   (Socket; "AWS Libfabric" from EFA's plugin)
    NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin (v8)
    NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: ...
    NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
    NCCL INFO NCCL_ALGO set by environment to Ring
    NCCL INFO NCCL version 2.28.9+cuda13.0        (the library the ranks loaded)

A host is not trusted: every list is bounded and every string cut, and the controller
validates the result again.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

from agent.node import collective

MAX_PATHS = 32  # a path per NIC and GPU-to-GPU form: 8 NICs x (GDRDMA or not) fit
MAX_INTERFACES = 32
MAX_TEXT = 64

_NETWORK = re.compile(r"NCCL INFO Using network (\S[^\r\n]*)")
_PLUGIN = re.compile(r"NCCL INFO NET/Plugin\s*:\s*Loaded net plugin (\S[^\r\n]*)")
# "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.5<0>": the NICs
# carry their index in brackets; "[RO]" (relaxed ordering) has none and is no NIC.
_USING = re.compile(r"NCCL INFO NET/\w+ : Using (.*)")
_NIC = re.compile(r"\[\d+\](\S+)")
_OOB = re.compile(r"\bOOB (\S+)")
_NET_PATH = re.compile(r"\bvia (NET/[^\r\n]+)")
_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")


def _cut(text: str) -> str:
    return text.strip()[:MAX_TEXT]


def transport(logs: Sequence[str]) -> Dict[str, Any]:
    """The `transport` object of a `cluster` event (docs/cluster.md) from the INFO logs of
    every local rank: network, plugin, gdrdma, transports (connections per transport),
    paths, interfaces, set_by_environment. Without NCCL lines, every field is empty."""
    seen = collective.transports(logs, max_paths=MAX_PATHS)
    network: Optional[str] = None
    plugin: Optional[str] = None
    version: Optional[str] = None
    interfaces: List[str] = []
    net_paths = 0
    gdrdma_paths = 0
    for log in logs:
        for line in log.splitlines():
            if "NCCL INFO" not in line:
                continue
            found = _NETWORK.search(line)
            if found and network is None:
                network = _cut(found.group(1))
            found = _PLUGIN.search(line)
            if found and plugin is None:
                plugin = _cut(found.group(1))
            found = _VERSION.search(line)
            if found and version is None:
                version = _cut(found.group(1))
            found = _USING.search(line)
            if found:
                named = _NIC.findall(found.group(1)) + _OOB.findall(found.group(1))
                for name in (_cut(n) for n in named):
                    if name not in interfaces and len(interfaces) < MAX_INTERFACES:
                        interfaces.append(name)
            # Counted over every line, not the bounded list of paths: one channel without
            # GPUDirect RDMA among many is what a finding needs to see.
            found = _NET_PATH.search(line)
            if found:
                net_paths += 1
                # "NET/IB/0/GDRDMA", also "NET/IB/0(1)/GDRDMA/Shared" where a proxy and
                # shared buffers are named after it.
                gdrdma_paths += "GDRDMA" in found.group(1).rstrip().split("/")
    return {
        "network": network,
        "plugin": plugin,
        "gdrdma": (gdrdma_paths > 0) if net_paths else None,
        "transports": seen["transports"],
        "paths": seen["paths"],
        "interfaces": interfaces,
        "set_by_environment": seen["set_by_environment"],
        "version": version,
    }

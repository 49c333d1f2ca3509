"""The node's network fingerprint: one plain dict per RDMA port and per network interface,
the GPUs they are measured against, and GPUDirect RDMA, for the agent document's
"network" key (validated by fleet/model/network.py).

What each device says comes from sysfs first (always there on Linux, no tool needed) and
from the tools' text where sysfs is silent or absent (a capture or published output with
no sysfs tree; a container that hides /sys/class/infiniband): ibstat, ibv_devinfo -v,
rdma link show, fi_info, nvidia-smi topo -m. `network(root, run)` reads a live host with
`root="/"` and `run=None`; a capture or fixture is read with its `sys` folder as the root
and `replay(text_folder)` as `run`.

Kinds: "infiniband", "roce" (RDMA over an Ethernet link layer), "efa" (AWS Elastic Fabric
Adapter: vendor 0x1d0f, the efa driver or a libfabric efa domain), "software-roce" (rxe,
siw: RDMA emulated by the kernel over any Ethernet interface, no RDMA hardware),
"ethernet" (a NIC with no RDMA), "virtual" (loopback, virtio, veth, bridges, ifb, tun,
docker...), "unknown". Only infiniband, roce and efa count as fabric NICs.

Standard library only, Python 3.8. Reads only.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, Callable, Dict, List, Optional

from agent.network import distance, gdr, sysfs, texts

FORMAT = "fleet-network/1"
# What each source name runs; the capture script writes text/<name>.txt for each.
COMMANDS: Dict[str, List[str]] = {
    "ibstat": ["ibstat"],
    "ibv_devinfo": ["ibv_devinfo", "-v"],
    "rdma_link": ["rdma", "link", "show"],
    "fi_info": ["fi_info", "-l"],
    "fi_info_efa": ["fi_info", "-p", "efa", "-t", "FI_EP_RDM"],
    "topo": ["nvidia-smi", "topo", "-m"],
}
FILES: Dict[str, str] = {
    "modules": "/proc/modules",
    "uname": "/proc/sys/kernel/osrelease",
    "nvidia_version": "/proc/driver/nvidia/version",
}
SOURCES = tuple(COMMANDS) + tuple(FILES)
COMMAND_TIMEOUT_S = 20.0
FABRIC_KINDS = ("infiniband", "roce", "efa")
EFA_VENDOR = "0x1d0f"
_SOFT_DRIVERS = ("rdma_rxe", "rxe", "siw")
_VIRTUAL_DRIVERS = ("virtio_net", "veth", "bridge", "tun", "ifb", "dummy", "vxlan",
                    "macvlan", "ipvlan", "xen-netfront", "hv_netvsc", "vmxnet3")
_LOOPBACK_TYPE = 772  # ARPHRD_LOOPBACK
_ETHER_TYPE = 1  # ARPHRD_ETHER
_EFA_RATE_NOTE = ("efa: the efa driver reports 4X EDR (100 Gb/s) for every port whatever "
                  "the link (drivers/infiniband/hw/efa/efa_verbs.c, efa_query_port); "
                  "its rate is left unknown")
_UP = {"active", "up", "linkup", "link_up"}
_DOWN = {"down", "init", "initializing", "armed", "polling", "disabled", "lowerlayerdown",
         "dormant", "notpresent"}

Run = Callable[[str], Optional[str]]


def live(root: str = "/") -> Run:
    """Answers a source name with the live host's text: the command's stdout where the
    tool exists and exits 0, the file's text; None otherwise."""
    from agent.gpu.host import run_command

    def run(name: str) -> Optional[str]:
        if name in FILES:
            path = os.path.join(root, FILES[name].lstrip("/"))
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    return fh.read(1 << 20)
            except OSError:
                return None
        argv = COMMANDS.get(name)
        if argv is None or shutil.which(argv[0]) is None:
            return None
        done = run_command(argv, COMMAND_TIMEOUT_S)
        return done.stdout if done.returncode == 0 else None
    return run


def replay(folder: str) -> Run:
    """Answers a source name from a capture's text folder: NAME.txt, unless NAME.rc says
    the tool failed; None where the tool was absent (NAME.absent) or nothing was kept."""
    def run(name: str) -> Optional[str]:
        try:
            # not stripped: nvidia-smi's matrix heading starts with a tab
            with open(os.path.join(folder, name + ".txt"), encoding="utf-8",
                      errors="replace") as fh:
                text: Optional[str] = fh.read(1 << 20)
        except OSError:
            text = None
        rc = sysfs.read(folder, name + ".rc")
        if text is None or (rc is not None and rc != "0"):
            return None
        return text
    return run


def _words(state: Optional[str]) -> Optional[str]:
    """"4: ACTIVE" -> "Active", "5: LinkUp" -> "LinkUp", "LINK_UP" -> "LinkUp"."""
    if not state:
        return None
    word = state.split(":", 1)[-1].strip() if re.match(r"^\d+:", state) else state.strip()
    word = re.sub(r"\s*\(\d+\)$", "", word)
    word = re.sub(r"^PORT_", "", word)
    if word.isupper() or "_" in word:
        word = "".join(part.capitalize() for part in word.lower().split("_"))
    return word or None


def _up(state: Optional[str]) -> Optional[bool]:
    key = (state or "").replace(" ", "").lower()
    if key in _UP:
        return True
    if key in _DOWN:
        return False
    return None


def _soft(name: str, node: Dict[str, Any]) -> bool:
    return (bool(node.get("virtual")) or (node.get("driver") or "") in _SOFT_DRIVERS
            or re.match(r"^(rxe|siw)", name) is not None)


def _rdma_kind(name: str, node: Dict[str, Any], link_layer: Optional[str],
               efa_names: List[str]) -> str:
    if (node.get("driver") == "efa" or node.get("vendor") == EFA_VENDOR
            or (node.get("vendor_id") or "").lower() == EFA_VENDOR or name in efa_names):
        return "efa"
    if _soft(name, node):
        return "software-roce"
    layer = (link_layer or "").lower()
    if layer == "infiniband":
        return "infiniband"
    if layer == "ethernet":
        return "roce"
    return "unknown"


def _interface_kind(iface: Dict[str, Any]) -> str:
    if iface.get("type") == _LOOPBACK_TYPE or iface.get("virtual"):
        return "virtual"
    if (iface.get("driver") or "") in _VIRTUAL_DRIVERS:
        return "virtual"
    if re.match(r"^(docker|veth|br-|virbr|cni|flannel|cali|tun|tap|ifb|lo$)", iface["name"]):
        return "virtual"
    if iface.get("type") == _ETHER_TYPE:
        return "ethernet"
    return "unknown"


def _rdma_ports(root: str, found: Dict[str, Optional[str]],
                notes: List[str]) -> List[Dict[str, Any]]:
    """One entry per RDMA port, sysfs first, the tools' text filling what it lacks."""
    nodes: Dict[str, Dict[str, Any]] = {}
    ports: Dict[str, Dict[int, Dict[str, Any]]] = {}
    sources: Dict[str, List[str]] = {}

    def node(name: str) -> Dict[str, Any]:
        ports.setdefault(name, {})
        sources.setdefault(name, [])
        return nodes.setdefault(name, {"name": name})

    def fill(target: Dict[str, Any], key: str, value: Any) -> None:
        if value is not None and target.get(key) is None:
            target[key] = value

    for dev in sysfs.read_rdma(root):
        entry = node(dev["name"])
        entry.update({k: v for k, v in dev.items() if k != "ports"})
        sources[dev["name"]].append("sysfs")
        for port in dev["ports"]:
            rate, width, speed = texts.parse_rate(port["rate"])
            ports[dev["name"]][port["port"]] = {
                "state": _words(port["state"]), "physical_state": _words(port["physical_state"]),
                "rate_gbps": rate, "width": width, "speed": speed,
                "link_layer": port["link_layer"]}
    for ca in texts.parse_ibstat(found.get("ibstat") or ""):
        entry = node(ca["name"])
        sources[ca["name"]].append("ibstat")
        fill(entry, "firmware", ca["firmware"])
        fill(entry, "hca_type", ca["ca_type"])
        for port in ca["ports"]:
            target = ports[ca["name"]].setdefault(port["port"], {})
            fill(target, "state", _words(port["state"]))
            fill(target, "physical_state", _words(port["physical_state"]))
            fill(target, "rate_gbps", port["rate_gbps"])
            fill(target, "link_layer", port["link_layer"])
    for dev in texts.parse_ibv_devinfo(found.get("ibv_devinfo") or ""):
        entry = node(dev["name"])
        sources[dev["name"]].append("ibv_devinfo")
        fill(entry, "firmware", dev["firmware"])
        fill(entry, "vendor_id", dev["vendor_id"])
        fill(entry, "board_id", dev["board_id"])
        for port in dev["ports"]:
            target = ports[dev["name"]].setdefault(port["port"], {})
            fill(target, "state", _words(port["state"]))
            fill(target, "rate_gbps", port["rate_gbps"])
            fill(target, "width", port["width"])
            fill(target, "link_layer", port["link_layer"])
    for link in texts.parse_rdma_link(found.get("rdma_link") or ""):
        entry = node(link["device"])
        sources[link["device"]].append("rdma link")
        target = ports[link["device"]].setdefault(link["port"], {})
        fill(target, "state", _words(link["state"]))
        fill(target, "physical_state", _words(link["physical_state"]))
        if link["netdev"]:
            target["netdev"] = link["netdev"]
    efa_names: List[str] = []
    for domain in texts.parse_fi_info(found.get("fi_info_efa") or "")["domains"]:
        name = texts.efa_device(domain.get("domain"))
        if domain.get("provider") == "efa" and name and name not in efa_names:
            efa_names.append(name)
            node(name)
            sources[name].append("fi_info")
            ports[name].setdefault(1, {})

    out: List[Dict[str, Any]] = []
    for name in sorted(nodes, key=_natural):
        dev = nodes[name]
        dev_ports = ports[name] or {1: {}}
        netdevs = list(dev.get("netdevs") or [])
        for number in sorted(dev_ports):
            port = dev_ports[number]
            kind = _rdma_kind(name, dev, port.get("link_layer"), efa_names)
            netdev = port.get("netdev") or (netdevs[number - 1] if len(netdevs) >= number
                                            else (netdevs[0] if netdevs else None))
            rate = port.get("rate_gbps")
            if kind == "efa" and rate is not None:
                rate = None
                if _EFA_RATE_NOTE not in notes:
                    notes.append(_EFA_RATE_NOTE)
            state = port.get("state")
            out.append({
                "name": name if number == 1 else f"{name}/{number}",
                "device": name,
                "port": number,
                "netdev": netdev,
                "kind": kind,
                "fabric": kind in FABRIC_KINDS,
                "link_layer": port.get("link_layer"),
                "state": state,
                "physical_state": port.get("physical_state"),
                "up": _up(state),
                "rate_gbps": rate,
                "width": port.get("width"),
                "speed": port.get("speed"),
                "firmware": dev.get("firmware"),
                "model": dev.get("hca_type"),
                "driver": dev.get("driver"),
                "pci_address": dev.get("pci_address"),
                "numa_node": dev.get("numa_node"),
                "mtu": None,
                "gpu_distance": {},
                "distance_source": None,
                "sources": sources[name],
                "_path": dev.get("device_path"),
            })
    return out


def _natural(name: str) -> List[Any]:
    """mlx5_2 before mlx5_10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _interfaces(root: str, taken: List[str]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for iface in sysfs.read_interfaces(root):
        if iface["name"] in taken:
            continue
        kind = _interface_kind(iface)
        speed = iface["speed_mbps"]
        state = _words(iface["operstate"])
        out.append({
            "name": iface["name"], "device": None, "port": None, "netdev": iface["name"],
            "kind": kind, "fabric": False,
            "link_layer": "Ethernet" if iface["type"] == _ETHER_TYPE else None,
            "state": state, "physical_state": None, "up": _up(state),
            "rate_gbps": speed / 1000.0 if speed else None,
            "width": None, "speed": None, "firmware": None, "model": None,
            "driver": iface["driver"], "pci_address": iface["pci_address"],
            "numa_node": iface["numa_node"], "mtu": iface["mtu"],
            "gpu_distance": {}, "distance_source": None, "sources": ["sysfs"],
            "_path": iface["device_path"],
        })
    return out


def _gpus(root: str, topo: Dict[str, Any]) -> List[Dict[str, Any]]:
    found = sysfs.read_gpus(root)
    if found:
        for gpu in found:
            listed = topo["gpus"].get(gpu["index"]) or {}
            if gpu["numa_node"] is None:
                gpu["numa_node"] = listed.get("numa_node")
        return found
    return [{"index": index, "pci_address": None, "path": None,
             "numa_node": topo["gpus"][index].get("numa_node")}
            for index in sorted(topo["gpus"])]


def network(root: str = "/", run: Optional[Run] = None) -> Dict[str, Any]:
    """The node's network fingerprint (fleet-network/1): {"format", "devices": [...],
    "gpus": [...], "gdr": {...}, "fabric_nics": int, "sources": [...], "notes": [...]}."""
    answer = run if run is not None else live(root)
    found: Dict[str, Optional[str]] = {name: answer(name) for name in SOURCES}
    notes: List[str] = []
    topo = texts.parse_topo(found.get("topo") or "")
    gpus = _gpus(root, topo)
    devices = _rdma_ports(root, found, notes)
    # soft-RoCE rides on an Ethernet NIC that stays a NIC of its own
    taken = [d["netdev"] for d in devices if d["netdev"] and d["kind"] != "software-roce"]
    devices += _interfaces(root, taken)
    for dev in devices:
        path = dev.pop("_path")
        listed = topo["nics"].get(dev["device"] or "")
        if listed:
            dev["gpu_distance"] = {str(i): level for i, level in sorted(listed.items())}
            dev["distance_source"] = "nvidia-smi topo -m"
            continue
        measured = {str(g["index"]): distance.sysfs_distance(
            g["path"], path, g["numa_node"], dev["numa_node"]) for g in gpus}
        known = {i: level for i, level in measured.items() if level is not None}
        if known:
            dev["gpu_distance"] = known
            dev["distance_source"] = "sysfs"
    modules = found.get("modules")
    verdict = gdr.gdr(texts.parse_modules(modules) if modules is not None else None,
                      texts.parse_kernel(found.get("uname")),
                      texts.parse_nvidia_module(found.get("nvidia_version")))
    return {
        "format": FORMAT,
        "devices": devices,
        "gpus": [{"index": g["index"], "pci_address": g["pci_address"],
                  "numa_node": g["numa_node"]} for g in gpus],
        "gdr": verdict,
        "fabric_nics": sum(1 for d in devices if d["fabric"]),
        "sources": [name for name in SOURCES if found.get(name) is not None],
        "notes": notes,
    }
